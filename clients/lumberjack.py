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
cannot replay the walk, so the handler keeps it in the runtime's state. In
process, :meth:`LumberjackClient.answer_many` answers every client at once, bit
for bit as each would, its state every client's walk in one (k, N) array
(:mod:`fedpriv.clients.batched`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

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


class LumberjackClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.lumberjack.LumberjackStrategy`."""

    method = "lumberjack"
    #: The stages a query belongs to, by its ``kind``.
    STAGES: ClassVar[dict[str, str]] = {
        "stage": "structure",
        "leaves": "leaves",
        recalibration.STAGE: "recalibration",
    }
    #: Most levels in one structure stage
    #: (:class:`fedpriv.strategies.lumberjack_config.LumberjackConfig`).
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
        stage = _Stage.of(query, k, data.X.shape[1])
        if stage.first:
            cand = np.zeros((k, data.n), dtype=np.int64)
        else:
            cand = state.get("candidate")
            if cand is None or state.get("round") != query.round - 1:
                raise ValueError(f"round {query.round}: the client's walk state is missing")
            cand = np.array(cand, dtype=np.int64)  # writable, C order
            stage.check_walk(cand)
        out = np.zeros(int(stage.offsets[-1]))
        stage.walk(data.X_rows, cand, np.array([0, data.n]), out[None])
        state.update(candidate=cand, round=query.round)
        return out

    def _leaf_counts(self, query: Query, data: ClientData, y, n_classes: int, k: int):
        leaves = _Leaves.of(query, k, data.X.shape[1])
        return leaves.counts(data.X_rows, y, np.zeros(data.n, dtype=np.int64), 1, n_classes)[0]

    def answer_many(self, query, datas, samples, state, keys=None) -> np.ndarray:
        """All clients' replies (rows), each bit-identical to :meth:`answer`'s.

        The answering clients' rows are walked once, end to end
        (:mod:`fedpriv.clients.batched`), each row's visits and leaf counted in its
        client's row (counts: exact in any order). The walk state is every
        client's candidates in one (trees, rows) array plus the round each
        client's walk reached: a client that missed a stage is refused as
        :meth:`answer` refuses it. The recalibration sums are each client's own
        call on its block of the scored rows. A client the round did not ask (an
        empty sample) gets zeros and keeps its walk; ``state`` is the runtime's one
        shared state.
        """
        active = answering(datas, samples, "Lumberjack counts every row")
        rows = client_rows(datas, state)
        cfg, K = query.config, len(datas)
        if cfg["kind"] == recalibration.STAGE:
            scores = ForestModel.from_arrays(query.arrays).raw_scores(rows.data.X)
            codes = class_codes(rows.data.y, int(cfg["n_classes"]))
            out = np.zeros((K, query.reply_length))
            for i in np.flatnonzero(active):
                b = rows.block(i)
                out[i] = recalibration.record_sums(scores[b], codes[b])
            return out
        n_classes, k = int(cfg["n_classes"]), int(cfg["n_trees"])
        d = rows.data.X.shape[1]
        mine = rows.row_mask(active)
        every = bool(mine.all())
        X = rows.data.X_rows if every else rows.data.X_rows[mine]
        if cfg["kind"] == "leaves":
            y = class_codes(rows.data.y if every else rows.data.y[mine], n_classes)
            owner = rows.owner if every else rows.owner[mine]
            return _Leaves.of(query, k, d).counts(X, y, owner, K, n_classes)
        stage = _Stage.of(query, k, d)
        walked = state.get("walked", np.full(K, -1, dtype=np.int64))
        if stage.first:
            cand_all = np.zeros((k, mine.size), dtype=np.int64)
        else:
            cand_all = state.get("candidate")
            if cand_all is None or np.any(walked[active] != query.round - 1):
                raise ValueError(f"round {query.round}: the client's walk state is missing")
            cand_all = np.array(cand_all, dtype=np.int64)  # writable, C order
        cand = cand_all if every else np.ascontiguousarray(cand_all[:, mine])
        if not stage.first:
            stage.check_walk(cand)
        out = np.zeros((K, int(stage.offsets[-1])))
        sizes = np.diff(rows.starts) * active  # the walked rows: the answering clients'
        stage.walk(X, cand, np.concatenate([[0], np.cumsum(sizes)]), out)
        if not every:
            cand_all[:, mine] = cand
        walked = walked.copy()
        walked[active] = query.round
        state.update(candidate=cand_all, walked=walked)
        return out


@dataclass(frozen=True, kw_only=True)
class _Stage:
    """A structure stage's public walk, checked (:func:`_forest_kernels.route_stage`)."""

    first: bool
    roots: np.ndarray
    height: int
    rank: np.ndarray
    rank_starts: np.ndarray
    grown: np.ndarray | None  # bottom nodes of the previous stage per tree (later stages)
    offsets: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray

    @classmethod
    def of(cls, query: Query, k: int, width: int) -> _Stage:
        a = query.arrays
        roots = np.ascontiguousarray(a["roots"], dtype=np.int64)
        height = int(query.config["height"])
        if roots.size != k:
            raise ValueError(f"query holds {roots.size} trees; config says {k}")
        first, sizes = query.round == 0, None
        if first:
            if np.any(roots != 1):
                raise ValueError("the first stage must start at each tree's root")
            rank = np.full(1, -1, dtype=np.int64)
            starts = np.zeros(k, dtype=np.int64)
        else:
            grow = np.asarray(a["grow"]).astype(bool)
            sizes = np.asarray(a["grow_sizes"], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            rank = np.full(grow.size, -1, dtype=np.int64)
            for t in range(k):
                mine = grow[starts[t] : starts[t] + sizes[t]]
                if 2 * int(mine.sum()) != roots[t]:
                    raise ValueError(f"tree {t}: {roots[t]} roots for {int(mine.sum())} grown")
                rank[starts[t] : starts[t] + sizes[t]][mine] = np.arange(int(mine.sum()))
        per_tree = roots * ((1 << height) - 1)
        offsets = np.concatenate([[0], np.cumsum(per_tree)]).astype(np.int64)
        feature = _check_features(a["feature"], width)
        if feature.size != offsets[-1] or np.any(feature < 0):
            raise ValueError(f"the stage needs {offsets[-1]} splits; got {feature.size}")
        threshold = np.ascontiguousarray(a["threshold"], dtype=np.float64)
        return cls(first=first, roots=roots, height=height, rank=rank, rank_starts=starts,
                   grown=sizes, offsets=offsets, feature=feature,
                   threshold=threshold)  # fmt: skip

    def check_walk(self, cand: np.ndarray) -> None:
        """Refuse candidates past the query's grow bits (a later stage's walk)."""
        if cand.size and np.any(cand.max(axis=1) >= 2 * self.grown):
            raise ValueError("the query's grow bits are fewer than the client's candidates")

    def walk(self, X: np.ndarray, cand: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
        """Walk the rows ``X`` on from ``cand`` (updated), client c's rows
        ``starts[c]:starts[c + 1]`` counting in ``out[c]``."""
        ok = _forest_kernels.route_stage_clients(
            X, cand, self.rank, self.rank_starts, self.first, self.roots, self.height,
            self.feature, self.threshold, self.offsets, starts.astype(np.int64), out,
        )  # fmt: skip
        if not ok:
            raise ValueError("a row maps to no root of this stage: inconsistent grow bits")


@dataclass(frozen=True, kw_only=True)
class _Leaves:
    """The leaf query's released pruned trees, checked (:func:`_forest_kernels.apply_forest`)."""

    offsets: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @classmethod
    def of(cls, query: Query, k: int, width: int) -> _Leaves:
        a = query.arrays
        sizes = np.asarray(a["tree_sizes"], dtype=np.int64)
        if sizes.size != k or np.any(sizes < 1):
            raise ValueError(f"query holds {sizes.size} trees; config says {k}")
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        feature = _check_features(a["feature"], width)
        left = np.ascontiguousarray(a["left"], dtype=np.int64)
        if feature.size != offsets[-1] or left.size != offsets[-1]:
            raise ValueError("the trees' arrays disagree on their sizes")
        if np.any((left >= 0) != (feature >= 0)):
            raise ValueError("a split node without a feature (or a leaf with one)")
        return cls(offsets=offsets, feature=feature,
                   threshold=np.ascontiguousarray(a["threshold"], dtype=np.float64), left=left,
                   right=np.ascontiguousarray(a["right"], dtype=np.int64))  # fmt: skip

    def counts(self, X, y, owner: np.ndarray, clients: int, n_classes: int) -> np.ndarray:
        """(clients, ·): each leaf's class counts, tree after tree, of the rows ``X``
        (labels ``y``) in their client's row ``owner``."""
        k = self.offsets.size - 1
        node = np.zeros((k, X.shape[0]), dtype=np.int64)
        ok = _forest_kernels.apply_forest(
            X, self.feature, self.threshold, self.left, self.right, self.offsets, node
        )
        if not ok:
            raise ValueError("a child index points outside its tree")
        keep = y >= 0  # a label outside the class set counts in no slot
        out = []
        for t in range(k):
            is_leaf = self.left[self.offsets[t] : self.offsets[t + 1]] < 0
            leaf = (np.cumsum(is_leaf) - 1)[node[t]]
            slots = int(is_leaf.sum()) * n_classes
            cell = owner[keep] * slots + leaf[keep] * n_classes + y[keep]
            out.append(np.bincount(cell, minlength=clients * slots).reshape(clients, slots))
        return np.concatenate(out, axis=1).astype(np.float64)
