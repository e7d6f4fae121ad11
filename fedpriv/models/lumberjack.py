"""Lumberjack: deep random trees pruned to their DP heavy hitters (pure numpy).

Lebeda, Erb, Cebere & Bellet, "Lumberjack" (``../shared/papers``): each tree
is grown with data-independent random splits to depth d (default 100), the
nodes whose counts pass Algorithm 1 (MarkHeavyHitters) with the Gaussian
sparse threshold become splits, their other children become leaves, and every
leaf is labelled privately. This module holds the pure parts; the learner and
the federation live in ``strategies/``, ``clients/`` and ``server/``.

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
schema box [0, 1] and narrows along the path. Empty nodes are never split:
they are answered ⊥ by the sparse threshold's deterministic gate anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
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

    @property
    def n_features(self) -> int:
        return int(self.numeric.size)


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
    feature: np.ndarray | None = None  # (N,) the split proposed at each node
    threshold: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.key.size)


def propose_splits(layer: Layer, space: FeatureSpace, salt: int) -> None:
    """Draw each node's split from its key: uniform feature, uniform threshold."""
    num_idx = np.flatnonzero(space.numeric)
    bin_idx = np.flatnonzero(~space.numeric)
    available = num_idx.size + (~layer.used).sum(axis=1)  # ≥ n_numeric
    if np.any(available == 0):
        raise ValueError("a node has no feature left to split on (no numeric feature?)")
    r = np.minimum((uniform_from(layer.key, salt) * available).astype(np.int64), available - 1)
    feature = np.empty(layer.size, dtype=np.int64)
    threshold = np.full(layer.size, 0.5)
    is_num = r < num_idx.size
    feature[is_num] = num_idx[r[is_num]]
    u = uniform_from(layer.key, salt + 1)
    col = r[is_num]
    rows = np.flatnonzero(is_num)
    lo, hi = layer.lo[rows, col], layer.hi[rows, col]
    threshold[is_num] = lo + u[is_num] * (hi - lo)
    if np.any(~is_num):
        # The (r − n_numeric)-th binary feature no ancestor used.
        b = np.flatnonzero(~is_num)
        free = np.cumsum(~layer.used[b], axis=1)
        pick = np.argmax(free > (r[b] - num_idx.size)[:, None], axis=1)
        feature[b] = bin_idx[pick]
    layer.feature, layer.threshold = feature, threshold


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
    )


def route(X: np.ndarray, node: np.ndarray, layer: Layer) -> np.ndarray:
    """Candidate child (2·node + side) of each row, under the layer's proposed splits."""
    f = layer.feature[node]
    x = X[np.arange(node.size), f]
    return 2 * node + (x > layer.threshold[node])


def candidate_counts(candidate: np.ndarray, y: np.ndarray, n_nodes: int, n_classes: int):
    """(2·n_nodes, C) class counts of the candidate children."""
    flat = np.bincount(candidate * n_classes + y, minlength=2 * n_nodes * n_classes)
    return flat.reshape(2 * n_nodes, n_classes)


def next_layer(layer: Layer, counts: np.ndarray, space: FeatureSpace) -> tuple[Layer, np.ndarray]:
    """The non-empty children (from aggregated candidate counts) and the candidate → index map."""
    keep = counts.sum(axis=1) > 0
    cand = np.flatnonzero(keep)
    parent, side = cand // 2, (cand % 2).astype(np.int8)
    lo, hi = layer.lo[parent].copy(), layer.hi[parent].copy()
    used = layer.used[parent].copy()
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
    )
    return child, index


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
        self.y = np.asarray(y, dtype=np.int64)
        self.n_classes = n_classes
        self.node = np.zeros(self.y.size, dtype=np.int64)

    def root_counts(self) -> np.ndarray:
        return np.bincount(self.y, minlength=self.n_classes)

    def child_counts(self, layer: Layer) -> np.ndarray:
        """This party's candidate-child counts under ``layer``'s splits; advances its rows."""
        self._candidate = route(self.X, self.node, layer)
        return candidate_counts(self._candidate, self.y, layer.size, self.n_classes)

    def advance(self, index: np.ndarray) -> None:
        """Move rows to their child's index in the next layer (from the aggregate's map)."""
        self.node = index[self._candidate]


@dataclass(frozen=True)
class PrunedTree:
    """Heavy nodes as splits, their other children as leaves (arrays in BFS order)."""

    feature: np.ndarray  # (M,) −1 for leaves
    threshold: np.ndarray
    left: np.ndarray  # (M,) −1 for leaves
    right: np.ndarray
    leaf_counts: np.ndarray  # (M, C) true counts (leaves only; never released)
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


def prune(layers: list[Layer], heavy: list[np.ndarray]) -> PrunedTree:
    """Keep Heavy nodes (splits) and their children (leaves unless Heavy themselves)."""
    n_classes = layers[0].counts.shape[1]
    feature, threshold, left, right, counts, keys = [], [], [], [], [], []
    # BFS over kept nodes: (layer t, index in layer or −1 for an empty child, key)
    frontier = [(0, 0, int(layers[0].key[0]))]
    while frontier:
        nxt = []
        for t, i, key in frontier:
            me = len(feature)
            keys.append(key)
            is_heavy = i >= 0 and t < len(heavy) and heavy[t][i]
            if not is_heavy:
                feature.append(-1)
                threshold.append(0.0)
                left.append(-1)
                right.append(-1)
                counts.append(layers[t].counts[i] if i >= 0 else np.zeros(n_classes, np.int64))
                continue
            feature.append(int(layers[t].feature[i]))
            threshold.append(float(layers[t].threshold[i]))
            left.append(-2)
            right.append(-2)
            counts.append(np.zeros(n_classes, np.int64))
            kids = layers[t + 1] if t + 1 < len(layers) else None
            first = int(np.searchsorted(kids.parent, i)) if kids is not None else 0
            for side in (0, 1):
                j = -1
                # Children are sorted by (parent, side): at most two entries.
                for cand in (first, first + 1):
                    if kids is not None and cand < kids.size and kids.parent[cand] == i:
                        j = cand if kids.side[cand] == side else j
                ckey = int(child_keys(np.array([key], np.uint64), np.array([side]))[0])
                nxt.append((me, side, (t + 1, j, ckey)))
        frontier = []
        for me, side, node in nxt:
            (left if side == 0 else right)[me] = len(feature) + len(frontier)
            frontier.append(node)
    return PrunedTree(
        feature=np.array(feature, dtype=np.int64),
        threshold=np.array(threshold),
        left=np.array(left, dtype=np.int64),
        right=np.array(right, dtype=np.int64),
        leaf_counts=np.array(counts, dtype=np.int64).reshape(-1, n_classes),
        key=np.array(keys, dtype=np.uint64),
    )


def exponential_labels(counts: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Pr[label = c] ∝ exp(η·n_c) per leaf, by the Gumbel-max trick (Lumberjack §5, App. J).

    With monotone counts (sensitivity 1) this is η-bounded-range per tree
    (leaves of one tree are disjoint), i.e. η²/8-zCDP.
    """
    g = rng.gumbel(size=counts.shape)
    return np.argmax(eta * counts + g, axis=1)
