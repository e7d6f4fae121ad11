"""Fully random DP forest: the client half (per-leaf class counts of every tree).

The query holds k complete random trees (heap order). The client routes its
rows through each (the compiled router of :mod:`fedpriv.models._kernels`)
and returns the (k · 2^D · C) class counts of the leaves. In ``"disjoint"``
mode each row counts in one tree only, chosen by a public hash of the row's
position (client id, row index) and the query's salt — never of its values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query
from fedpriv.models.lumberjack import splitmix64
from fedpriv.models.trees import RandomTree, check_routable, route


def tree_of_rows(client_id: int, n: int, n_trees: int, salt: int) -> np.ndarray:
    """Which tree each of a client's rows feeds in disjoint mode (data-independent)."""
    pos = (np.uint64(client_id) << np.uint64(40)) | np.arange(n, dtype=np.uint64)
    return (splitmix64(pos ^ np.uint64(salt)) % np.uint64(n_trees)).astype(np.int64)


class RandomForestClient:
    """Client handler for :class:`strategies.random_forest.RandomForestStrategy`."""

    method = "random_forest"

    def answer(
        self, query: Query, data: ClientData, sample: np.ndarray, state: dict[str, Any]
    ) -> np.ndarray:
        if np.asarray(sample).size != data.n:
            raise ValueError("the random forest counts every row: the sample must be all rows")
        cfg = query.config
        depth, n_classes = int(cfg["depth"]), int(cfg["n_classes"])
        features, thresholds = query.arrays["feature"], query.arrays["threshold"]
        k, leaves = features.shape[0], 1 << depth
        y = data.y.astype(np.int64)
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise ValueError(f"labels must lie in [0, {n_classes})")
        owner = None
        if cfg["mode"] == "disjoint":
            owner = tree_of_rows(data.client_id, data.n, k, int(cfg["assign_salt"]))
        out = np.zeros((k, leaves, n_classes))
        for t in range(k):
            tree = RandomTree(features[t], thresholds[t])
            if tree.depth != depth:
                raise ValueError(f"tree {t} has depth {tree.depth}; the query says {depth}")
            check_routable(tree, data.XT.shape[0])
            leaf = route(tree, data.X)
            keep = slice(None) if owner is None else owner == t
            out[t] = np.bincount(
                leaf[keep].astype(np.int64) * n_classes + y[keep], minlength=leaves * n_classes
            ).reshape(leaves, n_classes)
        return out.ravel()
