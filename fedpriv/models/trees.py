"""Data-independent random trees and boosted ensembles of them.

A tree of depth D is complete: ``2^D − 1`` internal nodes in heap order (root
0, children ``2i+1`` / ``2i+2``) and ``2^D`` leaves. Each internal node holds
a feature index and a threshold drawn uniformly inside the public feature box
[0, 1] (every encoded feature lives there, see :mod:`fedpriv.data.encode`),
so the structure costs no privacy: only leaf statistics are released
(benchmark paper §3.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.models import _kernels
from fedpriv.models.base import ReleasedModel
from fedpriv.options import SplitFeatures
from fedpriv.validation import check_count, check_generator


@dataclass(frozen=True)
class RandomTree:
    """Structure of one complete random tree (no leaf values)."""

    feature: np.ndarray  # (2^D − 1,) int64
    threshold: np.ndarray  # (2^D − 1,) float64

    def __post_init__(self) -> None:
        # The compiled router does not bounds-check, so shapes are checked here
        # and feature indices against X in :func:`check_routable`.
        object.__setattr__(self, "feature", np.ascontiguousarray(self.feature, dtype=np.int64))
        object.__setattr__(
            self, "threshold", np.ascontiguousarray(self.threshold, dtype=np.float64)
        )
        m = self.feature.size
        if self.feature.ndim != 1 or m == 0 or (m + 1) & m or self.threshold.shape != (m,):
            raise ValueError(
                "a complete tree needs 2^D − 1 features and as many thresholds; got "
                f"{self.feature.shape} and {self.threshold.shape}"
            )

    @property
    def depth(self) -> int:
        return self.feature.size.bit_length()

    @property
    def n_leaves(self) -> int:
        return self.feature.size + 1

    @property
    def kernel_args(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(feature as uint64, threshold, depth): what the compiled router takes."""
        return self.feature.view(np.uint64), self.threshold, self.depth


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


def check_routable(tree: RandomTree, n_features: int) -> None:
    """Refuse a tree that splits on a feature the data does not have."""
    if tree.feature.min() < 0 or tree.feature.max() >= n_features:
        raise ValueError(
            f"tree splits on features {tree.feature.min()}..{tree.feature.max()}; "
            f"the data has features 0..{n_features - 1}"
        )


def route(tree: RandomTree, X: np.ndarray) -> np.ndarray:
    """Leaf index in ``[0, 2^D)`` of every row of ``X`` (go right iff x > threshold).

    Heap order: node ``k``'s children are ``2k+1`` (x ≤ threshold) and
    ``2k+2``; the leaf index is the final node minus ``2^D − 1``.
    """
    XT = feature_major(X)
    check_routable(tree, XT.shape[0])
    out = np.empty(XT.shape[1], dtype=np.uint64)
    _kernels.route_rows(XT, *tree.kernel_args, out)
    return out.view(np.int64)


def feature_major(X: np.ndarray) -> np.ndarray:
    """``X`` (n × d) as the C-contiguous float64 d × n matrix the router reads."""
    return np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)


@dataclass(frozen=True)
class TreeEnsemble(ReleasedModel):
    """Additive model ``F(x) = base + Σ_t leaf_value_t[route_t(x)]`` on the logit scale.

    Binary: ``base`` a float and each leaf-value array (2^D,), one logit.
    C ≥ 3 classes (softmax): ``base`` a (C,) array and each leaf-value array
    (2^D, C), one logit per class.
    """

    base: float | np.ndarray
    trees: tuple[RandomTree, ...]
    leaf_values: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if len(self.trees) != len(self.leaf_values):
            raise ValueError(
                f"{len(self.trees)} trees but {len(self.leaf_values)} leaf-value vectors"
            )
        if np.ndim(self.base) not in (0, 1) or np.size(self.base) == 2:
            raise ValueError(
                f"base must be one logit or one per class (C ≥ 3); got shape {np.shape(self.base)}"
            )

    @property
    def n_outputs(self) -> int:
        """Logits per row: 1 (binary) or C."""
        return 1 if np.ndim(self.base) == 0 else int(np.size(self.base))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The ensemble as four arrays (for ``.npz`` files and Flower ``ArrayRecord``);
        a multiclass ensemble's leaf values are flattened leaf-major (leaf j, class k
        at ``j·C + k``) and ``base`` holds its C logits."""
        m = len(self.trees)

        def rows(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
            # (m, width); no trees yet (only the intercept released): (0, 0).
            return np.array(arrays, dtype=dtype).reshape(m, -1) if m else np.zeros((0, 0), dtype)

        return {
            "base": np.atleast_1d(np.asarray(self.base, dtype=np.float64)).copy(),
            "feature": rows([t.feature for t in self.trees], np.int64),
            "threshold": rows([t.threshold for t in self.trees], np.float64),
            "leaf_values": rows(list(self.leaf_values), np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> TreeEnsemble:
        """Inverse of :meth:`to_arrays`."""
        trees = tuple(
            RandomTree(f, t) for f, t in zip(arrays["feature"], arrays["threshold"], strict=True)
        )
        base = np.asarray(arrays["base"], dtype=np.float64)
        if base.size == 1:
            return cls(
                base=float(base[0]),
                trees=trees,
                leaf_values=tuple(np.asarray(v, dtype=np.float64) for v in arrays["leaf_values"]),
            )
        c = base.size
        return cls(
            base=base.copy(),
            trees=trees,
            leaf_values=tuple(
                np.asarray(v, dtype=np.float64).reshape(-1, c) for v in arrays["leaf_values"]
            ),
        )

    def append(self, tree: RandomTree, values: np.ndarray) -> TreeEnsemble:
        return TreeEnsemble(
            base=self.base, trees=(*self.trees, tree), leaf_values=(*self.leaf_values, values)
        )

    def explain(self, schema=None):
        """Internal nodes per schema column (:class:`fedpriv.models.explain_trees.SplitUsage`)."""
        from fedpriv.models.explain_trees import RANDOM, split_usage

        feats = (
            np.concatenate([t.feature for t in self.trees]) if self.trees else np.zeros(0, np.int64)
        )
        return split_usage(feats, schema, trees=len(self.trees), origin=RANDOM)

    def decision_function(self, X: np.ndarray, *, start: int = 0) -> np.ndarray:
        """Logit of every row ((n,), or (n, C) multiclass); with ``start`` only trees
        ``start:`` are summed (no base)."""
        XT = feature_major(X)
        n, c = XT.shape[1], self.n_outputs
        scratch = np.empty(n, dtype=np.uint64)
        if c == 1:
            out = np.full(n, self.base if start == 0 else 0.0)
            kernel = _kernels.add_tree
        else:
            out = np.zeros((n, c)) + (np.asarray(self.base) if start == 0 else 0.0)
            kernel = _kernels.add_tree_multi
        for tree, values in zip(self.trees[start:], self.leaf_values[start:], strict=True):
            check_routable(tree, XT.shape[0])
            values = check_leaf_values(values, tree, c)
            kernel(XT, *tree.kernel_args, values, out, scratch)
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1) of every row (binary), or the (n, C) softmax probabilities."""
        z = self.decision_function(X)
        return sigmoid(z) if z.ndim == 1 else softmax(z)


def check_leaf_values(values: np.ndarray, tree: RandomTree, n_outputs: int = 1) -> np.ndarray:
    """``values`` as contiguous float64, refused unless it has one value (binary) or one
    C-vector (``n_outputs`` = C) per leaf."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    shape = (tree.n_leaves,) if n_outputs == 1 else (tree.n_leaves, n_outputs)
    if values.shape != shape:
        per = "" if n_outputs == 1 else f" of {n_outputs} classes each"
        raise ValueError(f"need {tree.n_leaves} leaf values{per}; got shape {values.shape}")
    return values


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, C) logits (shifted by each row's max: no overflow)."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z: np.ndarray) -> np.ndarray:
    # Split by sign so neither branch overflows.
    out = np.empty_like(z, dtype=np.float64)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def newton_leaf_values(
    sum_g: np.ndarray,
    sum_h: np.ndarray,
    *,
    learning_rate: float,
    reg_lambda: float,
    max_update: float = math.inf,
) -> np.ndarray:
    """Damped Newton step ``clip(−η Σg / (max(Σh, 0) + λ), ±max_update)`` (paper §3.4).

    ``max(Σh, 0)`` keeps a noisy negative hessian sum from flipping the sign
    or blowing up the step; λ > 0 bounds it when the leaf is empty; the
    public ``max_update`` (default: none) bounds each step in logits.
    Elementwise, so C-vector leaves take the diagonal Newton step per class.
    """
    step = -learning_rate * np.asarray(sum_g) / (np.maximum(sum_h, 0.0) + reg_lambda)
    return step if math.isinf(max_update) else np.clip(step, -max_update, max_update)


#: Query ``config["phase"]`` of boosting's intercept round and of its tree rounds (also
#: the names of their node stages,
#: :meth:`fedpriv.clients.boosting.BoostingClient.reply_sensitivity`).
INTERCEPT, TREE = "intercept", "tree"


def leaf_sums_sensitivity(n_classes: int) -> tuple[float, float]:
    """(L1, L2): how far one record moves a boosting reply ``[Σg | Σh]`` (add or remove).

    One record sits in one leaf and adds its (g, h) there, clipped where the
    client kernel computes them (:mod:`fedpriv.models._kernels`). Two classes:
    |g| ≤ GRAD_BOUND = 1 and 0 ≤ h ≤ HESS_BOUND = 1/4, so L2 = √(1 + 1/16) and
    L1 = 5/4. C ≥ 3 classes: each coordinate of g in [−1, 1] and of h in
    [0, 1/4], then ‖g‖₂ ≤ √2 and ‖h‖₂ ≤ √(4/27) (the maxima of the honest
    statistics, derived in ``strategies/boosting.py``), so L2 = √(2 + 4/27); the
    largest L1 of a C-vector inside a box of half-width a and a ball of radius
    r is min(C·a, √C·r), hence L1 = min(C, √(2C)) + min(C/4, √(4C/27)).
    """
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer) or n_classes < 2:
        raise ValueError(f"n_classes must be an integer in [2, inf); got {n_classes!r}")
    c = int(n_classes)
    if c == 2:
        g, h = _kernels.GRAD_BOUND, _kernels.HESS_BOUND
        return g + h, math.sqrt(g**2 + h**2)
    g2, h2 = _kernels.SOFTMAX_GRAD_NORM, _kernels.SOFTMAX_HESS_NORM
    l1 = min(c * _kernels.GRAD_BOUND, math.sqrt(c) * g2)
    l1 += min(c * _kernels.HESS_BOUND, math.sqrt(c) * h2)
    return l1, math.sqrt(g2**2 + h2**2)


def split_feature_weights(
    mode: SplitFeatures | str, column_widths: tuple[int, ...] | None
) -> np.ndarray | None:
    """Public split-feature probabilities for ``mode``.

    ``"columns"``: each schema column equally likely, shared by its one-hot
    levels (needs the schema's column widths; without a schema, uniform).
    ``"uniform"``: each encoded feature equally likely.
    """
    mode = SplitFeatures.parse(mode)
    if mode is SplitFeatures.COLUMNS and column_widths is not None:
        return column_balanced_weights(column_widths)
    return None
