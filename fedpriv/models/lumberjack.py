"""Lumberjack: deep random trees pruned to their DP heavy hitters (pure numpy).

Lebeda, Erb, Cebere & Bellet, "Lumberjack" (``../shared/papers``): each tree
is grown with data-independent random splits to depth d (default 100), the
nodes whose counts pass Algorithm 1 (MarkHeavyHitters) with the Gaussian
sparse threshold become splits, their other children become leaves, and every
leaf is labelled privately. This module holds the pure parts; the learner and
the federation live in ``strategies/``, ``clients/`` and ``server/``; Algorithm
1 and pruning in :mod:`fedpriv.models.heavy_hitters`.

Representation (Section J). A tree is a list of *layers*; layer t holds only
its non-empty nodes, in ascending heap-label order (left to right), as arrays:
``parent`` (index into layer t − 1), ``side`` (0 left, 1 right), ``key`` (a
64-bit hash of the root-to-node path; heap labels reach 2^100 at depth 100
and do not fit in any integer type numpy vectorises) and per-class
``counts``. Children of a sorted layer, taken parent by parent and left
before right, are again sorted, so "ascending label order" is array order and
the descendants of a node at any deeper layer form a contiguous run.

Randomness. A node's split is a function of (tree seed, path key) only — a
split of node u never depends on which *other* nodes exist, so with a fixed
seed a neighbouring dataset proposes exactly the same split at every node
both share: only the DP decisions differ (rule 1; Section E's bugs are data-
dependent candidates and stopping). Features are drawn uniformly among the
numeric features and the binary (one-hot) features no ancestor used;
numeric thresholds uniformly in the node's public range, which starts as the
schema box [0, 1] and narrows along the path.

Stages (the federated growth, ``strategies/lumberjack.py``). Levels 0..d−1
are cut into stages of :data:`STAGE_HEIGHT` levels; a stage is the
*complete* subtree of its height under each of its roots (:func:`expand`),
so which nodes it holds is fixed by public values and by the previous
stage's released Heavy bits, never by a count. :func:`grow_tree` and
:class:`RowRouter` below are the single-party reference of the unpruned
tree (every non-empty node split), for tests of the split rule only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedpriv.records import class_codes

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
#: Levels per stage: a record enters 1 + ⌊log₂ 7⌋ = 3 threshold queries per
#: tree per stage (Lemma 3 on a subtree of height 7), and a stage holds 127
#: nodes per root; 15 (4 queries, 32,767 nodes per root) is too much memory.
STAGE_HEIGHT = 7
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser (Steele, Lea & Flood 2014), elementwise on uint64."""
    with np.errstate(over="ignore"):
        z = (np.asarray(x, dtype=np.uint64) + _GOLDEN) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return z ^ (z >> np.uint64(31))


def uniform_from(keys: np.ndarray, salt: int) -> np.ndarray:
    """A U[0, 1) draw per key, a fixed function of (key, salt) (53-bit mantissa)."""
    h = splitmix64(np.asarray(keys, dtype=np.uint64) ^ np.uint64(salt))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def child_keys(keys: np.ndarray, side: np.ndarray) -> np.ndarray:
    """Path key of the ``side`` child (0 left, 1 right) of each node."""
    with np.errstate(over="ignore"):
        shifted = np.asarray(keys, dtype=np.uint64) << np.uint64(1)
        return splitmix64(shifted | np.asarray(side).astype(np.uint64))


@dataclass(frozen=True)
class FeatureSpace:
    """Which encoded features are numeric (range-split) and which binary (0/1).

    From the public schema: a numeric column's value feature is numeric;
    one-hot levels, binary columns and missing indicators are binary.
    """

    numeric: np.ndarray  # (d,) bool
    #: Schema column of each encoded feature; with it, splits pick a column
    #: uniformly first (then, for a categorical one, an unused level); without
    #: it, every encoded feature is equally likely.
    column: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        return int(self.numeric.size)

    @classmethod
    def unit_box(cls, n_features: int) -> FeatureSpace:
        """``n_features`` numeric features in the public box [0, 1] (bare arrays)."""
        return cls(np.ones(n_features, dtype=bool))

    @classmethod
    def from_schema(cls, schema, split_features: str = "uniform") -> FeatureSpace:
        """The space of ``schema``'s encoded features; ``"columns"`` or ``"uniform"`` choice."""
        from fedpriv.data.encode import feature_columns, feature_space_numeric
        from fedpriv.options import SplitFeatures

        mode = SplitFeatures.parse(split_features)
        columns = feature_columns(schema) if mode is SplitFeatures.COLUMNS else None
        return cls(feature_space_numeric(schema), columns)


@dataclass
class Layer:
    """The non-empty nodes of one depth, in ascending label order."""

    parent: np.ndarray  # (N,) int64 into the previous layer (−1 at the root)
    side: np.ndarray  # (N,) int8
    key: np.ndarray  # (N,) uint64
    counts: np.ndarray  # (N, C) int64
    lo: np.ndarray  # (N, n_numeric) public range of each numeric feature
    hi: np.ndarray
    used: np.ndarray  # (N, n_binary) bool: binary features used by an ancestor
    n_used: np.ndarray  # (N,) int64: how many
    feature: np.ndarray | None = None  # (N,) the split proposed at each node
    threshold: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.parent.size)


def propose_splits(layer: Layer, space: FeatureSpace, salt: int) -> None:
    """Draw each node's split from its key: a uniform feature (or column, then level),
    a uniform threshold in the node's public range."""
    from fedpriv.models import _forest_kernels

    num_idx = np.flatnonzero(space.numeric)
    bin_idx = np.flatnonzero(~space.numeric)
    n = layer.key.size
    if layer.n_used.shape != (n,) or layer.used.shape != (n, bin_idx.size) or layer.size != n:
        raise ValueError(f"layer arrays disagree on its {n} nodes")  # the kernel is unchecked
    feature = np.empty(n, dtype=np.int64)
    if space.column is None:
        ok = _forest_kernels.pick_features(
            uniform_from(layer.key, salt), layer.n_used, layer.used, num_idx, bin_idx, feature
        )
    else:
        groups, bin_group = np.unique(space.column[bin_idx], return_inverse=True)
        ok = _forest_kernels.pick_by_column(
            uniform_from(layer.key, salt),
            uniform_from(layer.key, salt + 2),
            layer.used,
            num_idx,
            bin_idx,
            bin_group.astype(np.int64),
            groups.size,
            feature,
        )
    if not ok:
        raise ValueError("a node has no feature left to split on (no numeric feature?)")
    threshold = np.full(layer.size, 0.5)
    rows = np.flatnonzero(space.numeric[feature])
    if rows.size:
        col = (np.cumsum(space.numeric) - 1)[feature[rows]]
        lo, hi = layer.lo[rows, col], layer.hi[rows, col]
        threshold[rows] = lo + uniform_from(layer.key[rows], salt + 1) * (hi - lo)
    layer.feature, layer.threshold = feature, threshold


def take(layer: Layer, rows: np.ndarray) -> Layer:
    """The sub-layer of ``rows`` (public state and counts; no splits)."""
    return Layer(
        parent=layer.parent[rows],
        side=layer.side[rows],
        key=layer.key[rows],
        counts=layer.counts[rows],
        lo=layer.lo[rows],
        hi=layer.hi[rows],
        used=layer.used[rows],
        n_used=layer.n_used[rows],
    )


def root_layer(key: int, space: FeatureSpace, counts: np.ndarray) -> Layer:
    n_num = int(space.numeric.sum())
    return Layer(
        parent=np.full(1, -1, dtype=np.int64),
        side=np.zeros(1, dtype=np.int8),
        key=np.array([key], dtype=np.uint64),
        counts=np.asarray(counts, dtype=np.int64).reshape(1, -1),
        lo=np.zeros((1, n_num)),
        hi=np.ones((1, n_num)),
        used=np.zeros((1, int((~space.numeric).sum())), dtype=bool),
        n_used=np.zeros(1, dtype=np.int64),
    )


def stage_heights(depth: int, stage_height: int = STAGE_HEIGHT) -> list[int]:
    """Heights of the stages covering levels 0..depth − 1 (the last one may be shorter)."""
    if depth < 1 or stage_height < 1:
        raise ValueError(f"depth and stage_height must be >= 1; got {depth}, {stage_height}")
    full, rest = divmod(depth, stage_height)
    return [stage_height] * full + ([rest] if rest else [])


def lumberjack_rounds(depth: int, stage_height: int = STAGE_HEIGHT) -> int:
    """Round trips of a federated Lumberjack fit: one per stage, then the leaf counts."""
    return len(stage_heights(depth, stage_height)) + 1


@dataclass
class Stage:
    """The complete subtrees of one stage: per level (label order) keys and splits.

    Level l holds ``n_roots · 2^l`` nodes; node i's parent is node i // 2 of
    level l − 1. ``bottom`` keeps the last level's public state (ranges, used
    features), from which the next stage's roots are spawned.
    """

    n_roots: int
    key: list[np.ndarray]
    feature: list[np.ndarray]
    threshold: list[np.ndarray]
    bottom: Layer

    @property
    def size(self) -> int:
        return self.n_roots * ((1 << len(self.key)) - 1)


def children(layer: Layer, nodes: np.ndarray, space: FeatureSpace) -> Layer:
    """Both children of each of ``nodes`` (a layer with proposed splits), in label order."""
    sub = take(layer, nodes)
    sub.feature, sub.threshold = layer.feature[nodes], layer.threshold[nodes]
    child, _ = next_layer(sub, np.ones((2 * sub.size, 1), dtype=np.int64), space)
    return child


def expand(roots: Layer, height: int, space: FeatureSpace, salt: int) -> Stage:
    """Every node of the complete subtrees of ``height`` levels under ``roots``, with splits.

    A function of the roots' public state, the tree's salt and the height
    only: no count decides which node exists.
    """
    layer, keys, features, thresholds = roots, [], [], []
    for level in range(height):
        propose_splits(layer, space, salt)
        keys.append(layer.key)
        features.append(layer.feature)
        thresholds.append(layer.threshold)
        if level + 1 < height:
            layer = children(layer, np.arange(layer.size), space)
    return Stage(roots.size, keys, features, thresholds, layer)


def route(X: np.ndarray, node: np.ndarray, layer: Layer) -> np.ndarray:
    """Candidate child (2·node + side) of each row, under the layer's proposed splits."""
    f = layer.feature[node]
    x = X[np.arange(node.size), f]
    return 2 * node + (x > layer.threshold[node])


def candidate_counts(candidate: np.ndarray, y: np.ndarray, n_nodes: int, n_classes: int):
    """(2·n_nodes, C) class counts of the candidate children.

    A label outside [0, C) counts in no slot (rather than in the next candidate's).
    """
    keep = (y >= 0) & (y < n_classes)
    flat = np.bincount(candidate[keep] * n_classes + y[keep], minlength=2 * n_nodes * n_classes)
    return flat.reshape(2 * n_nodes, n_classes)


def next_layer(layer: Layer, counts: np.ndarray, space: FeatureSpace) -> tuple[Layer, np.ndarray]:
    """The non-empty children (from aggregated candidate counts) and the candidate → index map."""
    keep = counts.sum(axis=1) > 0
    cand = np.flatnonzero(keep)
    parent, side = cand // 2, (cand % 2).astype(np.int8)
    lo, hi = layer.lo[parent].copy(), layer.hi[parent].copy()
    used = layer.used[parent].copy()
    n_used = layer.n_used[parent].copy()
    f, t = layer.feature[parent], layer.threshold[parent]
    numeric_col = np.cumsum(space.numeric) - 1
    binary_col = np.cumsum(~space.numeric) - 1
    is_num = space.numeric[f]
    r = np.flatnonzero(is_num)
    c = numeric_col[f[r]]
    right = side[r] == 1
    lo[r[right], c[right]] = t[r[right]]
    hi[r[~right], c[~right]] = t[r[~right]]
    b = np.flatnonzero(~is_num)
    used[b, binary_col[f[b]]] = True
    n_used[b] += 1
    index = np.full(counts.shape[0], -1, dtype=np.int64)
    index[cand] = np.arange(cand.size)
    child = Layer(
        parent=parent,
        side=side,
        key=child_keys(layer.key[parent], side),
        counts=counts[cand],
        lo=lo,
        hi=hi,
        used=used,
        n_used=n_used,
    )
    return child, index


class Counter(Protocol):
    """Where a tree's counts come from: one party's rows, or the sum over parties."""

    def root_counts(self) -> np.ndarray: ...

    def child_counts(self, layer: Layer) -> np.ndarray: ...

    def advance(self, index: np.ndarray) -> None: ...


def grow_tree(
    *, depth: int, space: FeatureSpace, key: int, salt: int, counter: Counter
) -> list[Layer]:
    """Layers 0..depth of one tree (fewer if every node empties earlier).

    ``counter.child_counts(layer)`` gives the (2·N_t, C) candidate-child class
    counts under the layer's splits; ``counter.advance(index)`` then moves the
    rows on (``index`` maps candidates to next-layer nodes).
    """
    layers = [root_layer(key, space, counter.root_counts())]
    for _ in range(depth):
        layer = layers[-1]
        propose_splits(layer, space, salt)
        child, index = next_layer(layer, np.asarray(counter.child_counts(layer)), space)
        counter.advance(index)
        layers.append(child)
        if child.size == 0:
            break
    return layers


class RowRouter:
    """One party's rows walking down one tree, layer by layer (the client side of growth)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, n_classes: int) -> None:
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.y = class_codes(y, n_classes)  # −1: not a class, counted nowhere
        self.n_classes = n_classes
        self.node = np.zeros(self.y.size, dtype=np.int64)

    def root_counts(self) -> np.ndarray:
        return np.bincount(self.y[self.y >= 0], minlength=self.n_classes)

    def child_counts(self, layer: Layer) -> np.ndarray:
        """This party's candidate-child counts under ``layer``'s splits; advances its rows."""
        self._candidate = route(self.X, self.node, layer)
        return candidate_counts(self._candidate, self.y, layer.size, self.n_classes)

    def advance(self, index: np.ndarray) -> None:
        """Move rows to their child's index in the next layer (from the aggregate's map)."""
        self.node = index[self._candidate]
