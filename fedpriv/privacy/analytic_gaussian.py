"""The analytic Gaussian mechanism: exact δ(ε) of one Gaussian release, and its z.

Balle & Wang 2018, "Improving the Gaussian mechanism", Thm. 8: closed-form
δ(ε) and the smallest noise multiplier meeting (ε, δ), solved in log δ so
that δ = 1e-300 stays exact. Kept apart from :mod:`fedpriv.privacy.calibration`
(the PLD search for composed, subsampled releases), which re-exports these
names.
"""

from __future__ import annotations

import functools
import math

from scipy import optimize, special, stats

from fedpriv.privacy.calibration_range import (
    MAX_NOISE_MULTIPLIER,
    CalibrationRangeError,
    ceiling_message,
)
from fedpriv.validation import check_open_unit, check_positive


def gaussian_delta(epsilon: float, noise_multiplier: float) -> float:
    """Exact δ(ε) of one Gaussian release with σ/Δ = ``noise_multiplier``.

    ``δ = Φ(1/(2z) − εz) − e^ε Φ(−1/(2z) − εz)`` (Balle & Wang 2018, Thm. 8).
    """
    z = noise_multiplier
    a = stats.norm.cdf(0.5 / z - epsilon * z)
    b = math.exp(epsilon + special.log_ndtr(-0.5 / z - epsilon * z))
    return max(0.0, a - b)


def log_gaussian_delta(epsilon: float, noise_multiplier: float) -> float:
    """``log δ(ε)`` of :func:`gaussian_delta`, without underflow (δ = 1e-300 stays exact).

    ``log δ = log Φ(a) + log(1 − e^{ε + log Φ(b) − log Φ(a)})`` with
    ``a = 1/(2z) − εz``, ``b = −1/(2z) − εz`` (Balle & Wang 2018, Thm. 8).
    """
    z = noise_multiplier
    log_a = float(special.log_ndtr(0.5 / z - epsilon * z))
    r = epsilon + float(special.log_ndtr(-0.5 / z - epsilon * z)) - log_a
    return log_a + math.log(-math.expm1(r)) if r < 0 else -math.inf


def analytic_gaussian_noise_multiplier(*, epsilon: float, delta: float) -> float:
    """Smallest z with ``gaussian_delta(ε, z) ≤ δ`` (never above: checked after solving)."""
    return _analytic_z(check_positive("epsilon", epsilon), check_open_unit("delta", delta))


@functools.lru_cache(maxsize=1024)
def _analytic_z(eps: float, dlt: float) -> float:
    # Memoised (a pure root search of ≈ 17 scipy cdf calls, ≈ 1.5 ms): every
    # random-forest fit calibrates its leaves through GaussianMechanism.for_budget.

    # In log δ: δ(z) underflows to 0 long before z is large at δ = 1e-300.
    def gap(log_z: float) -> float:
        return log_gaussian_delta(eps, math.exp(log_z)) - math.log(dlt)

    lo, hi = math.log(1e-3), math.log(1e4)
    while gap(lo) < 0:
        lo -= 2.0
    while gap(hi) > 0:  # ε ≪ 1: z ≈ 0.4/δ can pass 1e4
        hi += 2.0
        if hi > math.log(MAX_NOISE_MULTIPLIER):
            raise CalibrationRangeError(ceiling_message(target_epsilon=eps, target_delta=dlt))
    z = math.exp(optimize.brentq(gap, lo, hi, xtol=1e-13, rtol=1e-13))
    while gaussian_delta(eps, z) > dlt:
        z *= 1.0 + 1e-12
    return z
