"""Lumberjack DP random forest: the client half (walk rows through a stage, count).

A *stage* query holds, for every tree, the complete subtrees of the stage
(every node's split, level by level) and, after the first stage, the
released bits saying which bottom nodes of the previous stage were grown.
The client moves each row from its last candidate (bottom node and side) to
its root in this stage, or stops it if that bottom node was not grown, walks
it down the stage and returns one count per node — one per row per level
per tree, so one record changes the reply by 1 in at most ``height``
coordinates per tree. The *leaf* query holds the released pruned trees; the
client returns each leaf's class counts (one count per row per tree).
Nothing is subsampled (Lumberjack uses every record in every tree; Remark 4).
A label that is not a class index in [0, C) counts in no leaf slot, so a
bypassed label check cannot move a count into another leaf's slot.

Everything a query holds is public configuration or a released output (the
sparse threshold's Heavy/⊥ bits), so the client learns nothing about other
clients' rows; it cannot tell why a node was not grown.

State: each row's last candidate in every tree, a (k, n) integer array.
Without it (a fresh Flower process with the state dropped) the client
cannot replay the walk, so the handler keeps it in the runtime's state.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from fedpriv.clients.reply_settings import require_rate, setting_choice, setting_int

from fedpriv.federation.protocol import ClientData, Query, ReplySensitivity, require_every_record
from fedpriv.models import _forest_kernels, recalibration
from fedpriv.models.forest_sensitivity import leaf_count_sensitivity, stage_count_sensitivity
from fedpriv.models.heavy_hitters import ForestModel
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import class_codes


def _check_features(feature: np.ndarray, width: int) -> np.ndarray:
    feature = np.ascontiguousarray(feature, dtype=np.int64)
    inner = feature[feature >= 0]
    if feature.size and (feature.min() < -1 or (inner.size and inner.max() >= width)):
        raise ValueError(f"split features must lie in [0, {width}) (−1: a leaf)")
    return feature


class LumberjackClient:
    """Client handler for :class:`fedpriv.strategies.lumberjack.LumberjackStrategy`."""

    method = "lumberjack"
    #: The stages a query belongs to, by its ``kind``.
    STAGES: ClassVar[dict[str, str]] = {
        "stage": "structure",
        "leaves": "leaves",
        recalibration.STAGE: "recalibration",
    }
    #: Most levels in one structure stage (:class:`fedpriv.strategies.lumberjack_config.LumberjackConfig`).
    MAX_HEIGHT = 10

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """A structure stage: one count per level per tree (L1 k·h, L2 √(k·h)); the
        leaves: one count per tree (k, √k); the recalibration sums: one record's vector,
        clipped to L2 :data:`~fedpriv.models.recalibration.SENSITIVITY`. Every record,
        every round (q = 1)."""
        require_rate(query)
        kind = setting_choice(query, "kind", self.STAGES)
        classes = setting_int(query, "n_classes", minimum=2)
        if kind == recalibration.STAGE:
            d = recalibration.reply_length(classes)
            if query.reply_length != d:
                raise ValueError(f"reply_length must be {d} for {classes} classes")
            l2 = recalibration.SENSITIVITY
            return ReplySensitivity(stage=self.STAGES[kind], l1=l2 * d**0.5, l2=l2)
        trees = setting_int(query, "n_trees")
        if kind == "leaves":
            l1, l2 = leaf_count_sensitivity(trees, disjoint=False)
        else:
            height = setting_int(query, "height", maximum=self.MAX_HEIGHT)
            l1, l2 = stage_count_sensitivity(trees, height)
        return ReplySensitivity(stage=self.STAGES[kind], l1=l1, l2=l2)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        require_every_record(sample, data, "Lumberjack counts every row")
        cfg = query.config
        if cfg["kind"] == recalibration.STAGE:  # the released forest's probabilities
            forest = ForestModel.from_arrays(query.arrays)
            n_classes = int(cfg["n_classes"])
            return recalibration.record_sums(
                forest.raw_scores(data.X), class_codes(data.y, n_classes)
            )
        n_classes, k = int(cfg["n_classes"]), int(cfg["n_trees"])
        y = class_codes(data.y, n_classes)  # −1: not a class, counted nowhere
        if cfg["kind"] == "leaves":
            return self._leaf_counts(query, data, y, n_classes, k)
        return self._stage_counts(query, data, state, k)

    def _stage_counts(self, query: Query, data: ClientData, state, k: int) -> np.ndarray:
        a = query.arrays
        roots = np.ascontiguousarray(a["roots"], dtype=np.int64)
        height = int(query.config["height"])
        if roots.size != k:
            raise ValueError(f"query holds {roots.size} trees; config says {k}")
        first = query.round == 0
        if first:
            if np.any(roots != 1):
                raise ValueError("the first stage must start at each tree's root")
            cand = np.zeros((k, data.n), dtype=np.int64)
            rank = np.full(1, -1, dtype=np.int64)
            starts = np.zeros(k, dtype=np.int64)
        else:
            cand = state.get("candidate")
            if cand is None or state.get("round") != query.round - 1:
                raise ValueError(f"round {query.round}: the client's walk state is missing")
            cand = np.array(cand, dtype=np.int64)  # writable, C order
            grow = np.asarray(a["grow"]).astype(bool)
            sizes = np.asarray(a["grow_sizes"], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            rank = np.full(grow.size, -1, dtype=np.int64)
            for t in range(k):
                mine = grow[starts[t] : starts[t] + sizes[t]]
                if 2 * int(mine.sum()) != roots[t]:
                    raise ValueError(f"tree {t}: {roots[t]} roots for {int(mine.sum())} grown")
                rank[starts[t] : starts[t] + sizes[t]][mine] = np.arange(int(mine.sum()))
            if cand.size and np.any(cand.max(axis=1) >= 2 * sizes):
                raise ValueError("the query's grow bits are fewer than the client's candidates")
        per_tree = roots * ((1 << height) - 1)
        offsets = np.concatenate([[0], np.cumsum(per_tree)]).astype(np.int64)
        feature = _check_features(a["feature"], data.X.shape[1])
        if feature.size != offsets[-1] or np.any(feature < 0):
            raise ValueError(f"the stage needs {offsets[-1]} splits; got {feature.size}")
        out = np.zeros(int(offsets[-1]))
        ok = _forest_kernels.route_stage(
            data.X_rows,
            cand,
            rank,
            starts,
            first,
            roots,
            height,
            feature,
            np.ascontiguousarray(a["threshold"], dtype=np.float64),
            offsets,
            out,
        )
        if not ok:
            raise ValueError("a row maps to no root of this stage: inconsistent grow bits")
        state.update(candidate=cand, round=query.round)
        return out

    def _leaf_counts(self, query: Query, data: ClientData, y, n_classes: int, k: int):
        a = query.arrays
        sizes = np.asarray(a["tree_sizes"], dtype=np.int64)
        if sizes.size != k or np.any(sizes < 1):
            raise ValueError(f"query holds {sizes.size} trees; config says {k}")
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        feature = _check_features(a["feature"], data.X.shape[1])
        left = np.ascontiguousarray(a["left"], dtype=np.int64)
        if feature.size != offsets[-1] or left.size != offsets[-1]:
            raise ValueError("the trees' arrays disagree on their sizes")
        if np.any((left >= 0) != (feature >= 0)):
            raise ValueError("a split node without a feature (or a leaf with one)")
        node = np.zeros((k, data.n), dtype=np.int64)
        ok = _forest_kernels.apply_forest(
            data.X_rows,
            feature,
            np.ascontiguousarray(a["threshold"], dtype=np.float64),
            left,
            np.ascontiguousarray(a["right"], dtype=np.int64),
            offsets,
            node,
        )
        if not ok:
            raise ValueError("a child index points outside its tree")
        out = []
        for t in range(k):
            is_leaf = left[offsets[t] : offsets[t + 1]] < 0
            leaf = (np.cumsum(is_leaf) - 1)[node[t]]
            n_leaves = int(is_leaf.sum())
            keep = y >= 0  # a label outside the class set counts in no slot
            out.append(
                np.bincount(leaf[keep] * n_classes + y[keep], minlength=n_leaves * n_classes)
            )
        return np.concatenate(out).astype(np.float64)
