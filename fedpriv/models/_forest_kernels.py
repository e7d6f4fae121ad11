"""Compiled inner loops of Lumberjack (server: split proposals; client: routing, leaves).

They run once per node or per row per tree per level — ~10⁸ times for 30
trees of depth 50 on Adult — where numpy's per-call overhead and
temporaries dominated. Pure functions: they read their inputs and write only
the ``out`` arguments they document. ``cache=True`` keeps the compiled code
beside this file for new processes (Flower workers).
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = {"nogil": True, "cache": True}


@numba.njit(**_JIT)
def pick_features(u, n_used, used, num_idx, bin_idx, out):  # pragma: no cover - compiled
    """``out[i]``: feature of node i, uniform over the numeric features and the
    binary ones no ancestor used (``used[i]``), given a uniform draw ``u[i]``.

    Returns False if some node has no feature left (cannot happen with a
    numeric feature in the space).
    """
    n_num, n_bin = num_idx.size, bin_idx.size
    for i in range(u.size):
        avail = n_num + n_bin - n_used[i]
        if avail <= 0:
            return False
        r = int(u[i] * avail)
        if r >= avail:
            r = avail - 1
        if r < n_num:
            out[i] = num_idx[r]
            continue
        r -= n_num
        for b in range(n_bin):  # the r-th unused binary feature
            if not used[i, b]:
                if r == 0:
                    out[i] = bin_idx[b]
                    break
                r -= 1
    return True


@numba.njit(**_JIT)
def pick_by_column(u, v, used, num_idx, bin_idx, bin_group, n_groups, out):  # pragma: no cover
    """``out[i]``: a schema column uniformly among the numeric ones and the
    categorical ones with a level no ancestor used (draw ``u[i]``), then for a
    categorical column a uniformly chosen unused level (draw ``v[i]``).

    ``bin_group[b]`` is the column of binary feature b (levels contiguous).
    Returns False if some node has nothing left to split on.
    """
    n_num, n_bin = num_idx.size, bin_idx.size
    free = np.zeros(n_groups, dtype=np.int64)
    for i in range(u.size):
        free[:] = 0
        for b in range(n_bin):
            if not used[i, b]:
                free[bin_group[b]] += 1
        avail = n_num
        for g in range(n_groups):
            if free[g] > 0:
                avail += 1
        if avail <= 0:
            return False
        r = min(int(u[i] * avail), avail - 1)
        if r < n_num:
            out[i] = num_idx[r]
            continue
        r -= n_num
        group = -1
        for g in range(n_groups):
            if free[g] > 0:
                if r == 0:
                    group = g
                    break
                r -= 1
        s = min(int(v[i] * free[group]), free[group] - 1)
        for b in range(n_bin):
            if bin_group[b] == group and not used[i, b]:
                if s == 0:
                    out[i] = bin_idx[b]
                    break
                s -= 1
    return True


@numba.njit(**_JIT)
def route_stage(
    X, cand, rank, rank_starts, first_stage, roots, height, feature, threshold, offsets, out
):  # pragma: no cover - compiled
    """Walk every row through one stage of every tree and count the nodes it visits.

    Tree t's stage is the complete subtree of height ``height`` under each of
    its ``roots[t]`` roots, stored level by level (level l holds roots[t]·2^l
    nodes in label order) from ``offsets[t]``; ``feature``/``threshold`` hold
    every node's split, ``out`` gets 1 per row per node visited. A row enters
    at root 0 in the first stage; later, its last candidate ``c = cand[t, i]``
    (2·bottom node + side of the previous stage; −1: stopped) enters at root
    2·``rank[rank_starts[t] + c // 2]`` + c % 2, or stops if that rank is −1
    (the bottom node was not released Heavy). The new candidate is written
    back to ``cand``. Returns False on an inconsistent query (a rank past the
    roots).
    """
    starts = np.array([0, cand.shape[1]], dtype=np.int64)
    return route_stage_clients(
        X, cand, rank, rank_starts, first_stage, roots, height, feature, threshold, offsets,
        starts, out.reshape((1, out.size)),
    )  # fmt: skip


@numba.njit(**_JIT)
def route_stage_clients(
    X, cand, rank, rank_starts, first_stage, roots, height, feature, threshold, offsets, starts, out
):  # pragma: no cover - compiled
    """:func:`route_stage` for the rows of several clients laid end to end: client c's
    rows ``starts[c]:starts[c + 1]`` count in ``out[c]``. Client by client, so its
    rows stay in cache through every tree, as in its own call."""
    k = cand.shape[0]
    for c in range(starts.size - 1):
        counts = out[c]
        for t in range(k):
            n_roots = roots[t]
            base = offsets[t]
            for i in range(starts[c], starts[c + 1]):
                if first_stage:
                    j = 0
                else:
                    prev = cand[t, i]
                    if prev < 0:
                        continue
                    r = rank[rank_starts[t] + prev // 2]
                    if r < 0:
                        cand[t, i] = -1
                        continue
                    j = 2 * r + prev % 2
                if j >= n_roots:
                    return False
                level_start = base
                width = n_roots
                side = 0
                for level in range(height):
                    node = level_start + j
                    counts[node] += 1.0
                    side = 1 if X[i, feature[node]] > threshold[node] else 0
                    if level + 1 < height:
                        j = 2 * j + side
                    level_start += width
                    width *= 2
                cand[t, i] = 2 * j + side
    return True


#: Rows :func:`apply_forest` walks through every tree before the next rows (the rows
#: of a block stay in cache).
ROW_BLOCK = 1024


@numba.njit(**_JIT)
def apply_forest(X, feature, threshold, left, right, offsets, out):  # pragma: no cover
    """``out[t, i]``: the node (tree-local index) where row i ends in tree t.

    Tree t's nodes sit at ``offsets[t]:offsets[t + 1]`` of the arrays with
    tree-local child indices (−1 for a leaf). Returns False on a child index
    outside its tree.
    """
    k = offsets.size - 1
    n = X.shape[0]
    for block in range(0, n, ROW_BLOCK):
        for t in range(k):
            base = offsets[t]
            size = offsets[t + 1] - base
            for i in range(block, min(n, block + ROW_BLOCK)):
                node = 0
                for _ in range(size):
                    lo = left[base + node]
                    if lo < 0:
                        break
                    if X[i, feature[base + node]] > threshold[base + node]:
                        node = right[base + node]
                    else:
                        node = lo
                    if node < 0 or node >= size:
                        return False
                out[t, i] = node
    return True


def warm_up() -> None:
    """Load (or compile) the kernels now."""
    out = np.zeros(1, dtype=np.int64)
    pick_features(
        np.zeros(1),
        np.zeros(1, np.int64),
        np.zeros((1, 1), bool),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        out,
    )
    route_stage(
        np.zeros((1, 1)),
        np.zeros((1, 1), dtype=np.int64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        True,
        np.ones(1, np.int64),
        1,
        np.zeros(1, np.int64),
        np.zeros(1),
        np.zeros(1, np.int64),
        np.zeros(1),
    )
    apply_forest(
        np.zeros((1, 1)),
        np.full(1, -1, np.int64),
        np.zeros(1),
        np.full(1, -1, np.int64),
        np.full(1, -1, np.int64),
        np.array([0, 1], np.int64),
        np.zeros((1, 1), np.int64),
    )
