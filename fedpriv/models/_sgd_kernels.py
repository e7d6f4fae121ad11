"""Compiled clipped per-example gradient sums of the built-in DP-SGD models.

A DP-SGD step asks each client for Σ_i clip_C(∇ℓ(θ; x_i, y_i)) over its
Poisson sample (Abadi et al. 2016, Alg. 1; benchmark paper §3.5). The sample
is small (q = 0.02 of a client's rows), so numpy's per-call overhead, not
arithmetic, dominated the vectorised version: here each row is read once and
its gradient, norm and clipped contribution are formed in registers, with
nothing allocated per row.

The closed forms (layout as in :mod:`fedpriv.models.networks`), with
r = σ(f) − y:

* logistic: ∇ = r·[x, 1], ‖∇‖² = r²(‖x‖² + 1);
* MLP: with z = W1 x + b1, a = max(z, 0), u = r·w2 ⊙ 1[z > 0]:
  ∇ = [u xᵀ | u | r·a | r], ‖∇‖² = ‖u‖²(‖x‖² + 1) + r²(‖a‖² + 1);
* K > 2 classes (one kernel for both models): the same with r = softmax(f) − e_y
  a K-vector, r·x and r·a outer products, and u = W2ᵀr ⊙ 1[z > 0].

Many clients are served in one call: client c's sample is ``rows[starts[c]:
starts[c+1]]`` (indices local to its block ``offsets[c] .. offsets[c] +
sizes[c]`` of the rows of ``X``, n × d in C order: a sampled row is read
front to back) and its sum goes to ``out[c]``. Every
row is first mapped x ↦ (x − shift)·scale (the model's public input map). Sums run
over each client's rows in the order given, so one client alone and the same
client among others produce the same floats bit for bit. A row index outside
its block makes the call return ``False`` (``out`` is then garbage).
"""

from __future__ import annotations

import math

import numba
import numpy as np

_JIT = {"nogil": True, "cache": True}


@numba.njit(**_JIT)
def _sigmoid(f):  # pragma: no cover - compiled
    if f >= 0.0:
        return 1.0 / (1.0 + math.exp(-f))
    e = math.exp(f)
    return e / (1.0 + e)


@numba.njit(**_JIT)
def _factor(norm2, clip):  # pragma: no cover - compiled
    # min(1, C/‖g‖): the clipped gradient has norm at most C, whatever the label
    # (y ∈ {0, 5} gives |σ(f) − y| up to 5, still clipped). A non-finite norm (a
    # NaN or infinite label or input) gives 0, and the caller skips the example:
    # NaN > C is false, so the old form let a NaN through unclipped.
    norm = math.sqrt(norm2)
    if norm <= clip:
        return 1.0
    if norm < math.inf:
        return clip / norm
    return 0.0


@numba.njit(**_JIT)
def logistic_clipped_sums(
    X, shift, scale, y, params, clip, bias_bound, rows, starts, offsets, sizes, out
):  # pragma: no cover - compiled
    """Per-client clipped gradient sums of logistic regression into ``out`` (K × (d + 1))."""
    d = X.shape[1]
    x = np.empty(d)
    b = params[d]
    for c in range(starts.size - 1):
        base, size = offsets[c], sizes[c]
        for k in range(starts[c], starts[c + 1]):
            r = rows[k]
            if r < 0 or r >= size:
                return False
            i = base + r
            f, xx = b, 0.0
            for j in range(d):
                v = (X[i, j] - shift[j]) * scale[j]
                x[j] = v
                f += params[j] * v
                xx += v * v
            g = _sigmoid(f) - y[i]
            if bias_bound > 0.0:  # weights clipped to C, the bias's r to B on its own
                fac = _factor(g * g * xx, clip)
                fb = _factor(g * g, bias_bound)
                if fac == 0.0 or fb == 0.0:
                    continue
                s = g * fac
                for j in range(d):
                    out[c, j] += s * x[j]
                out[c, d] += g * fb
                continue
            fac = _factor(g * g * (xx + 1.0), clip)
            if fac == 0.0:
                continue  # non-finite gradient: the example adds nothing
            s = g * fac
            for j in range(d):
                out[c, j] += s * x[j]
            out[c, d] += s
    return True


@numba.njit(**_JIT)
def mlp_clipped_sums(
    X, shift, scale, y, params, hidden, clip, bias_bound, rows, starts, offsets, sizes, out
):  # pragma: no cover - compiled
    """Per-client clipped gradient sums of the ReLU MLP into ``out`` (K × (d·h + 2h + 1))."""
    d, h = X.shape[1], hidden
    w1, b1, w2, b2 = 0, h * d, h * d + h, h * d + 2 * h
    x = np.empty(d)
    nz = np.empty(d, dtype=np.int64)
    z = np.empty(h)
    for c in range(starts.size - 1):
        base, size = offsets[c], sizes[c]
        for k in range(starts[c], starts[c + 1]):
            r = rows[k]
            if r < 0 or r >= size:
                return False
            i = base + r
            # Only the row's non-zero inputs enter W1 x and u xᵀ: one-hot rows
            # (130-US: ~20 of 117) cost a fraction of dense ones. A skipped
            # term would have added an exact zero, so the sums are unchanged.
            xx = 0.0
            m = 0
            for j in range(d):
                v = (X[i, j] - shift[j]) * scale[j]
                if v != 0.0:
                    x[m] = v
                    nz[m] = j
                    m += 1
                    xx += v * v
            f = params[b2]
            aa = 0.0
            for a in range(h):
                s = params[b1 + a]
                row = w1 + a * d
                for t in range(m):
                    s += params[row + nz[t]] * x[t]
                z[a] = s
                if s > 0.0:
                    f += params[w2 + a] * s
                    aa += s * s
            g = _sigmoid(f) - y[i]
            uu = 0.0
            for a in range(h):
                if z[a] > 0.0:
                    u = g * params[w2 + a]
                    uu += u * u
            if bias_bound > 0.0:  # all but b2 clipped to C, b2's r to B on its own
                fac = _factor(uu * (xx + 1.0) + g * g * aa, clip)
                fb = _factor(g * g, bias_bound)
                if fb == 0.0:
                    continue
            else:
                fac = _factor(uu * (xx + 1.0) + g * g * (aa + 1.0), clip)
                fb = fac
            if fac == 0.0:
                continue  # non-finite gradient: the example adds nothing
            sg = g * fac
            for a in range(h):
                if z[a] > 0.0:
                    u = sg * params[w2 + a]
                    row = w1 + a * d
                    for t in range(m):
                        out[c, row + nz[t]] += u * x[t]
                    out[c, b1 + a] += u
                    out[c, w2 + a] += sg * z[a]
            out[c, b2] += g * fb
    return True


@numba.njit(**_JIT)
def softmax_clipped_sums(
    X,
    shift,
    scale,
    y,
    params,
    hidden,
    n_classes,
    clip,
    bias_bound,
    rows,
    starts,
    offsets,
    sizes,
    out,
):  # pragma: no cover - compiled
    """Per-client clipped gradient sums of the K-class softmax models into ``out``.

    ``hidden`` 0: logistic, layout ``[W (K × d) | b (K)]``; else the ReLU MLP,
    ``[W1 (h × d) | b1 (h) | W2 (K × h) | b2 (K)]``. With r = softmax(f) − e_y:
    ‖∇‖² = ‖r‖²(‖x‖² + 1) (logistic) or ‖u‖²(‖x‖² + 1) + ‖r‖²(‖a‖² + 1), u =
    W2ᵀr ⊙ 1[z > 0] (MLP). A label that is not a class index adds nothing.
    """
    d, h, K = X.shape[1], hidden, n_classes
    inner = d if h == 0 else h  # fan-in of the output layer
    w1, b1 = 0, h * d
    wo = 0 if h == 0 else h * d + h  # output weights (K × inner), then K biases
    bo = wo + K * inner
    x = np.empty(d)
    z = np.empty(max(h, 1))
    f = np.empty(K)
    for c in range(starts.size - 1):
        base, size = offsets[c], sizes[c]
        for k in range(starts[c], starts[c + 1]):
            r = rows[k]
            if r < 0 or r >= size:
                return False
            i = base + r
            label = y[i]
            if not (label >= 0.0 and label < K and label == math.floor(label)):
                continue  # not a class index: the example adds nothing
            yi = int(label)
            xx = 0.0
            for j in range(d):
                v = (X[i, j] - shift[j]) * scale[j]
                x[j] = v
                xx += v * v
            aa = 0.0
            for a in range(h):
                s = params[b1 + a]
                for j in range(d):
                    s += params[w1 + a * d + j] * x[j]
                z[a] = s
                if s > 0.0:
                    aa += s * s
            top = -math.inf
            for m in range(K):
                s = params[bo + m]
                for t in range(inner):
                    v = x[t] if h == 0 else max(z[t], 0.0)
                    s += params[wo + m * inner + t] * v
                f[m] = s
                top = max(top, s)
            tot = 0.0
            for m in range(K):
                f[m] = math.exp(f[m] - top)
                tot += f[m]
            rr = 0.0
            for m in range(K):
                f[m] = f[m] / tot - (1.0 if m == yi else 0.0)  # r = softmax − e_y
                rr += f[m] * f[m]
            rb = rr if bias_bound == 0.0 else 0.0  # the biases' share of the clipped norm
            if h == 0:
                norm2 = rr * xx + rb
            else:
                uu = 0.0
                for a in range(h):
                    if z[a] > 0.0:
                        u = 0.0
                        for m in range(K):
                            u += f[m] * params[wo + m * h + a]
                        uu += u * u
                norm2 = uu * (xx + 1.0) + rr * aa + rb
            fac = _factor(norm2, clip)
            fb = fac if bias_bound == 0.0 else _factor(rr, bias_bound)
            if fac == 0.0 or fb == 0.0:
                continue  # non-finite gradient: the example adds nothing
            for m in range(K):
                s = f[m] * fac
                for t in range(inner):
                    v = x[t] if h == 0 else max(z[t], 0.0)
                    out[c, wo + m * inner + t] += s * v
                out[c, bo + m] += f[m] * fb
            for a in range(h):
                if z[a] > 0.0:
                    u = 0.0
                    for m in range(K):
                        u += f[m] * params[wo + m * h + a]
                    u *= fac
                    for j in range(d):
                        out[c, w1 + a * d + j] += u * x[j]
                    out[c, b1 + a] += u
    return True


@numba.njit(**_JIT)
def feature_sums(X, shift, scale, clip, rows, starts, offsets, sizes, out):  # pragma: no cover
    """Per-client Σ_i x̃_i · min(1, R/‖x̃_i‖) of the mapped rows into ``out`` (K × d).

    The centring release: one record moves a client's sum by at most R.
    """
    d = X.shape[1]
    x = np.empty(d)
    for c in range(starts.size - 1):
        base, size = offsets[c], sizes[c]
        for k in range(starts[c], starts[c + 1]):
            r = rows[k]
            if r < 0 or r >= size:
                return False
            i = base + r
            xx = 0.0
            for j in range(d):
                v = (X[i, j] - shift[j]) * scale[j]
                x[j] = v
                xx += v * v
            fac = _factor(xx, clip)
            if fac == 0.0:
                continue
            for j in range(d):
                out[c, j] += fac * x[j]
    return True


def warm_up() -> None:
    """Load (or compile) both kernels now, so the first training step is not slowed."""
    X, y, shift, scale = np.zeros((1, 2)), np.zeros(1), np.zeros(2), np.ones(2)
    idx = np.zeros(1, dtype=np.int64)
    starts = np.array([0, 1], dtype=np.int64)
    sizes = np.ones(1, dtype=np.int64)
    args = (idx, starts, idx, sizes)
    logistic_clipped_sums(X, shift, scale, y, np.zeros(3), 1.0, 0.0, *args, np.zeros((1, 3)))
    mlp_clipped_sums(X, shift, scale, y, np.zeros(9), 2, 1.0, 0.0, *args, np.zeros((1, 9)))
    softmax_clipped_sums(X, shift, scale, y, np.zeros(9), 0, 3, 1.0, 0.0, *args, np.zeros((1, 9)))
    feature_sums(X, shift, scale, 1.0, *args, np.zeros((1, 2)))
