"""Lumberjack's pruning: MarkHeavyHitters (Algorithm 1), the pruned tree, private leaves.

Lebeda, Erb, Cebere & Bellet, "Lumberjack", §4.1 and §5, Section J. The
stages come from :mod:`fedpriv.models.lumberjack`; CheckThreshold is
:class:`fedpriv.privacy.SparseThreshold` (or any ``counts -> bool`` function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedpriv.models.base import ReleasedModel
from fedpriv.models.recalibration import LinearRecalibration
from fedpriv.privacy.randomness import check_private


def mark_heavy_hitters(
    counts: list[np.ndarray],
    parents: list[np.ndarray],
    check: Callable[[np.ndarray], np.ndarray],
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Algorithm 1 (MarkHeavyHitters) on layers 0..h−1; returns (heavy, queried) masks.

    ``counts[t]`` are the node counts of layer t, ``parents[t]`` their parent
    indices; ``check(counts) -> bool array`` is CheckThreshold (one call per
    batch, answers in order). Disjoint subtrees are processed together: Phase
    1 queries, in ascending label order, every unmarked node of the middle
    layer under the current roots; Phase 2 recurses below the Heavy ones;
    Phase 3 on the top half. A node is queried at most once; Light marks are
    implicit below a ⊥ (Section J).
    """
    h = len(counts)
    heavy = [np.zeros(c.size, dtype=bool) for c in counts]
    light = [np.zeros(c.size, dtype=bool) for c in counts]
    queried = [np.zeros(c.size, dtype=bool) for c in counts]

    def down(mask: np.ndarray, s: int, t: int) -> np.ndarray:
        for level in range(s + 1, t + 1):
            mask = mask[parents[level]]
        return mask

    def mark_up(idx: np.ndarray, t: int) -> None:
        heavy[t][idx] = True
        for level in range(t, 0, -1):
            idx = np.unique(parents[level][idx])
            idx = idx[~heavy[level - 1][idx]]  # stop at nodes already Heavy
            if idx.size == 0:
                return
            heavy[level - 1][idx] = True

    def solve(roots: np.ndarray, s: int, height: int) -> None:
        if height <= 0 or not roots.any():
            return
        mid = s + height // 2
        at_mid = down(roots, s, mid)
        ask = np.flatnonzero(at_mid & ~heavy[mid] & ~light[mid])
        if np.any(queried[mid][ask]):
            raise AssertionError("a node was queried twice")
        if ask.size:
            queried[mid][ask] = True
            top = np.asarray(check(counts[mid][ask]), dtype=bool)
            light[mid][ask[~top]] = True
            if top.any():
                mark_up(ask[top], mid)
        if height >= 3 and mid + 1 < h:
            below = down(at_mid & heavy[mid], mid, mid + 1)
            solve(below, mid + 1, height - height // 2 - 1)
        if height >= 2:
            solve(roots, s, height // 2)

    solve(np.ones(counts[0].size, dtype=bool), 0, h)
    return heavy, queried


@dataclass(frozen=True)
class PrunedTree:
    """Heavy nodes as splits, their other children as leaves (arrays in BFS order).

    Structure only: released Heavy bits and public splits. A leaf's count is
    never stored here (the learner releases leaf scores separately).
    """

    feature: np.ndarray  # (M,) −1 for leaves
    threshold: np.ndarray
    left: np.ndarray  # (M,) −1 for leaves
    right: np.ndarray
    key: np.ndarray  # (M,) path keys (for the structure-independence test)

    @property
    def is_leaf(self) -> np.ndarray:
        return self.left < 0

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Index of the leaf each row falls in."""
        node = np.zeros(X.shape[0], dtype=np.int64)
        rows = np.arange(X.shape[0])
        while True:
            inner = self.left[node] >= 0
            if not inner.any():
                return node
            r, n = rows[inner], node[inner]
            go_right = X[r, self.feature[n]] > self.threshold[n]
            node[inner] = np.where(go_right, self.right[n], self.left[n])


@dataclass(frozen=True)
class ForestModel(ReleasedModel):
    """Pruned trees and each leaf's released class scores.

    ``pooled=False``: each tree votes its leaf's scores (one-hot EM labels)
    and the forest averages the votes. ``pooled=True`` (Gaussian leaves): the
    scores are the noisy class counts and the forest predicts from their sums
    over the trees, clipped at 0 and normalised: a leaf's say grows with its
    size (small leaves, whose proportions are mostly noise, barely move the
    prediction) and the sums stay unbiased (clipping each leaf first would
    push small leaves towards ½). Post-processing of the released counts.
    """

    trees: tuple[PrunedTree, ...]
    leaf_scores: tuple[np.ndarray, ...]  # (M, C) per tree
    pooled: bool = False
    #: The released map of the scores (:mod:`fedpriv.models.recalibration`), if any.
    recalibration: LinearRecalibration | None = None

    def class_scores(self, X: np.ndarray) -> np.ndarray:
        """(n, C) class probabilities (recalibrated when the forest has a map)."""
        scores = self.raw_scores(X)
        return scores if self.recalibration is None else self.recalibration.apply(scores)

    def raw_scores(self, X: np.ndarray) -> np.ndarray:
        """(n, C) class scores of the trees' leaves, before any recalibration."""
        X = np.asarray(X, dtype=np.float64)
        n_classes = self.leaf_scores[0].shape[1]
        total = np.zeros((X.shape[0], n_classes))
        for tree, scores in zip(self.trees, self.leaf_scores, strict=True):
            total += scores[tree.apply(X)]
        if not self.pooled:
            return total / len(self.trees)
        total = np.maximum(total, 0.0)
        mass = total.sum(axis=1, keepdims=True)
        return np.where(mass > 0, total / np.where(mass > 0, mass, 1.0), 1.0 / n_classes)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1): the fraction of trees voting 1 (binary tasks)."""
        return self.class_scores(X)[:, 1]

    def explain(self, schema=None):
        """Internal nodes per schema column (:class:`fedpriv.models.explain_trees.SplitUsage`)."""
        from fedpriv.models.explain_trees import PRUNED, split_usage

        feats = np.concatenate([t.feature[~t.is_leaf] for t in self.trees])
        return split_usage(feats, schema, trees=len(self.trees), origin=PRUNED)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X) - 0.5

    def n_nodes(self) -> int:
        return int(sum(t.left.size for t in self.trees))

    def to_arrays(self) -> dict[str, np.ndarray]:
        sizes = np.array([t.left.size for t in self.trees], dtype=np.int64)
        cat = lambda f: np.concatenate([getattr(t, f) for t in self.trees])  # noqa: E731
        return {
            "tree_sizes": sizes,
            "feature": cat("feature"),
            "threshold": cat("threshold"),
            "left": cat("left"),
            "right": cat("right"),
            "leaf_scores": np.concatenate(self.leaf_scores),
            # Numeric, so every transport (Flower's Array, np.savez) carries it.
            "pooled": np.array([self.pooled], dtype=np.uint8),
        } | ({} if self.recalibration is None else {"recalibration": self.recalibration.to_array()})

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> ForestModel:
        """Inverse of :meth:`to_arrays` (path keys are not released: zeros).

        Child indices are per tree; each must point inside its own tree.
        """
        sizes = np.asarray(arrays["tree_sizes"], dtype=np.int64)
        if sizes.ndim != 1 or sizes.size == 0 or (sizes < 1).any():
            raise ValueError(f"tree_sizes must be positive node counts; got {sizes}")
        cuts = np.cumsum(sizes)[:-1]
        parts = {
            k: np.split(np.asarray(arrays[k]), cuts)
            for k in ("feature", "threshold", "left", "right", "leaf_scores")
        }
        trees = []
        for i, m in enumerate(sizes):
            left = parts["left"][i].astype(np.int64)
            right = parts["right"][i].astype(np.int64)
            if left.shape != (m,) or right.shape != (m,) or max(left.max(), right.max()) >= m:
                raise ValueError(f"tree {i}: child indices must lie in [-1, {m}); got {left}")
            trees.append(
                PrunedTree(
                    feature=parts["feature"][i].astype(np.int64),
                    threshold=parts["threshold"][i].astype(np.float64),
                    left=left,
                    right=right,
                    key=np.zeros(m, dtype=np.uint64),
                )
            )
        return cls(
            trees=tuple(trees),
            leaf_scores=tuple(parts["leaf_scores"]),
            pooled=bool(np.asarray(arrays["pooled"]).reshape(-1)[0]),
            recalibration=(
                None
                if arrays.get("recalibration") is None
                else LinearRecalibration.from_array(arrays["recalibration"])
            ),
        )


def assemble(
    key: list[np.ndarray], feature: list[np.ndarray], threshold: list[np.ndarray]
) -> PrunedTree:
    """The pruned tree from its nodes depth by depth (label order; feature −1: a leaf).

    Depth t + 1 must hold exactly both children of every split of depth t,
    in (parent, side) order: split number q of depth t then has its children
    at positions 2q and 2q + 1 of depth t + 1.
    """
    sizes = [k.size for k in key]
    start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    left = []
    for t, f in enumerate(feature):
        split = np.asarray(f) >= 0
        below = sizes[t + 1] if t + 1 < len(sizes) else 0
        if 2 * int(split.sum()) != below:
            raise ValueError(f"depth {t}: {int(split.sum())} splits but {below} children")
        lft = np.full(split.size, -1, dtype=np.int64)
        lft[split] = start[t + 1] + 2 * np.arange(int(split.sum()))
        left.append(lft)
    left_all = np.concatenate(left)
    return PrunedTree(
        feature=np.concatenate(feature).astype(np.int64),
        threshold=np.concatenate(threshold).astype(np.float64),
        left=left_all,
        right=np.where(left_all >= 0, left_all + 1, -1),
        key=np.concatenate(key).astype(np.uint64),
    )


def exponential_labels(counts: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Pr[label = c] ∝ exp(η·n_c) per leaf, by the Gumbel-max trick (Lumberjack §5, App. J).

    With monotone counts (sensitivity 1) this is η-bounded-range per tree
    (leaves of one tree are disjoint), i.e. η²/8-zCDP.
    """
    check_private("rng", rng)
    g = rng.gumbel(size=counts.shape)
    return np.argmax(eta * counts + g, axis=1)
