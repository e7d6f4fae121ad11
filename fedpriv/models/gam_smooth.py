"""Smoothing a numeric DP-EBM term's released per-bin sums before its Newton step.

The Gaussian noise on a numeric term's released (Σg_b, Σh_b) is independent
from bin to bin, while the loss's gradient along an ordered column changes
slowly from one bin to the next. Averaging each bin's sums with its
neighbours' therefore trades a little bias for less noise. With a Gaussian
kernel over bin indices, row-normalised,

    W_bj = K(b − j) / Σ_j' K(b − j'),   K(d) = exp(−d² / (2 w²)),

the smoothed step of bin b is

    s_b = −η Σ_j W_bj G̃_j / (Σ_j W_bj H̃_j + λ),

the Newton step of the kernel-weighted, local-constant fit of the loss at
bin b (local likelihood: Fan & Gijbels, "Local Polynomial Modelling and Its
Applications", 1996; the Nadaraya–Watson estimator when the loss is
quadratic). The noise on each smoothed sum has variance σ² Σ_j W_bj² instead
of σ² (1/(2√π w) for a wide interior kernel), and the step is unbiased
wherever the per-bin ratio of gradient to hessian is locally constant.

**Choosing the bandwidth.** How much smoothing pays depends on the noise
(σ, public) and on the shape's curvature (unknown): every visit of a numeric
term picks its bandwidth from ``w_max`` × :data:`SURE_FRACTIONS` (``w_max``:
the ``smooth`` setting) by Stein's unbiased risk estimate of the smoothed
gradient sums (Stein, Ann. Statist. 1981; Li, Ann. Statist. 1986, for linear
smoothers),

    SURE(w) = ‖W G̃ − G̃‖² + 2 σ² tr(W)   (+ the constant −n σ²),

unbiased for E‖W G̃ − G‖² under i.i.d. N(0, σ²) noise. Without noise
(σ = 0) it picks w = 0; where the noise swamps the bin-to-bin differences it
picks the widest kernel. On the softmax's sum-zero plane a bin's noise
covariance σ²(I − 11ᵀ/C) has trace σ²(C − 1), which replaces σ².

Properties used by the strategy and checked by the tests:

* ``W 1 = 1``: a constant profile is unchanged, so a term whose bins share one
  value of Σg (and of Σh) takes exactly the step it takes unsmoothed;
* ``W`` acts on the bin axis only, so it commutes with any map on the class
  axis (the softmax GAM's sum-zero projection of Σg);
* the kernel is symmetric and truncated at :data:`KERNEL_REACH` bandwidths, so
  ``W`` commutes with reversing the bin order;
* ``w = 0`` is the identity.

Only the ordered value bins of a numeric term are smoothed: its missing-value
bin, a binary and a categorical term (unordered levels) are left as released.
DP-EBM's authors (Nori, Caruana et al., "Accuracy, Interpretability, and
Differential Privacy via Explainable Boosting", ICML 2021) point out that
editing the released graphs (e.g. making them monotone) is free
post-processing; smoothing each round's sums rather than the final graph
keeps boosting's residual structure: a later visit corrects what smoothing
flattened.

Privacy: the bandwidth and the map read only released sums, the public
binning, the public noise scale and the public ``w_max``, so both are
post-processing and cost nothing.
"""

from __future__ import annotations

import math

import numpy as np

#: How far the kernel reaches, in bandwidths (weights beyond are < 1e-4 of the centre's).
KERNEL_REACH = 4.3
#: Bandwidths a round chooses from, as fractions of the largest (0: no smoothing).
SURE_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def smoothing_matrix(n_ordered: int, bandwidth: float) -> np.ndarray:
    """Row-normalised Gaussian kernel ``W`` over ``n_ordered`` ordered bins.

    Parameters
    ----------
    n_ordered : int
        Ordered bins of the term (its value bins, not a missing-value bin).
    bandwidth : float
        Kernel standard deviation ``w`` in bins; 0 gives the identity.

    Returns
    -------
    (n_ordered, n_ordered) float64
        ``W_bj ∝ exp(−(b − j)² / (2 w²))`` for ``|b − j| ≤ 4.3 w`` (else 0), each row
        summing to 1 (the identity when ``4.3 w < 1``: no neighbour within reach).
    """
    if isinstance(n_ordered, bool) or not isinstance(n_ordered, (int, np.integer)):
        raise TypeError(f"n_ordered must be an integer; got {n_ordered!r}")
    if n_ordered < 1:
        raise ValueError(f"n_ordered must be ≥ 1; got {n_ordered}")
    if not (math.isfinite(bandwidth) and bandwidth >= 0):
        raise ValueError(f"bandwidth must lie in [0, inf) bins; got {bandwidth!r}")
    if KERNEL_REACH * bandwidth < 1:  # no neighbour within reach (w = 0 included)
        return np.eye(n_ordered)
    d = np.subtract.outer(np.arange(n_ordered), np.arange(n_ordered)).astype(np.float64)
    w = np.exp(-0.5 * (d / bandwidth) ** 2)
    w[np.abs(d) > KERNEL_REACH * bandwidth] = 0.0
    return w / w.sum(axis=1, keepdims=True)


def smooth_ordered(values: np.ndarray, n_ordered: int, bandwidth: float) -> np.ndarray:
    """``W @ values`` on the first ``n_ordered`` rows (bins); the other rows unchanged.

    Parameters
    ----------
    values : (n_bins,) or (n_bins, C) array
        Per-bin sums of one term (Σg or Σh), its ordered value bins first and a
        missing-value bin, if any, after them.
    n_ordered : int
        Ordered value bins, in [1, n_bins].
    bandwidth : float
        Kernel standard deviation in bins (:func:`smoothing_matrix`).

    Returns
    -------
    array of the shape of ``values``
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim not in (1, 2) or not 1 <= n_ordered <= v.shape[0]:
        raise ValueError(
            f"need (n_bins,) or (n_bins, C) values and n_ordered in [1, n_bins]; "
            f"got shape {v.shape}, n_ordered {n_ordered}"
        )
    out = v.copy()
    out[:n_ordered] = np.tensordot(smoothing_matrix(n_ordered, bandwidth), v[:n_ordered], 1)
    return out


def sure_risk(sum_g: np.ndarray, n_ordered: int, bandwidth: float, noise_var: float) -> float:
    """Stein's unbiased risk estimate of ``W G̃`` over the ordered bins, plus ``n σ²``.

    For G̃ = G + e with i.i.d. N(0, σ²) entries and a fixed linear smoother W
    (Stein 1981; Li 1986), ``‖W G̃ − G̃‖² + 2σ² tr(W) − n σ²`` is unbiased for
    the risk E‖W G̃ − G‖²; the constant −n σ² is dropped (it does not depend on
    W). ``noise_var``: the trace of one bin's noise covariance (σ² for one
    logit; σ²(C − 1) on the softmax's sum-zero plane).
    """
    g = np.asarray(sum_g, dtype=np.float64)[:n_ordered]
    W = smoothing_matrix(n_ordered, bandwidth)
    resid = np.tensordot(W, g, 1) - g
    return float(np.sum(resid**2) + 2.0 * noise_var * np.trace(W))


def sure_bandwidth(
    sum_g: np.ndarray, n_ordered: int, bandwidths: tuple[float, ...], noise_var: float
) -> float:
    """The bandwidth of ``bandwidths`` with the least :func:`sure_risk` (first on ties)."""
    risks = [sure_risk(sum_g, n_ordered, w, noise_var) for w in bandwidths]
    return bandwidths[int(np.argmin(risks))]


def smooth_sums(
    sum_g: np.ndarray, sum_h: np.ndarray, n_ordered: int, largest: float, noise_var: float
) -> tuple[np.ndarray, np.ndarray]:
    """One numeric term's (Σg, Σh) smoothed with the SURE-chosen bandwidth.

    Parameters
    ----------
    sum_g, sum_h : (n_bins,) or (n_bins, C) arrays
        Released sums, the ordered value bins first.
    n_ordered : int
        Ordered value bins (a missing-value bin after them is left alone).
    largest : float
        Widest bandwidth considered; the candidates are ``largest`` ×
        :data:`SURE_FRACTIONS`. 0 (or a single ordered bin): the sums as given.
    noise_var : float
        Trace of one bin's noise covariance on Σg (:func:`sure_risk`).

    Returns
    -------
    (Σg, Σh)
        Both smoothed with the bandwidth of least :func:`sure_risk` for Σg; the
        inputs themselves when that bandwidth is 0.
    """
    if largest == 0 or n_ordered < 2:
        return sum_g, sum_h
    w = sure_bandwidth(sum_g, n_ordered, tuple(largest * f for f in SURE_FRACTIONS), noise_var)
    if w == 0:
        return sum_g, sum_h
    return smooth_ordered(sum_g, n_ordered, w), smooth_ordered(sum_h, n_ordered, w)
