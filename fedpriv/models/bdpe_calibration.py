"""bdpe's calibration round: public margin bins and Platt scaling on released counts.

After the trees, one more release gives per-bin class counts of the ensemble
margin H; :func:`calibration_edges` places the public bins from released
values only, and :func:`platt_fit` maps H to a probability from the released
counts (post-processing). Kept apart from :mod:`fedpriv.models.bdpe` (the M_α
loss, its links and the split statistics), which re-exports these names.
"""

from __future__ import annotations

import math

import numpy as np

#: Bins of the margin H in the calibration round, and the floor on the Platt slope
#: (a > 0 keeps the map strictly increasing: probabilities rank as H does).
CALIBRATION_BINS, MIN_SLOPE = 24, 1e-3


def calibration_edges(beta, leaf_values, leaf_mass, bins: int = CALIBRATION_BINS) -> np.ndarray:
    """Public bin edges on the margin H for the calibration round (``bins − 1`` of them).

    From released values only: each tree's leaf values and released leaf masses
    (w¹ + w⁰, clipped at 0) give the mean and variance of β_t h_t over the
    weighted records; summed over trees (as if independent) they give a centre
    μ and a spread σ̂ of H. The edges are μ + ¾σ̂·ψ_Mat(j/B), j = 1..B−1: dense
    near μ, the outermost ≈ 3.4σ̂ away. Edges centred on 0 instead put every
    record of an unbalanced corpus (130-US: 91 % negatives, H ≈ −0.7 ± 0.1)
    in one or two bins.
    """
    beta = np.asarray(beta, dtype=np.float64)
    values = np.asarray(leaf_values, dtype=np.float64)
    mass = np.maximum(np.asarray(leaf_mass, dtype=np.float64), 0.0)
    mu, var = 0.0, 0.0
    for b, v, w in zip(beta, values, mass, strict=True):
        tot = w.sum()
        weights = w / tot if tot > 0 else np.full(v.size, 1.0 / v.size)
        m = float(weights @ v)
        mu += b * m
        var += b * b * float(weights @ (v - m) ** 2)
    spread = max(math.sqrt(var), 1e-6)
    u = np.arange(1, bins) / bins
    return mu + 0.75 * spread * (2.0 * u - 1.0) / np.sqrt(u * (1.0 - u))


def max_platt_slope(edges: np.ndarray, logits: float = 10.0) -> float:
    """The largest Platt slope: ``logits`` across the outermost edges' half-range."""
    e = np.asarray(edges, dtype=np.float64)
    return logits / max(0.5 * float(e[-1] - e[0]), 1e-12)


def bin_centres(edges: np.ndarray) -> np.ndarray:
    """A representative margin per bin: midpoints, the end bins a half-width outside."""
    e = np.asarray(edges, dtype=np.float64)
    if e.size == 1:
        return np.array([e[0] - 1.0, e[0] + 1.0])
    mid = 0.5 * (e[1:] + e[:-1])
    return np.concatenate([[e[0] - 0.5 * (e[1] - e[0])], mid, [e[-1] + 0.5 * (e[-1] - e[-2])]])


def platt_fit(
    positives, negatives, centres, *, max_slope: float = math.inf, iterations: int = 50
) -> np.ndarray:
    """(a, b) maximising Σ_b n¹_b log σ(a c_b + b) + n⁰_b log(1 − σ(a c_b + b)).

    Platt scaling (Platt 1999) on released bin counts (clipped at 0): Newton's
    method with backtracking on the concave log-likelihood, a small ridge
    (1e-6) for bins that noise emptied, :data:`MIN_SLOPE` ≤ a ≤ ``max_slope``. Noise can
    make the counts look separable, where the likelihood grows without bound
    in a: the cap keeps the map from jumping from 0 to 1 inside one bin.
    Post-processing.
    """
    p = np.maximum(np.asarray(positives, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(negatives, dtype=np.float64), 0.0)
    c = np.asarray(centres, dtype=np.float64)
    tot = p + n
    rate = (p.sum() + 0.5) / (tot.sum() + 1.0)
    Z = np.column_stack([c, np.ones_like(c)])
    lo, hi = np.array([MIN_SLOPE, -np.inf]), np.array([max_slope, np.inf])

    def objective(theta: np.ndarray) -> float:
        z = Z @ theta  # log σ(z) = −log(1 + e^−z), stably
        return float(-(p @ np.logaddexp(0.0, -z)) - n @ np.logaddexp(0.0, z)) - 5e-7 * theta @ theta

    theta = np.clip(np.array([MIN_SLOPE, math.log(rate / (1.0 - rate))]), lo, hi)
    current = objective(theta)
    for _ in range(iterations):
        s = 0.5 * (1.0 + np.tanh(0.5 * (Z @ theta)))
        grad = Z.T @ (p - tot * s) - 1e-6 * theta
        hess = (Z * (tot * s * (1.0 - s))[:, None]).T @ Z + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        t = 1.0  # backtracking: a Newton step on a nearly flat direction may overshoot
        while t > 1e-8:
            trial = np.clip(theta + t * step, lo, hi)
            value = objective(trial)
            if value >= current:
                break
            t *= 0.5
        else:
            break
        moved = np.max(np.abs(trial - theta))
        theta, current = trial, value
        if moved < 1e-10:
            break
    return theta
