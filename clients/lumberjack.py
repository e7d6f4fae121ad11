"""Lumberjack DP random forest: the client half (route rows one level, count).

Round t's query holds, for every tree, the splits of its layer-t nodes and
the map from last round's candidate children to this round's nodes. The
client moves each of its rows to its node (from its own last candidate and
the map), routes it by that node's split and returns, per tree, the class
counts of the 2·N_t candidate children — one count per row per tree, so one
record changes the reply by 1 in one coordinate per tree. Nothing is
subsampled (Lumberjack uses every record in every tree; Remark 4). A label
that is not a class index in [0, C) counts in no slot (the kernel skips it),
so a bypassed label check cannot move a count into another candidate's slot.

State: each row's candidate child in every tree, an (k, n) integer array.
Without it (a fresh Flower process with the state dropped) the client
cannot replay the walk, so the handler keeps it in the runtime's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query
from fedpriv.models import _forest_kernels
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import class_codes


class LumberjackClient:
    """Client handler for :class:`strategies.lumberjack.LumberjackStrategy`."""

    method = "lumberjack"

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        if np.asarray(sample).size != data.n:
            raise ValueError("Lumberjack counts every row: the sample must be all rows")
        a = query.arrays
        sizes = np.asarray(a["sizes"], dtype=np.int64)
        n_classes = int(query.config["n_classes"])
        k = sizes.size
        if int(query.config["n_trees"]) != k:
            raise ValueError(f"query holds {k} trees; config says {query.config['n_trees']}")
        y = class_codes(data.y, n_classes)  # −1: not a class, counted nowhere
        first = query.round == 0
        if first:
            cand = np.zeros((k, data.n), dtype=np.int64)
            index = np.full(1, -1, dtype=np.int64)
            index_starts = np.zeros(k, dtype=np.int64)
        else:
            cand = state.get("candidate")
            if cand is None or state.get("round") != query.round - 1:
                raise ValueError(f"round {query.round}: the client's walk state is missing")
            cand = np.array(cand, dtype=np.int64)  # writable, C order
            index = np.ascontiguousarray(a["index"], dtype=np.int64)
            index_starts = np.concatenate([[0], np.cumsum(a["index_sizes"])[:-1]]).astype(np.int64)
            if cand.size and np.any(cand.max(axis=1) >= np.asarray(a["index_sizes"])):
                raise ValueError("the query's index map is shorter than the client's candidates")
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        feature = np.ascontiguousarray(a["feature"], dtype=np.int64)
        if feature.size and (feature.min() < 0 or feature.max() >= data.X.shape[1]):
            raise ValueError(f"split features must lie in [0, {data.X.shape[1]})")
        out = np.zeros(2 * int(offsets[-1]) * n_classes)
        ok = _forest_kernels.route_and_count(
            data.X_rows,
            y,
            cand,
            index,
            index_starts,
            first,
            feature,
            np.ascontiguousarray(a["threshold"], dtype=np.float64),
            offsets,
            n_classes,
            out,
        )
        if not ok:
            raise ValueError("a row maps to no node of this layer: inconsistent index map")
        state.update(candidate=cand, round=query.round)
        return out
