"""Data-independent random trees and boosted ensembles of them.

A tree of depth D is complete: ``2^D − 1`` internal nodes in heap order (root
0, children ``2i+1`` / ``2i+2``) and ``2^D`` leaves. Each internal node holds
a feature index and a threshold drawn uniformly inside the public feature box
[0, 1] (every encoded feature lives there, see :mod:`fedpriv.data.encode`),
so the structure costs no privacy: only leaf statistics are released
(benchmark paper §3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv.privacy._validation import check_count, check_generator


@dataclass(frozen=True)
class RandomTree:
    """Structure of one complete random tree (no leaf values)."""

    feature: np.ndarray  # (2^D − 1,) int64
    threshold: np.ndarray  # (2^D − 1,) float64

    @property
    def depth(self) -> int:
        return int(np.log2(self.feature.size + 1))

    @property
    def n_leaves(self) -> int:
        return self.feature.size + 1


def sample_tree(
    *,
    depth: int,
    n_features: int,
    rng: np.random.Generator,
    feature_weights: np.ndarray | None = None,
) -> RandomTree:
    """Random feature per node and threshold uniform on [0, 1].

    Features are uniform, or drawn with public ``feature_weights`` (e.g.
    :func:`column_balanced_weights`, so that a 42-level one-hot column is not
    split 42 times as often as a numeric one).
    """
    d = check_count("depth", depth)
    if d > 20:
        raise ValueError(f"depth must lie in [1, 20]; got {depth}")
    p = check_count("n_features", n_features)
    check_generator("rng", rng)
    n_internal = (1 << d) - 1
    if feature_weights is None:
        feature = rng.integers(0, p, size=n_internal, dtype=np.int64)
    else:
        w = np.asarray(feature_weights, dtype=np.float64)
        if w.shape != (p,) or (w < 0).any() or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"feature_weights must be {p} non-negative numbers summing to 1")
        feature = np.minimum(
            np.searchsorted(np.cumsum(w), rng.random(n_internal), side="right"), p - 1
        )
    return RandomTree(feature=feature.astype(np.int64), threshold=rng.random(n_internal))


def column_balanced_weights(widths: list[int] | tuple[int, ...]) -> np.ndarray:
    """Split-feature probabilities giving each schema column equal mass.

    A column encoded into ``w`` one-hot features gives each ``1/(C·w)``, where
    ``C`` is the number of columns. Depends on the public schema only.
    """
    widths = [check_count("width", w) for w in widths]
    return np.concatenate([np.full(w, 1.0 / (len(widths) * w)) for w in widths])


def route(tree: RandomTree, X: np.ndarray) -> np.ndarray:
    """Leaf index in ``[0, 2^D)`` of every row of ``X`` (go right iff x > threshold)."""
    return route_columns(tree, X.T)


def route_columns(tree: RandomTree, XT: np.ndarray) -> np.ndarray:
    """:func:`route` on a feature-major matrix ``XT`` (d × n); fastest if C-contiguous.

    Level by level, every node of the level compares its feature row at once
    (contiguous reads), then each record picks its own node's bit: about
    half the cost of gathering one feature per record per level.
    """
    n = XT.shape[1]
    index = np.zeros(n, dtype=np.intp)  # position within the current level
    offsets = np.arange(n, dtype=np.intp)
    for level in range(tree.depth):
        first = (1 << level) - 1
        nodes = slice(first, first + (1 << level))
        bits = (XT[tree.feature[nodes]] > tree.threshold[nodes, None]).ravel()
        index = 2 * index + bits[index * n + offsets]
    return index


@dataclass(frozen=True)
class TreeEnsemble:
    """Additive model ``F(x) = base + Σ_t leaf_value_t[route_t(x)]`` on the logit scale."""

    base: float
    trees: tuple[RandomTree, ...]
    leaf_values: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if len(self.trees) != len(self.leaf_values):
            raise ValueError(
                f"{len(self.trees)} trees but {len(self.leaf_values)} leaf-value vectors"
            )

    def append(self, tree: RandomTree, values: np.ndarray) -> TreeEnsemble:
        return TreeEnsemble(
            base=self.base, trees=(*self.trees, tree), leaf_values=(*self.leaf_values, values)
        )

    def decision_function(self, X: np.ndarray, *, start: int = 0) -> np.ndarray:
        """Logit of every row; with ``start`` only trees ``start:`` are summed (no base)."""
        out = np.full(X.shape[0], self.base if start == 0 else 0.0)
        for tree, values in zip(self.trees[start:], self.leaf_values[start:], strict=True):
            out += values[route(tree, X)]
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return sigmoid(self.decision_function(X))


def sigmoid(z: np.ndarray) -> np.ndarray:
    # Split by sign so neither branch overflows.
    out = np.empty_like(z, dtype=np.float64)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def logistic_grad_hess(margin: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g = p − y ∈ [−1, 1] and h = p(1 − p) clipped to [0, 0.25] (benchmark paper §3.4)."""
    p = sigmoid(margin)
    return p - y, np.clip(p * (1.0 - p), 0.0, 0.25)


def leaf_statistics(leaf: np.ndarray, g: np.ndarray, h: np.ndarray, n_leaves: int) -> np.ndarray:
    """Per-leaf sums laid out as ``[Σg_0..Σg_{L−1}, Σh_0..Σh_{L−1}]``."""
    return np.concatenate(
        [
            np.bincount(leaf, weights=g, minlength=n_leaves),
            np.bincount(leaf, weights=h, minlength=n_leaves),
        ]
    )


def newton_leaf_values(
    sum_g: np.ndarray, sum_h: np.ndarray, *, learning_rate: float, reg_lambda: float
) -> np.ndarray:
    """Damped Newton step ``−η Σg / (max(Σh, 0) + λ)`` (benchmark paper §3.4).

    ``max(Σh, 0)`` keeps a noisy negative hessian sum from flipping the sign
    or blowing up the step; λ > 0 bounds it when the leaf is empty.
    """
    return -learning_rate * sum_g / (np.maximum(sum_h, 0.0) + reg_lambda)
