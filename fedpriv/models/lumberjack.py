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
    n_used: np.ndarray  # (N,) int64: how many
    feature: np.ndarray | None = None  # (N,) the split proposed at each node
    threshold: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.parent.size)


def propose_splits(layer: Layer, space: FeatureSpace, salt: int) -> None:
    """Draw each node's split from its key: uniform feature, uniform threshold."""
    from fedpriv.models import _forest_kernels

    num_idx = np.flatnonzero(space.numeric)
    bin_idx = np.flatnonzero(~space.numeric)
    n = layer.key.size
    if layer.n_used.shape != (n,) or layer.used.shape != (n, bin_idx.size) or layer.size != n:
        raise ValueError(f"layer arrays disagree on its {n} nodes")  # the kernel is unchecked
    feature = np.empty(n, dtype=np.int64)
    ok = _forest_kernels.pick_features(
        uniform_from(layer.key, salt), layer.n_used, layer.used, num_idx, bin_idx, feature
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


def prune(
    layers: list[Layer], heavy: list[np.ndarray], *, space: FeatureSpace, salt: int
) -> PrunedTree:
    """Keep Heavy nodes (splits) and their children (leaves unless Heavy themselves).

    Splits are recomputed from the path keys for the Heavy nodes only (they
    form a rooted subtree, so their public ranges follow from their Heavy
    ancestors): the grown layers need not keep a split per node, which
    halves the forest's memory at depth 100. Nodes come out breadth first,
    each depth in label order.
    """
    n_classes = layers[0].counts.shape[1]
    root = root_layer(int(layers[0].key[0]), space, layers[0].counts[0])
    feature, threshold, left, right, counts, keys = [], [], [], [], [], []
    # Depth t: ``idx`` = each kept node's index in layers[t] (−1: an empty child),
    # ``sub`` = the public state of the kept Heavy nodes (a mini layer).
    idx = np.zeros(1, dtype=np.int64)
    node_keys = root.key.copy()
    sub = root if heavy and heavy[0][0] else None
    n_out = 0
    for t in range(len(layers)):
        is_heavy = np.zeros(idx.size, dtype=bool)
        if t < len(heavy):
            ok = idx >= 0
            is_heavy[ok] = heavy[t][idx[ok]]
        c = np.zeros((idx.size, n_classes), dtype=np.int64)
        ok = idx >= 0
        c[ok] = layers[t].counts[idx[ok]]
        c[is_heavy] = 0  # only leaves carry counts
        f = np.full(idx.size, -1, dtype=np.int64)
        thr = np.zeros(idx.size)
        lft = np.full(idx.size, -1, dtype=np.int64)
        rgt = np.full(idx.size, -1, dtype=np.int64)
        n_heavy = int(is_heavy.sum())
        first_child = n_out + idx.size
        if n_heavy:
            propose_splits(sub, space, salt)
            f[is_heavy], thr[is_heavy] = sub.feature, sub.threshold
            lft[is_heavy] = first_child + 2 * np.arange(n_heavy)
            rgt[is_heavy] = lft[is_heavy] + 1
        feature.append(f)
        threshold.append(thr)
        left.append(lft)
        right.append(rgt)
        counts.append(c)
        keys.append(node_keys)
        n_out += idx.size
        if not n_heavy:
            break
        # Both children of every Heavy node, in (parent, side) order = label order.
        kids, _ = next_layer(sub, np.ones((2 * n_heavy, n_classes), dtype=np.int64), space)
        parents_here = idx[is_heavy]
        child_idx = np.full(2 * n_heavy, -1, dtype=np.int64)
        if t + 1 < len(layers):
            nxt = layers[t + 1]
            first = np.searchsorted(nxt.parent, parents_here)
            for off in (0, 1):
                pos = np.minimum(first + off, max(nxt.size - 1, 0))
                hit = (first + off < nxt.size) & (nxt.parent[pos] == parents_here)
                sides = nxt.side[pos]
                for side in (0, 1):
                    take = hit & (sides == side)
                    child_idx[2 * np.flatnonzero(take) + side] = pos[take]
        idx, node_keys = child_idx, kids.key
        heavy_next = np.zeros(idx.size, dtype=bool)
        if t + 1 < len(heavy):
            ok = idx >= 0
            heavy_next[ok] = heavy[t + 1][idx[ok]]
        sub = _take(kids, np.flatnonzero(heavy_next))
    return PrunedTree(
        feature=np.concatenate(feature),
        threshold=np.concatenate(threshold),
        left=np.concatenate(left),
        right=np.concatenate(right),
        leaf_counts=np.concatenate(counts),
        key=np.concatenate(keys),
    )


def _take(layer: Layer, rows: np.ndarray) -> Layer:
    """The sub-layer of ``rows`` (public state only)."""
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


def exponential_labels(counts: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Pr[label = c] ∝ exp(η·n_c) per leaf, by the Gumbel-max trick (Lumberjack §5, App. J).

    With monotone counts (sensitivity 1) this is η-bounded-range per tree
    (leaves of one tree are disjoint), i.e. η²/8-zCDP.
    """
    g = rng.gumbel(size=counts.shape)
    return np.argmax(eta * counts + g, axis=1)
