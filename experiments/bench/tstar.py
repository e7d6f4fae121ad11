"""The optimal boosting round count T* (benchmark paper Appendix A.4).

The privatised test loss of DP boosting is modelled as (paper eq. A1, plus a
floor L₀ for the irreducible loss; four parameters as in the paper's fit)

    L(T; ε, δ, q) = L₀ + A·exp(−T/τ) + c·T·(z(T; ε, δ, q)/q)²,

where z(T; ε, δ, q) is the smallest noise multiplier at which T Poisson(q)
subsampled Gaussian releases meet (ε, δ). As in the paper, z here comes from
Rényi accounting over the integer orders 2–512 (cheap enough to solve inside
an optimiser); the PLD multipliers our learners actually use are compared with
it through the ratio z_PLD / z_RDP (the paper finds 0.909–0.941).

Closed form (paper eq. A3), derived
-----------------------------------
At leading order in small q, one release costs Θ(q²α/z²) in RDP, so meeting
(ε, δ) after T releases forces (paper eq. A2)

    z(T)² ≈ κ²·q²·T·log(1/δ)/ε²

for a constant κ. Substituting into L, q cancels and the noise term is b·T²
with b = c·κ²·log(1/δ)/ε². Then

    dL/dT = −(A/τ)·e^(−T/τ) + 2bT = 0   ⇔   T·e^(T/τ) = A/(2bτ).

Writing x = T/τ gives x·eˣ = A/(2bτ²) = A·ε² / (2·c·κ²·τ²·log(1/δ)), whose
non-negative solution is the principal Lambert-W branch:

    T* = τ·W₀( A·ε² / (2·c·κ²·τ²·log(1/δ)) ).

It is the unique minimiser because L''(T) = (A/τ²)·e^(−T/τ) + 2b > 0 for
A, b > 0. :func:`lambert_tstar` evaluates it with ``scipy.special.lambertw``;
:func:`exact_tstar` minimises the fitted L with the exact RDP z(T) instead.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

#: Integer Rényi orders of the paper's T* study.
ORDERS = np.arange(2, 513, dtype=np.float64)


@functools.cache
def _rdp_terms(q: float) -> tuple[np.ndarray, np.ndarray]:
    """The z-free part of every term of the RDP sum at rate ``q``, and (k² − k)/2."""
    a = ORDERS[:, None]
    k = np.arange(ORDERS.size + 2, dtype=np.float64)[None, :]
    logc = (
        special.gammaln(a + 1) - special.gammaln(k + 1) - special.gammaln(np.maximum(a - k, 0) + 1)
    )
    base = logc + (a - k) * math.log1p(-q) + k * math.log(q)
    return np.where(k <= a, base, -np.inf), np.broadcast_to((k * k - k) / 2.0, base.shape).copy()


def rdp_subsampled_gaussian(q: float, z: float) -> np.ndarray:
    """RDP of one Poisson(q)-subsampled Gaussian at :data:`ORDERS` (integer α).

    ``log Σ_k C(α,k)(1−q)^(α−k) q^k exp((k²−k)/(2z²)) / (α−1)`` (Mironov,
    Talwar & Zhang 2019, §3.3), vectorised over orders.
    """
    if q >= 1.0:
        return ORDERS / (2.0 * z * z)
    base, half_kk = _rdp_terms(float(q))
    terms = base + half_kk * (1.0 / (z * z))
    m = terms.max(axis=1)
    return (m + np.log(np.exp(terms - m[:, None]).sum(axis=1))) / (ORDERS - 1.0)


def rdp_epsilon(q: float, z: float, steps: float, delta: float) -> float:
    """ε of ``steps`` compositions at δ (dp-accounting's RDP → (ε, δ) conversion)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    return float(compute_epsilon(ORDERS, steps * rdp_subsampled_gaussian(q, z), delta)[0])


def rdp_noise_multiplier(epsilon: float, delta: float, q: float, steps: float) -> float:
    """Smallest z with RDP ε(z) ≤ ``epsilon`` after ``steps`` releases (bisection on log z)."""

    def gap(log_z: float) -> float:
        return math.log(rdp_epsilon(q, math.exp(log_z), steps, delta)) - math.log(epsilon)

    lo, hi = math.log(0.05), math.log(5.0)
    while gap(hi) > 0:
        hi += 1.0
    while gap(lo) < 0:
        lo -= 1.0
    return math.exp(optimize.brentq(gap, lo, hi, xtol=1e-7))


# -- the loss model -----------------------------------------------------------------
@dataclass(frozen=True)
class LossFit:
    """Fitted (L₀, A, τ, c) of eq. A1 and the fit's quality on its points."""

    floor: float
    amplitude: float
    tau: float
    c: float
    rmse: float
    r2: float
    n_points: int

    def loss(self, rounds: np.ndarray, z: np.ndarray, q: float) -> np.ndarray:
        t = np.asarray(rounds, dtype=np.float64)
        zz = np.asarray(z, dtype=np.float64)
        return self.floor + self.amplitude * np.exp(-t / self.tau) + self.c * t * (zz / q) ** 2


def fit_loss_model(
    rounds: Sequence[float], z: Sequence[float], loss: Sequence[float], q: float
) -> LossFit:
    """Least-squares fit of eq. A1 to measured (T, z(T), L) points (all parameters ≥ 0)."""
    t = np.asarray(rounds, dtype=np.float64)
    zz = np.asarray(z, dtype=np.float64)
    y = np.asarray(loss, dtype=np.float64)
    noise = t * (zz / q) ** 2
    spread = max(float(y.max() - y.min()), 1e-6)

    def resid(p: np.ndarray) -> np.ndarray:
        floor, amp, log_tau, log_c = p
        return floor + amp * np.exp(-t / math.exp(log_tau)) + math.exp(log_c) * noise - y

    best = None
    for tau0 in (5.0, 20.0, 60.0, 200.0):
        x0 = [
            float(y.min()) * 0.95,
            spread,
            math.log(tau0),
            math.log(spread / max(float(noise.max()), 1e-12)),
        ]
        sol = optimize.least_squares(
            resid,
            x0,
            bounds=([0.0, 0.0, math.log(0.5), -60.0], [1.5, 10.0, math.log(1e4), 10.0]),
        )
        if best is None or sol.cost < best.cost:
            best = sol
    floor, amp, log_tau, log_c = best.x
    r = resid(best.x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return LossFit(
        floor=float(floor),
        amplitude=float(amp),
        tau=math.exp(log_tau),
        c=math.exp(log_c),
        rmse=float(np.sqrt(np.mean(r**2))),
        r2=1.0 - float((r**2).sum()) / ss_tot if ss_tot > 0 else math.nan,
        n_points=int(y.size),
    )


def lambert_tstar(
    amplitude: float, tau: float, c: float, kappa: float, epsilon: float, delta: float
) -> float:
    """Closed-form T* = τ·W₀(A·ε²/(2·c·κ²·τ²·log(1/δ))) (paper eq. A3; derivation above)."""
    arg = amplitude * epsilon**2 / (2.0 * c * kappa**2 * tau**2 * math.log(1.0 / delta))
    return float(tau * special.lambertw(arg, 0).real)


def leading_order_kappa(
    epsilon: float, delta: float, q: float, rounds: Sequence[float], z: Sequence[float]
) -> float:
    """κ of eq. A2 by least squares through the origin: z² ≈ κ²·(q²·T·log(1/δ)/ε²)."""
    x = q * q * np.asarray(rounds, dtype=np.float64) * math.log(1.0 / delta) / epsilon**2
    z2 = np.asarray(z, dtype=np.float64) ** 2
    return math.sqrt(float((z2 * x).sum() / (x * x).sum()))


def minimise_rounds(
    loss_at: Callable[[float], float], lo: float = 1.0, hi: float = 2000.0
) -> float:
    """Continuous minimiser of ``loss_at(T)`` over [lo, hi] (bounded search on log T)."""
    sol = optimize.minimize_scalar(
        lambda u: loss_at(math.exp(u)),
        bounds=(math.log(lo), math.log(hi)),
        method="bounded",
        options={"xatol": 5e-3},
    )
    return math.exp(sol.x)


def exact_tstar(fit: LossFit, epsilon: float, delta: float, q: float) -> float:
    """T* minimising the fitted eq. A1 with the exact (RDP-bisected) z(T; ε, δ, q)."""

    def loss_at(t: float) -> float:
        z = rdp_noise_multiplier(epsilon, delta, q, t)
        return float(fit.loss(np.array([t]), np.array([z]), q)[0])

    return minimise_rounds(loss_at)


def tstar_grid(
    fit: LossFit,
    epsilons: Sequence[float],
    deltas: Sequence[float],
    sampling_rates: Sequence[float],
    *,
    base_delta: float,
    base_q: float,
) -> list[dict[str, float]]:
    """Table A1: T* over δ (at ``base_q``) and over q (at ``base_delta``), per ε."""
    combos = [(d, base_q) for d in deltas] + [(base_delta, q) for q in sampling_rates]
    rows = []
    for delta, q in dict.fromkeys(combos):
        for eps in epsilons:
            rows.append(
                {
                    "epsilon": eps,
                    "delta": delta,
                    "q": q,
                    "tstar": exact_tstar(fit, eps, delta, q),
                }
            )
    return rows
