"""Compiled inner loops of random-tree routing and the boosting client step.

The boosting client's work per round is one pass over its rows: add the last
released tree's leaf value to each row's logit, route the row through the new
tree, and (for the Poisson-sampled rows) accumulate the logistic gradient and
hessian into per-leaf sums. In numpy that pass is ~15 whole-array operations,
most of the time spent allocating temporaries; here it is one loop over rows
that touches each row once, ~20× faster (``experiments/boosting_benchmark.py``).

Every function is pure: it reads its inputs and writes only the ``out``/
in-place arguments it documents. Sums run over the rows in the order given, so
the same rows in the same order give the same floats bit for bit, whichever
runtime calls them. ``cache=True`` keeps the compiled code beside this file,
so a new process (a Flower ClientApp worker) does not recompile it.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_JIT = {"nogil": True, "cache": True}
#: Per-record bounds of the boosting statistics, which the server's sensitivity
#: assumes (``strategies/boosting.py``: Δ₂ = √(GRAD_BOUND² + HESS_BOUND²)). The
#: kernel clips to them, so no label or margin can exceed them: with y ∈ {−1, 1}
#: the raw g = p − y reaches 2, with y ∈ {0, 5} it reaches 5.
GRAD_BOUND = 1.0  # |g| = |p − y| ≤ 1 for y ∈ {0, 1}
HESS_BOUND = 0.25  # h = p(1 − p) ≤ 1/4
#: Per-record L2 bounds of the softmax statistics (C ≥ 3 classes), which the
#: multiclass sensitivity assumes (derivation: ``strategies/boosting.py``):
#: ‖p − e_y‖₂ ≤ √2 and ‖(p_k(1 − p_k))_k‖₂ ≤ √(4/27), each coordinate of h also
#: in [0, 1/4]. The kernel clips each record's vectors to them.
SOFTMAX_GRAD_NORM = math.sqrt(2.0)
SOFTMAX_HESS_NORM = math.sqrt(4.0 / 27.0)
# Indices are unsigned inside the loops: numba then skips the negative-index
# wrap-around test, which made the router ~1.6x slower. Leaf arrays are uint64.
_ONE, _TWO = np.uint64(1), np.uint64(2)


@numba.njit(**_JIT)
def _descend(XT, feature, threshold, depth, node):  # pragma: no cover - compiled
    # Level by level over all rows rather than row by row: the rows of a level
    # are independent, so their loads overlap instead of forming one chain of
    # dependent loads per row (~2x faster). The matrix is feature-major (d x n):
    # a level reads at most 2^level feature rows, each front to back, which
    # the prefetcher follows; row-major reads one cache line per row per level
    # and was 1.8x slower on 130-US (117 features). Heap order: node k's
    # children are 2k+1 (x <= thr) and 2k+2 (x > thr); the leaves are the last
    # 2^depth nodes.
    n = XT.shape[1]
    flat = XT.ravel()
    width = np.uint64(n)
    for _ in range(depth):
        for i in range(n):
            k = node[i]
            x = flat[feature[k] * width + np.uint64(i)]
            node[i] = _TWO * k + _ONE + np.uint64(x > threshold[k])
    first_leaf = np.uint64((1 << depth) - 1)
    for i in range(n):
        node[i] -= first_leaf


@numba.njit(**_JIT)
def route_rows(XT, feature, threshold, depth, out):  # pragma: no cover - compiled
    """Write the leaf index of each record (column of ``XT``, d x n, C order) into ``out``.

    ``out`` is (n,) uint64.

    ``feature`` is uint64 (validated against ``d`` by the caller: nothing here
    is bounds-checked), ``threshold`` float64, both of length 2^depth - 1.
    """
    out[:] = 0
    _descend(XT, feature, threshold, depth, out)


@numba.njit(**_JIT)
def add_tree(XT, feature, threshold, depth, values, margins, scratch):  # pragma: no cover
    """``margins[i] += values[leaf(x_i)]`` for one released tree (``scratch``: (n,) uint64)."""
    scratch[:] = 0
    _descend(XT, feature, threshold, depth, scratch)
    for i in range(margins.size):
        margins[i] += values[scratch[i]]


@numba.njit(**_JIT)
def settle_and_route(XT, leaf, values, feature, threshold, depth, margins):  # pragma: no cover
    """``margins += values[leaf]`` (the last released tree), then ``leaf`` <- the new tree's leaf.

    ``leaf`` (uint64) holds each row's leaf in the last released tree on
    entry and in the new tree on exit; both it and ``margins`` are updated
    in place.
    """
    for i in range(margins.size):
        margins[i] += values[leaf[i]]
        leaf[i] = 0
    _descend(XT, feature, threshold, depth, leaf)


@numba.njit(**_JIT)
def _sigmoid(z):  # pragma: no cover - compiled
    # Split by sign so exp never overflows.
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    ez = math.exp(z)
    return ez / (1.0 + ez)


@numba.njit(**_JIT)
def _clip(v, lo, hi):  # pragma: no cover - compiled
    # Every comparison with NaN is false, so a NaN (a NaN label or margin)
    # lands on ``lo``: inside the bound, never outside it. min/max would pass it on.
    if v >= lo:
        return v if v <= hi else hi
    return lo


@numba.njit(**_JIT)
def logistic_leaf_sums(margins, y, leaf, rows, starts, offsets, sizes, out):  # pragma: no cover
    """Per-client, per-leaf ``[Σg | Σh]`` of sampled rows (benchmark paper §3.4).

    g = p − y clipped to [−GRAD_BOUND, GRAD_BOUND] and h = p(1 − p) clipped to
    [0, HESS_BOUND], with p = σ(margin): whatever the labels (validated
    upstream, but a caller may bypass that), one record moves one leaf's
    (Σg, Σh) by at most (GRAD_BOUND, HESS_BOUND), the sensitivity the server
    assumes. For y ∈ {0, 1} the clip is the identity.
    Client ``o``'s sample is ``rows[starts[o]:starts[o+1]]``, indices in
    ``[0, sizes[o])`` local to its block of rows beginning at ``offsets[o]``;
    its sums go to ``out[o]`` ((n_clients, 2L), zeroed by the caller),
    accumulated in sample order. Returns False, touching nothing, if a row
    index is out of its client's range (nothing else here is bounds-checked).
    """
    for o in range(out.shape[0]):
        for k in range(starts[o], starts[o + 1]):
            if not 0 <= rows[k] < sizes[o]:
                return False
    n_leaves = out.shape[1] // 2
    for o in range(out.shape[0]):
        base = offsets[o]
        for k in range(starts[o], starts[o + 1]):
            i = base + rows[k]
            p = _sigmoid(margins[i])
            g = _clip(p - y[i], -GRAD_BOUND, GRAD_BOUND)
            h = _clip(p * (1.0 - p), 0.0, HESS_BOUND)
            j = leaf[i]
            out[o, j] += g
            out[o, n_leaves + j] += h
    return True


@numba.njit(**_JIT)
def softmax_grad_hess(margin, y, g, h):  # pragma: no cover - compiled
    """One record's softmax gradient ``g = p − e_y`` and diagonal hessian ``h_k = p_k(1 − p_k)``.

    ``margin``: the record's C logits; ``y``: its class index (a float; any
    other value, NaN included, gives e_y = 0). Writes ``g`` and ``h`` ((C,)),
    clipped where computed: each coordinate of g to [−1, 1] and of h to
    [0, 1/4] (a NaN lands on the lower end), then g scaled into the L2 ball of
    radius :data:`SOFTMAX_GRAD_NORM` and h into that of :data:`SOFTMAX_HESS_NORM`.
    For finite logits and y ∈ {0, …, C − 1} the clips are the identity up to
    rounding (the bounds are the maxima).
    """
    c = margin.size
    top = margin[0]
    for k in range(1, c):
        if margin[k] > top:
            top = margin[k]
    total = 0.0
    for k in range(c):
        g[k] = math.exp(margin[k] - top)
        total += g[k]
    gn, hn = 0.0, 0.0
    for k in range(c):
        p = g[k] / total
        onehot = 1.0 if y == k else 0.0
        g[k] = _clip(p - onehot, -GRAD_BOUND, GRAD_BOUND)
        h[k] = _clip(p * (1.0 - p), 0.0, HESS_BOUND)
        gn += g[k] * g[k]
        hn += h[k] * h[k]
    gn, hn = math.sqrt(gn), math.sqrt(hn)
    if gn > SOFTMAX_GRAD_NORM:
        for k in range(c):
            g[k] *= SOFTMAX_GRAD_NORM / gn
    if hn > SOFTMAX_HESS_NORM:
        for k in range(c):
            h[k] *= SOFTMAX_HESS_NORM / hn


@numba.njit(**_JIT)
def softmax_leaf_sums(margins, y, leaf, rows, starts, offsets, sizes, out):  # pragma: no cover
    """Per-client, per-leaf ``[Σg | Σh]`` of sampled rows, C classes (softmax Newton).

    As :func:`logistic_leaf_sums` with ``margins`` (n, C) and each record's
    (g, h) from :func:`softmax_grad_hess`: ``out[o]`` ((n_clients, 2·L·C),
    zeroed by the caller) holds Σg of leaf j, class k at ``j·C + k`` and Σh at
    ``L·C + j·C + k``. One record moves one leaf's (Σg, Σh) by at most
    (:data:`SOFTMAX_GRAD_NORM`, :data:`SOFTMAX_HESS_NORM`) in L2.
    """
    for o in range(out.shape[0]):
        for k in range(starts[o], starts[o + 1]):
            if not 0 <= rows[k] < sizes[o]:
                return False
    c = margins.shape[1]
    half = out.shape[1] // 2
    g = np.empty(c)
    h = np.empty(c)
    for o in range(out.shape[0]):
        base = offsets[o]
        for k in range(starts[o], starts[o + 1]):
            i = base + rows[k]
            softmax_grad_hess(margins[i], y[i], g, h)
            j = leaf[i] * np.uint64(c)
            for m in range(c):
                out[o, j + np.uint64(m)] += g[m]
                out[o, np.uint64(half) + j + np.uint64(m)] += h[m]
    return True


@numba.njit(**_JIT)
def add_tree_multi(XT, feature, threshold, depth, values, margins, scratch):  # pragma: no cover
    """``margins[i, :] += values[leaf(x_i), :]`` (C-vector leaves; ``scratch``: (n,) uint64)."""
    scratch[:] = 0
    _descend(XT, feature, threshold, depth, scratch)
    c = margins.shape[1]
    for i in range(margins.shape[0]):
        for m in range(c):
            margins[i, m] += values[scratch[i], m]


@numba.njit(**_JIT)
def settle_and_route_multi(
    XT, leaf, values, feature, threshold, depth, margins
):  # pragma: no cover
    """:func:`settle_and_route` with C-vector leaves: ``margins`` (n, C), ``values`` (L, C)."""
    c = margins.shape[1]
    for i in range(margins.shape[0]):
        for m in range(c):
            margins[i, m] += values[leaf[i], m]
        leaf[i] = 0
    _descend(XT, feature, threshold, depth, leaf)


def warm_up() -> None:
    """Load (or compile) every kernel for the argument types fedpriv passes.

    A process that will answer rounds calls this up front (the Flower client
    does, at the key exchange) so that the first round does not pay for it.
    """
    XT = np.zeros((1, 2))
    feature, threshold = np.zeros(1, dtype=np.uint64), np.full(1, 0.5)
    leaf, scratch = np.zeros(2, dtype=np.uint64), np.zeros(2, dtype=np.uint64)
    margins, values = np.zeros(2), np.zeros(2)
    route_rows(XT, feature, threshold, 1, leaf)
    add_tree(XT, feature, threshold, 1, values, margins, scratch)
    settle_and_route(XT, leaf, values, feature, threshold, 1, margins)
    one = np.zeros(1, dtype=np.int64)
    logistic_leaf_sums(
        margins, margins, leaf, one, np.array([0, 1]), one, np.array([2]), np.zeros((1, 4))
    )
    multi, mvalues = np.zeros((2, 3)), np.zeros((2, 3))
    add_tree_multi(XT, feature, threshold, 1, mvalues, multi, scratch)
    settle_and_route_multi(XT, leaf, mvalues, feature, threshold, 1, multi)
    softmax_leaf_sums(
        multi, margins, leaf, one, np.array([0, 1]), one, np.array([2]), np.zeros((1, 12))
    )
