"""The server's GAM step from released bin sums: Newton updates and the gain left.

Post-processing of released (Σg, Σh) only: the damped, bounded Newton step of
a term's bins (:func:`newton_bin_updates`) and the noise-corrected Newton gain
a term keeps after it (:func:`residual_gain`, :func:`residual_gains`), which
picks the next term. Apart from :mod:`fedpriv.models.gam` (the model and what
a client computes); re-exported there.
"""

from __future__ import annotations

import numpy as np

from fedpriv.models.trees import newton_leaf_values


def newton_bin_updates(
    sum_g: np.ndarray,
    sum_h: np.ndarray,
    *,
    learning_rate: float,
    reg_lambda: float,
    max_update: float,
) -> np.ndarray:
    """``clip(−η Σg / (max(Σh, 0) + λ), ±max_update)``: a damped, bounded Newton step
    (:func:`fedpriv.models.trees.newton_leaf_values`).

    ``max(Σh, 0)`` keeps a noisy negative hessian from flipping the step and the
    public bound ``max_update`` keeps noise in an empty bin from blowing up the model.
    """
    return newton_leaf_values(
        sum_g, sum_h, learning_rate=learning_rate, reg_lambda=reg_lambda, max_update=max_update
    )


def residual_gain(
    sum_g: np.ndarray,
    sum_h: np.ndarray,
    step: np.ndarray,
    *,
    reg_lambda: float,
    noise_std: float = 0.0,
) -> float:
    """The Newton gain left in a term after it took ``step`` (:func:`newton_bin_updates`).

    Under the local quadratic model of the loss in bin b, with gradient sum G and
    hessian sum H, the step s leaves the gradient G + H·s, whose remaining gain is
    (G + H·s)² / (H + λ) (Chen & Guestrin 2016, eq. 6). The released G̃ = G +
    N(0, σ²) gives E[G̃²] = G² + σ², so σ² is subtracted from each bin's squared
    gradient (clipped at 0) before it counts: otherwise a term with many bins
    would look promising from noise alone. Post-processing of released sums.
    """
    per_bin = residual_gains(sum_g, sum_h, step, reg_lambda=reg_lambda, noise_std=noise_std)
    return float(np.sum(np.maximum(per_bin, 0.0)))


def residual_gains(
    sum_g: np.ndarray,
    sum_h: np.ndarray,
    step: np.ndarray,
    *,
    reg_lambda: float,
    noise_std: float = 0.0,
) -> np.ndarray:
    """Each bin's ((G + H·s)² − σ²)/(H + λ), not clipped at 0 (:func:`residual_gain`
    clips and sums): unbiased for the bin's gain left, so that a sum over many bins
    of null columns (DP-EBM's group round) is not inflated by noise alone."""
    h = np.maximum(np.asarray(sum_h, dtype=np.float64), 0.0)
    left = np.asarray(sum_g, dtype=np.float64) + h * np.asarray(step)
    return (left**2 - noise_std**2) / (h + reg_lambda)
