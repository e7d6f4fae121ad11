"""Lumberjack's pruning: MarkHeavyHitters (Algorithm 1), the pruned tree, private leaves.

Lebeda, Erb, Cebere & Bellet, "Lumberjack", §4.1 and §5, Section J. The
layered trees come from :mod:`fedpriv.models.lumberjack`; CheckThreshold is
:class:`fedpriv.privacy.SparseThreshold` (or any ``counts -> bool`` function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedpriv.models.lumberjack import (
    FeatureSpace,
    Layer,
    next_layer,
    propose_splits,
    root_layer,
    take,
)
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
                    here = hit & (sides == side)
                    child_idx[2 * np.flatnonzero(here) + side] = pos[here]
        idx, node_keys = child_idx, kids.key
        heavy_next = np.zeros(idx.size, dtype=bool)
        if t + 1 < len(heavy):
            ok = idx >= 0
            heavy_next[ok] = heavy[t + 1][idx[ok]]
        sub = take(kids, np.flatnonzero(heavy_next))
    return PrunedTree(
        feature=np.concatenate(feature),
        threshold=np.concatenate(threshold),
        left=np.concatenate(left),
        right=np.concatenate(right),
        leaf_counts=np.concatenate(counts),
        key=np.concatenate(keys),
    )


def exponential_labels(counts: np.ndarray, eta: float, rng: np.random.Generator) -> np.ndarray:
    """Pr[label = c] ∝ exp(η·n_c) per leaf, by the Gumbel-max trick (Lumberjack §5, App. J).

    With monotone counts (sensitivity 1) this is η-bounded-range per tree
    (leaves of one tree are disjoint), i.e. η²/8-zCDP.
    """
    check_private("rng", rng)
    g = rng.gumbel(size=counts.shape)
    return np.argmax(eta * counts + g, axis=1)
