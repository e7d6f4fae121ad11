"""Lumberjack DP random forest: the client half (route rows one level, count).

Round t's query holds, for every tree, the splits of its layer-t nodes and
the map from last round's candidate children to this round's nodes. The
client moves each of its rows to its node (from its own last candidate and
the map), routes it by that node's split and returns, per tree, the class
counts of the 2·N_t candidate children — one count per row per tree, so one
record changes the reply by 1 in one coordinate per tree. Nothing is
subsampled (Lumberjack uses every record in every tree; Remark 4).

State: each row's candidate child in every tree, an (k, n) integer array.
Without it (a fresh Flower process with the state dropped) the client
cannot replay the walk, so the handler keeps it in the runtime's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query


class LumberjackClient:
    """Client handler for :class:`strategies.lumberjack.LumberjackStrategy`."""

    method = "lumberjack"

    def answer(
        self, query: Query, data: ClientData, sample: np.ndarray, state: dict[str, Any]
    ) -> np.ndarray:
        if np.asarray(sample).size != data.n:
            raise ValueError("Lumberjack counts every row: the sample must be all rows")
        a = query.arrays
        sizes = np.asarray(a["sizes"], dtype=np.int64)
        n_classes = int(query.config["n_classes"])
        k = sizes.size
        if int(query.config["n_trees"]) != k:
            raise ValueError(f"query holds {k} trees; config says {query.config['n_trees']}")
        y = data.y.astype(np.int64)
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise ValueError(f"labels must lie in [0, {n_classes}); got {y.min()}..{y.max()}")
        if query.round == 0:
            node = np.zeros((k, data.n), dtype=np.int64)
        else:
            cand = state.get("candidate")
            if cand is None or state.get("round") != query.round - 1:
                raise ValueError(f"round {query.round}: the client's walk state is missing")
            index = np.asarray(a["index"], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(a["index_sizes"])])
            node = np.empty_like(cand)
            for t in range(k):
                node[t] = index[starts[t] + cand[t]]
        if node.size and node.min() < 0:
            raise ValueError("a row maps to an empty node: the query's index map is inconsistent")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        X = data.X_rows
        rows = np.arange(data.n)
        cand = np.empty_like(node)
        out = np.zeros(2 * int(offsets[-1]) * n_classes)
        for t in range(k):
            if node[t].size and node[t].max() >= sizes[t]:
                raise ValueError(f"tree {t}: node index outside the layer's {sizes[t]} nodes")
            f = a["feature"][offsets[t] + node[t]]
            thr = a["threshold"][offsets[t] + node[t]]
            cand[t] = 2 * node[t] + (X[rows, f] > thr)
            base = 2 * int(offsets[t]) * n_classes
            counts = np.bincount(cand[t] * n_classes + y, minlength=2 * int(sizes[t]) * n_classes)
            out[base : base + counts.size] = counts
        state.update(candidate=cand, round=query.round)
        return out
