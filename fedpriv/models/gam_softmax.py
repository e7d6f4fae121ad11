"""Multiclass DP-EBM (C > 2 classes): a softmax GAM and the sensitivity of its sums.

The model holds C logits, ``f_c(x) = b_c + Σ_k s_k[bin_k(x), c]``, and
``P(y = c | x) = softmax(f(x))_c``. Every term keeps **C values per bin**
(no reference class): the per-bin reply then carries every class's Σg_c, the
noisy Σg are projected on the sum-zero plane (exact sums lie on it, since a
record's gradient sums to 0 over the classes: post-processing that removes
1/C of the noise), and no class is singled out by the parametrisation (a
reference class would cost the same sensitivity, see below, and make the
noise on its bins depend on which class is chosen). Softmax is invariant to
adding one constant to every class of a bin, so the C values are determined
up to that constant; predictions are not.

Per-record gradient and diagonal hessian of the cross-entropy at margin f,
p = softmax(f), y the record's class:

* g = p − e_y, so ‖g‖₂² = (1 − p_y)² + Σ_{c≠y} p_c² ≤ (1 − p_y)² + (1 − p_y)² ≤ 2,
  since Σ_{c≠y} p_c² ≤ (Σ_{c≠y} p_c)² = (1 − p_y)². Hence ‖g‖₂ ≤ √2
  (:data:`GRAD_L2`), approached when all the mass sits on a wrong class.
  A label that is not a class (bypassed validation) has g = p, ‖g‖₂ ≤ 1.
* h_c = p_c(1 − p_c) ∈ [0, ¼], so ‖h‖₂² = Σ h_c² ≤ max_c h_c · Σ_c h_c
  ≤ ¼ (1 − Σ p_c²) ≤ ¼ (1 − 1/C) (Cauchy–Schwarz: Σ p_c² ≥ 1/C). Hence
  ‖h‖₂ ≤ ½√(1 − 1/C) (:func:`hess_l2`); for C = 2 the bound is attained at
  p = (½, ½).

A record sits in exactly one bin of a term, so the per-bin reply
``[Σg_{b,c} | Σh_{b,c}]`` of one term has L2 sensitivity
√(2 + ¼(1 − 1/C)) (:func:`term_sensitivity`). The client rescales a record's
g and h to these norms where it computes them (:func:`softmax_bin_sums`), so
the bound holds whatever the margins and labels.

Intercept, at margin 0: p = 1/C, g = 1/C − e_y with ‖g‖₂² = 1 − 1/C, and
h_c = (1/C)(1 − 1/C) the same public constant for every class and record, so
the reply is ``[Σg_1..C, Σh]`` with one Σh (= n·h₀): sensitivity
√(1 − 1/C + h₀²) (:func:`intercept_sensitivity`).

Every softmax Newton step (the intercept's too) is scaled by (C − 1)/C
(:func:`softmax_step_scale`).
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.records import class_codes

#: ‖g‖₂ ≤ √2 per record (g = p − e_y on the simplex).
GRAD_L2 = math.sqrt(2.0)


def hess_l2(n_classes: int) -> float:
    """Bound on ‖h‖₂ per record, h_c = p_c(1 − p_c): ½√(1 − 1/C)."""
    return 0.5 * math.sqrt(1.0 - 1.0 / n_classes)


def term_sensitivity(n_classes: int) -> float:
    """L2 sensitivity of one term's per-bin ``[Σg | Σh]`` (C values each per bin)."""
    return math.sqrt(GRAD_L2**2 + hess_l2(n_classes) ** 2)


def intercept_hessian(n_classes: int) -> float:
    """h₀ = (1/C)(1 − 1/C): each record's hessian of every class at margin 0."""
    return (1.0 / n_classes) * (1.0 - 1.0 / n_classes)


def intercept_sensitivity(n_classes: int) -> float:
    """L2 sensitivity of ``[Σg_1..C, Σh]`` at margin 0."""
    return math.sqrt(1.0 - 1.0 / n_classes + intercept_hessian(n_classes) ** 2)


def softmax_step_scale(n_classes: int) -> float:
    """(C − 1)/C: the factor on each class's diagonal Newton step (Friedman 2001, Alg. 6).

    The diagonal hessian p_c(1 − p_c) ignores the coupling of the C logits
    through the softmax, so the plain diagonal step overshoots; on BRFSS with 3
    classes (``experiments/gam_check.py``, ε = ∞) η = 1 without the factor gave
    macro AUC 0.734, with it (η = ⅔) 0.784.
    """
    return (n_classes - 1) / n_classes


def softmax(f: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, C) logits (stable: the row maximum is subtracted)."""
    z = np.asarray(f, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def clip_rows(v: np.ndarray, bound: float) -> np.ndarray:
    """Each row rescaled to L2 norm ≤ ``bound`` (a NaN row becomes 0)."""
    v = np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return v * np.minimum(1.0, bound / np.maximum(norm, 1e-300))


def record_grads(margin: np.ndarray, y: np.ndarray, n_classes: int):
    """Per-record (g, h), each (n, C), clipped to ‖g‖₂ ≤ √2 and 0 ≤ h, ‖h‖₂ ≤ ½√(1 − 1/C)."""
    p = softmax(margin)
    codes = class_codes(y, n_classes)
    g = p.copy()
    ok = codes >= 0
    g[np.flatnonzero(ok), codes[ok]] -= 1.0
    h = np.clip(p * (1.0 - p), 0.0, 0.25)
    return clip_rows(g, GRAD_L2), clip_rows(h, hess_l2(n_classes))


def softmax_bin_sums(
    margin: np.ndarray, y: np.ndarray, bins: np.ndarray, n_bins: int, n_classes: int
) -> np.ndarray:
    """``[Σg_{b,c} | Σh_{b,c}]`` (bin-major, class-minor) of one term, g and h per record
    clipped to the norms the sensitivity assumes."""
    b = np.asarray(bins, dtype=np.int64)
    if b.size and (b.min() < 0 or b.max() >= n_bins):
        raise ValueError(f"bins must lie in [0, {n_bins}); got {b.min()}..{b.max()}")
    g, h = record_grads(margin, y, n_classes)
    sums = np.zeros((2, n_bins, n_classes))
    np.add.at(sums[0], b, g)
    np.add.at(sums[1], b, h)
    return sums.reshape(-1)


def softmax_intercept_sums(y: np.ndarray, n_classes: int) -> np.ndarray:
    """``[Σg_1..C, Σh]`` at margin 0: g = 1/C − e_y, h = h₀ per record."""
    codes = class_codes(y, n_classes)
    n = codes.size
    counts = np.bincount(codes[codes >= 0], minlength=n_classes).astype(np.float64)
    g = n / n_classes - counts
    return np.append(g, intercept_hessian(n_classes) * n)


def sum_zero(sum_g: np.ndarray) -> np.ndarray:
    """Released Σg (…, C) projected on Σ_c = 0, where the exact sums lie (post-processing)."""
    g = np.asarray(sum_g, dtype=np.float64)
    return g - g.mean(axis=-1, keepdims=True)
