"""Compiled inner loops of Lumberjack's growth (server: split proposals; client: routing).

Both run once per node or per row per tree per layer — ~10⁸ times for 30
trees of depth 100 on Adult — where numpy's per-call overhead and
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
def route_and_count(
    X, y, cand, index, index_starts, first_round, feature, threshold, offsets, n_classes, out
):  # pragma: no cover - compiled
    """Move every row one layer down in every tree and count the candidates.

    ``cand`` (k × n) holds each row's last candidate child per tree; unless
    ``first_round``, it is mapped to the row's node through ``index`` (tree t's
    map at ``index[index_starts[t]:]``). The row then goes left or right by
    its node's split (``feature``/``threshold`` at ``offsets[t] + node``), its
    new candidate 2·node + side is written back to ``cand``, and
    ``out[2·C·offsets[t] + C·candidate + y]`` is incremented, only for a label
    y in [0, C): any other label (a bypassed label check) is routed but counted
    in no slot, so one record adds at most one count per tree, in its own
    candidate's block, and never writes outside ``out`` (nothing else here is
    bounds-checked).

    The map's −1 marks a node that is not split further (at or under the
    sparse threshold's gate): its rows stop (``cand`` −1) and are skipped from
    then on. Returns False on an inconsistent index (a row mapped to an empty
    node, −2, or past the layer).
    """
    k, n = cand.shape
    for t in range(k):
        width = offsets[t + 1] - offsets[t]
        base = 2 * n_classes * offsets[t]
        for i in range(n):
            node = 0
            if not first_round:
                prev = cand[t, i]
                if prev < 0:
                    continue
                node = index[index_starts[t] + prev]
                if node == -1:
                    cand[t, i] = -1
                    continue
            if node < 0 or node >= width:
                return False
            j = offsets[t] + node
            c = 2 * node + (1 if X[i, feature[j]] > threshold[j] else 0)
            cand[t, i] = c
            if 0 <= y[i] < n_classes:
                out[base + c * n_classes + y[i]] += 1.0
    return True


def warm_up() -> None:
    """Load (or compile) both kernels now."""
    out = np.zeros(1, dtype=np.int64)
    pick_features(
        np.zeros(1),
        np.zeros(1, np.int64),
        np.zeros((1, 1), bool),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        out,
    )
    cand = np.zeros((1, 1), dtype=np.int64)
    route_and_count(
        np.zeros((1, 1)),
        np.zeros(1, np.int64),
        cand,
        np.zeros(2, np.int64),
        np.zeros(1, np.int64),
        True,
        np.zeros(1, np.int64),
        np.zeros(1),
        np.array([0, 1], np.int64),
        2,
        np.zeros(4),
    )
