"""DP federated gradient boosting: the client half.

Given the public query (the released ensemble so far and the next tree's
structure), a client routes its Poisson-sampled rows to the new tree's leaves
and returns per-leaf (Σg, Σh) with g = p − y and h = p(1 − p) ∈ [0, 0.25]
(benchmark paper §3.4). It keeps its rows' current logits in the runtime's
per-client state and updates them with the trees released since its last
round; with an empty state it rebuilds them from the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query
from fedpriv.models.trees import RandomTree, leaf_statistics, logistic_grad_hess, route_columns


class BoostingClient:
    """Client handler for :class:`strategies.boosting.DPBoostingStrategy`."""

    method = "boosting"
    #: State entries that only save work; a runtime that serialises the state
    #: every round (Flower) drops them, as shipping them costs more than recomputing.
    cache_keys = ("leaf_all", "leaf_tree")

    def answer(
        self, query: Query, data: ClientData, sample: np.ndarray, state: dict[str, Any]
    ) -> np.ndarray:
        margins, leaf_all, tree = _advance(query, state, data.XT)
        g, h = logistic_grad_hess(margins[sample], data.y[sample])
        return leaf_statistics(leaf_all[sample], g, h, tree.n_leaves)

    def answer_many(
        self,
        query: Query,
        datas: Sequence[ClientData],
        samples: Sequence[np.ndarray],
        state: dict[str, Any],
    ) -> np.ndarray:
        """All clients' replies at once (rows of the result), bit-identical to :meth:`answer`.

        The in-process runtime's fast path: one routing pass over every
        client's rows instead of one per client. Each client's sums are
        accumulated in the same order as in :meth:`answer`, so the floats agree
        exactly.
        """
        ids = tuple(d.client_id for d in datas)
        if state.get("ids") != ids:
            sizes = np.array([d.n for d in datas])
            state.clear()
            state.update(
                ids=ids,
                XT=np.concatenate([d.XT for d in datas], axis=1),
                y=np.concatenate([d.y for d in datas]),
                offsets=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
            )
        y = state["y"]
        margins, leaf_all, tree = _advance(query, state, state["XT"])
        rows = np.concatenate([s + o for s, o in zip(samples, state["offsets"], strict=True)])
        owner = np.repeat(np.arange(len(datas)), [s.size for s in samples])
        leaf = leaf_all[rows]
        g, h = logistic_grad_hess(margins[rows], y[rows])
        cell = owner * tree.n_leaves + leaf
        size = len(datas) * tree.n_leaves
        sum_g = np.bincount(cell, weights=g, minlength=size).reshape(len(datas), -1)
        sum_h = np.bincount(cell, weights=h, minlength=size).reshape(len(datas), -1)
        return np.hstack([sum_g, sum_h])


def _advance(
    query: Query, state: dict[str, Any], XT: np.ndarray
) -> tuple[np.ndarray, np.ndarray, RandomTree]:
    """Bring every row's logit up to the released trees, then route every row once.

    Returns the logits, each row's leaf in the query's new tree (the sample's
    leaves now, everyone's margin update next round) and that tree. An empty
    or stale ``state`` is rebuilt from the public query.
    """
    feature, threshold = query.arrays["feature"], query.arrays["threshold"]
    values, base = query.arrays["leaf_values"], float(query.arrays["base"][0])
    t = values.shape[0]  # trees already released
    margins, applied = state.get("margins"), state.get("applied", 0)
    if margins is None or state.get("base") != base or applied > t:
        margins, applied = np.full(XT.shape[1], base), 0
    for k in range(applied, t):
        # The last tree's leaves were computed when its statistics were asked
        # for, so the common case re-routes nothing.
        if state.get("leaf_tree") == k and state.get("leaf_all") is not None:
            leaf = state["leaf_all"]
        else:
            leaf = route_columns(RandomTree(feature[k], threshold[k]), XT)
        margins += values[k][leaf]
    tree = RandomTree(feature[t], threshold[t])
    leaf_all = route_columns(tree, XT)
    state.update(margins=margins, applied=t, base=base, leaf_all=leaf_all, leaf_tree=t)
    return margins, leaf_all, tree
