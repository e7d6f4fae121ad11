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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.clients.reply_settings import require_rate, setting_choice, setting_int

from fedpriv.federation.protocol import ClientData, Query, ReplySensitivity, require_every_record
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


class RandomForestClient:
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
        cfg = query.config
        depth, n_classes = int(cfg["depth"]), int(cfg["n_classes"])
        features, thresholds = query.arrays["feature"], query.arrays["threshold"]
        k, leaves = features.shape[0], 1 << depth
        if k != int(cfg["trees"]):  # the count the node's sensitivity is derived from
            raise ValueError(f"query holds {k} trees; its config says {cfg['trees']}")
        y = class_codes(data.y, n_classes)  # −1: not a class, counted nowhere
        owner = None
        if cfg["mode"] == "disjoint":
            owner = tree_of_rows(key, data.n, k)
        out = np.zeros((k, leaves, n_classes))
        for t in range(k):
            tree = RandomTree(features[t], thresholds[t])
            if tree.depth != depth:
                raise ValueError(f"tree {t} has depth {tree.depth}; the query says {depth}")
            check_routable(tree, data.XT.shape[0])
            leaf = route(tree, data.X)
            keep = y >= 0 if owner is None else (owner == t) & (y >= 0)
            out[t] = np.bincount(
                leaf[keep].astype(np.int64) * n_classes + y[keep], minlength=leaves * n_classes
            ).reshape(leaves, n_classes)
        return out.ravel()
