"""Fully random DP forest: the client half (per-leaf class counts of every tree).

The query holds k complete random trees (heap order). The client routes its
rows through each (the compiled router of :mod:`fedpriv.models._kernels`)
and returns the (k · 2^D · C) class counts of the leaves. In ``"disjoint"``
mode each row counts in one tree only, drawn uniformly by its client from the
client's own secret key (private randomness, fixed for the run): one record
then changes one count of one tree, so the L1/L2 sensitivity is 1. A public
hash of the row's position would not do: removing row 0 would move every
later row's tree (81 counts in L1 on heart's first client at 5 trees × depth 4,
1,133 on Adult's at 10 × 8; tests/strategies/test_release_boundary_random_forest.py).

A label that is not a class index in [0, C) (validated where the data enters,
but a caller may bypass that) counts in no slot: bincount of leaf·C + y would
otherwise put it in a neighbouring leaf's or tree's counts, or past the end.
In process, :meth:`RandomForestClient.answer_many` answers every client at once,
bit for bit as each would, each client drawing its rows' trees from its own key.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.clients.batched import answering, client_rows
from fedpriv.clients.reply_settings import require_rate, setting_choice, setting_int

from fedpriv.federation.protocol import (
    ClientData,
    ClientHandler,
    Query,
    ReplySensitivity,
    require_every_record,
)
from fedpriv.models.forest_sensitivity import leaf_count_sensitivity
from fedpriv.models.trees import RandomTree, check_routable, route
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import class_codes

#: The one stage of a random forest: every leaf's class counts.
STAGE = "leaf_counts"
#: The deepest tree a query may hold (:class:`fedpriv.strategies.random_forest.RandomForestConfig`).
MAX_DEPTH = 16


def tree_of_rows(key: SecretKey, n: int, n_trees: int) -> np.ndarray:
    """Which tree each of a client's ``n`` rows feeds in disjoint mode.

    i.i.d. uniform over the trees, from the client's secret key: row i's tree
    is the i-th draw of one stream, so appending a row moves no other row,
    and in distribution removing any row leaves the others i.i.d. uniform.
    """
    if key is None:
        raise ValueError("disjoint mode needs the client's secret key (key=...)")
    return key.generator("tree-assignment").integers(0, n_trees, size=n)


class RandomForestClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.random_forest.RandomForestStrategy`."""

    method = "random_forest"

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """The leaf counts of ``trees`` trees: one count per tree (mode ``all``) or in
        one tree (``disjoint``) per record (:func:`leaf_count_sensitivity`); q = 1."""
        require_rate(query)
        trees = setting_int(query, "trees")
        depth = setting_int(query, "depth", maximum=MAX_DEPTH)
        classes = setting_int(query, "n_classes", minimum=2)
        mode = setting_choice(query, "mode", ("all", "disjoint"))
        if query.reply_length != trees * (1 << depth) * classes:
            raise ValueError(
                f"reply_length must be trees·2^depth·n_classes = "
                f"{trees * (1 << depth) * classes}; got {query.reply_length}"
            )
        l1, l2 = leaf_count_sensitivity(trees, disjoint=mode == "disjoint")
        return ReplySensitivity(stage=STAGE, l1=l1, l2=l2)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        require_every_record(sample, data, "the random forest counts every row")
        trees = _trees(query, data.XT.shape[0])
        owner = None
        if query.config["mode"] == "disjoint":
            owner = tree_of_rows(key, data.n, len(trees))
        y = class_codes(data.y, int(query.config["n_classes"]))  # −1: not a class, nowhere
        return _counts(query, trees, data.X, y, owner, np.zeros(data.n, dtype=np.int64), 1)[0]

    def answer_many(self, query, datas, samples, state, keys=None) -> np.ndarray:
        """All clients' replies (rows), each bit-identical to :meth:`answer`'s.

        The rows are routed once, end to end (:mod:`fedpriv.clients.batched`), each
        row's leaf counted in its client's row (counts: exact in any order). In
        ``disjoint`` mode each client draws its rows' trees from its own key
        (``keys[i]``), as :meth:`answer` does; never one draw for all. A client the
        round did not ask (an empty sample) gets zeros; no state is kept but the
        cached rows.
        """
        active = answering(datas, samples, "the random forest counts every row")
        rows = client_rows(datas, state)
        trees = _trees(query, rows.data.XT.shape[0])
        owner = None
        if query.config["mode"] == "disjoint":
            if keys is None or len(keys) != len(datas):
                raise ValueError("disjoint mode needs every client's secret key (keys=...)")
            owner = np.full(rows.owner.size, -1, dtype=np.int64)  # an unasked row: no tree
            for i in np.flatnonzero(active):
                owner[rows.block(i)] = tree_of_rows(keys[i], datas[i].n, len(trees))
        y = class_codes(rows.data.y, int(query.config["n_classes"]))
        y = np.where(rows.row_mask(active), y, -1)  # an unasked client's rows count nowhere
        return _counts(query, trees, rows.data.X, y, owner, rows.owner, len(datas))


def _trees(query: Query, n_features: int) -> list[RandomTree]:
    """The query's k complete trees, checked against its ``trees`` and ``depth``."""
    cfg = query.config
    depth = int(cfg["depth"])
    features, thresholds = query.arrays["feature"], query.arrays["threshold"]
    k = features.shape[0]
    if k != int(cfg["trees"]):  # the count the node's sensitivity is derived from
        raise ValueError(f"query holds {k} trees; its config says {cfg['trees']}")
    trees = []
    for t in range(k):
        tree = RandomTree(features[t], thresholds[t])
        if tree.depth != depth:
            raise ValueError(f"tree {t} has depth {tree.depth}; the query says {depth}")
        check_routable(tree, n_features)
        trees.append(tree)
    return trees


def _counts(query: Query, trees, X, y, tree_of_row, client_of_row, clients: int) -> np.ndarray:
    """(clients, k · 2^D · C): each client's leaf class counts, tree after tree, of the
    rows ``X`` (class codes ``y``; −1 counts nowhere) it holds (``client_of_row``),
    each row in every tree or only in its ``tree_of_row`` (disjoint mode)."""
    leaves, n_classes = 1 << int(query.config["depth"]), int(query.config["n_classes"])
    slots = leaves * n_classes
    out = np.zeros((clients, len(trees), slots))
    for t, tree in enumerate(trees):
        leaf = route(tree, X)
        keep = y >= 0 if tree_of_row is None else (tree_of_row == t) & (y >= 0)
        cell = client_of_row[keep] * slots + leaf[keep].astype(np.int64) * n_classes + y[keep]
        out[:, t] = np.bincount(cell, minlength=clients * slots).reshape(clients, slots)
    return out.reshape(clients, -1)
