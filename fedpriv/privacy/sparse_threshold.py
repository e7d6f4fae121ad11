"""The Gaussian sparse threshold of Lumberjack: mechanism, exact δ, calibration.

Lumberjack (Lebeda, Erb, Cebere & Bellet) finds the heavy nodes of k random
trees with adaptive threshold queries on node counts. Algorithm 2
(``GaussianSparseThreshold``) answers a count q with

    ⊤  iff  q > τ − Δ − 1  and  q + Z > τ,   Z ~ N(0, σ²),

and Algorithm 3 (two-sided) also answers ⊤ whenever q ≥ τ + Δ + 1. Each
record enters at most m = k(1 + ⌊log₂ h⌋) queries (Lemma 3), and the whole
forest's structure is (ε, δ)-DP with δ from **Theorem 6** (Lemma 15), with
P = Φ(Δ/σ), γ(j) = (m − j) log P and the tight Gaussian curve
G(e, j) = Φ(√j/(2σ) − eσ/√j) − e^e Φ(−√j/(2σ) − eσ/√j) (Lemma 14):

    δ(ε) = max{ 1 − P^m,
                max_{j∈[m]} [1 − P^{m−j} + P^{m−j} G(ε − γ(j), j)],
                max_{j∈[m]} G(ε + γ(j), j) }.

This is not a composition of standard events, so dp-accounting's PLD cannot
represent it: the ledger records the certified pair as an
:class:`fedpriv.privacy.events.ApproxDpEvent` and composes it with the rest
of the run by basic composition. Algorithm 3 is (ε, δ_Gauss + δ_inf)-DP with
δ_Gauss = G(ε, m) and δ_inf = 1 − P^m (Lemma 16).

Calibration (:func:`calibrate_sparse_threshold`) takes τ = 1 + Δ (the paper's
choice: empty nodes are answered ⊥ without noise) and searches σ for the
smallest τ whose Theorem 6 δ is at most the target; Lemma 7's closed form
(ε < 1) is a valid but looser reference.

Also here: Lemma 9, the ρ-zCDP → (ε, δ) conversion the paper uses for the
leaf labels (Bun & Steinke 2016), and the largest ρ meeting a target.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from fedpriv.privacy.randomness import gaussian_on_grid
from fedpriv.validation import (
    check_count,
    check_open_unit,
    check_positive,
)


def _gaussian_curve(e: np.ndarray, j: np.ndarray, sigma: float) -> np.ndarray:
    """G(e, j): δ of a Gaussian with sensitivity √j and std σ at ε = e (Lemma 14)."""
    a = np.sqrt(j) / (2.0 * sigma)
    b = e * sigma / np.sqrt(j)
    with np.errstate(over="ignore"):
        second = np.exp(e + special.log_ndtr(-a - b))
    return special.ndtr(a - b) - second


def theorem6_delta(*, epsilon: float, sigma: float, gap: float, m: int) -> float:
    """δ of m-query Gaussian sparse thresholds (Lumberjack Thm. 6 / Lemma 15) at ε.

    ``gap`` is Δ; the threshold τ does not enter (only the gate τ − Δ − 1 does).
    """
    eps = check_positive("epsilon", epsilon)
    sig = check_positive("sigma", sigma)
    gap = check_positive("gap", gap)
    m = check_count("m", m)
    log_p = float(special.log_ndtr(gap / sig))
    j = np.arange(1, m + 1, dtype=np.float64)
    gamma = (m - j) * log_p  # ≤ 0
    p_rest = np.exp(gamma)  # P^{m−j}
    first = -math.expm1(m * log_p)  # 1 − P^m
    second = (1.0 - p_rest) + p_rest * _gaussian_curve(eps - gamma, j, sig)
    third = _gaussian_curve(eps + gamma, j, sig)
    return float(max(first, second.max(), third.max(), 0.0))


def two_sided_delta(*, epsilon: float, sigma: float, gap: float, m: int) -> float:
    """δ_Gauss + δ_inf of Algorithm 3 (Lumberjack Lemma 16)."""
    eps, sig = check_positive("epsilon", epsilon), check_positive("sigma", sigma)
    m = check_count("m", m)
    gauss = float(_gaussian_curve(np.array(eps), np.array(float(m)), sig))
    return gauss - math.expm1(m * float(special.log_ndtr(gap / sig)))


def lemma7_parameters(*, epsilon: float, delta: float, m: int) -> tuple[float, float]:
    """(σ, Δ) of Lumberjack Lemma 7: σ = √(2m ln(2.5/δ))/ε, Δ = σ√(2 ln(2m/δ)); ε < 1."""
    eps = check_open_unit("epsilon", epsilon)
    dlt = check_open_unit("delta", delta)
    m = check_count("m", m)
    sigma = math.sqrt(2.0 * m * math.log(2.5 / dlt)) / eps
    return sigma, sigma * math.sqrt(2.0 * math.log(2.0 * m / dlt))


def queries_per_record(n_trees: int, height: int) -> int:
    """m = k(1 + ⌊log₂ h⌋): queries one record can enter (Lumberjack Lemma 3)."""
    k, h = check_count("n_trees", n_trees), check_count("height", height)
    return k * h.bit_length()  # 1 + ⌊log₂ h⌋, exactly, for an integer h ≥ 1


def staged_queries_per_record(n_trees: int, heights: list[int]) -> int:
    """m = k·Σ_s (1 + ⌊log₂ h_s⌋) when Algorithm 1 runs stage by stage (Lemma 3 per stage).

    A record sits in at most one root of each stage of each tree, so Lemma 3
    on that root's subtree (height h_s) bounds its queries in the stage;
    the stages' queries are chosen from released answers only, which Lemma
    15 allows (adaptive counting queries). One stage of height h is Lemma 3's
    k(1 + ⌊log₂ h⌋); stages of height 1 are the top-down check, m = k·d.
    """
    k = check_count("n_trees", n_trees)
    if not heights:
        raise ValueError("heights must hold at least one stage; got []")
    return k * sum(check_count("height", h).bit_length() for h in heights)


@dataclass(frozen=True, kw_only=True)
class SparseThreshold:
    """Algorithm 2 (or 3 with ``two_sided``) with noise σ, gap Δ and gate τ − Δ − 1.

    The gate is a parameter and τ = gate + 1 + Δ is derived, not the other way
    round: computing τ − Δ − 1 in floating point can land a hair below 0 and
    let empty nodes through the deterministic gate (the audit test caught
    exactly that). The paper's choice τ = 1 + Δ is ``gate=0``.
    """

    sigma: float
    gap: float
    gate: float = 0.0
    two_sided: bool = False
    #: Records per unit count (unit-level privacy, :mod:`fedpriv.privacy.units`): a
    #: count q is answered as q/u on the calibrated scale, i.e. σ, the gate and τ are
    #: multiplied by u on the integer counts (exact: the counts stay on the grid).
    unit: int = 1

    def __post_init__(self) -> None:
        check_positive("sigma", self.sigma)
        check_positive("gap", self.gap)
        if not math.isfinite(self.gate):
            raise ValueError(f"gate must be finite; got {self.gate!r}")
        check_count("unit", self.unit)

    @property
    def tau(self) -> float:
        """τ = gate + 1 + Δ."""
        return self.gate + 1.0 + self.gap

    def check(self, counts: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """One independent answer (True = ⊤) per count, in order.

        A noise draw is made for every count, gated or not, so how many draws
        a call consumes depends only on how many counts it gets.
        """
        q, u = np.asarray(counts, dtype=np.float64), self.unit
        # Counts are integers, on the grid already: no rounding margin is needed. With
        # u > 1 this is Algorithm 2 on q/u (a unit moves each q/u by at most 1).
        noisy = gaussian_on_grid(q, u * self.sigma, rng)
        out = (q > u * self.gate) & (noisy > u * self.tau)
        if self.two_sided:
            out |= q >= u * (self.tau + self.gap + 1.0)
        return out


@dataclass(frozen=True, kw_only=True)
class SparseThresholdCalibration:
    """σ, Δ, τ = 1 + Δ for (ε, δ) over m queries per record, and the δ they certify."""

    epsilon: float
    delta: float
    m: int
    sigma: float
    gap: float
    tau: float
    delta_certified: float
    two_sided: bool = False

    def mechanism(self, gate: float = 0.0, unit: int = 1) -> SparseThreshold:
        """The calibrated mechanism with deterministic gate ``gate`` (τ = gate + 1 + Δ).

        Theorem 6's δ depends on Δ/σ and on the gate being exactly τ − Δ − 1,
        not on where the gate sits, so any gate ≥ 0 keeps the calibration. ``unit``
        u: answer counts of units of at most u records on the scale q/u
        (:class:`SparseThreshold`); ``m`` must then count a unit's queries.
        """
        if not (math.isfinite(gate) and gate >= 0):
            raise ValueError(f"gate must be a finite count >= 0; got {gate!r}")
        return SparseThreshold(
            sigma=self.sigma, gap=self.gap, gate=gate, two_sided=self.two_sided, unit=unit
        )


def _delta_of(two_sided: bool):
    return two_sided_delta if two_sided else theorem6_delta


def _smallest_gap(eps: float, dlt: float, m: int, sigma: float, two_sided: bool) -> float:
    """Smallest Δ with δ(ε; σ, Δ) ≤ δ, or inf if no Δ gives it at this σ."""
    f = _delta_of(two_sided)

    def excess(log_gap: float) -> float:
        return f(epsilon=eps, sigma=sigma, gap=math.exp(log_gap), m=m) - dlt

    hi = math.log(sigma) + 4.0
    while excess(hi) > 0:
        hi += 1.0
        if hi > math.log(sigma) + 12.0:
            return math.inf
    lo = math.log(sigma) - 4.0
    if excess(lo) <= 0:
        return math.exp(lo)
    root = optimize.brentq(excess, lo, hi, xtol=1e-12)
    gap = math.exp(root)
    # Never overshoot: nudge up until the exact δ is at most the target.
    while f(epsilon=eps, sigma=sigma, gap=gap, m=m) > dlt:
        gap *= 1.0 + 1e-9
    return gap


def calibrate_sparse_threshold(
    *, epsilon: float, delta: float, m: int, two_sided: bool = False
) -> SparseThresholdCalibration:
    """Parameters with the smallest τ = 1 + Δ whose exact δ is at most ``delta``.

    σ cannot go below σ_min, where the pure Gaussian term G(ε, m) alone
    reaches δ; above it τ grows with σ (measured: +10 % σ, +10 % τ), so the
    search scans σ ∈ σ_min·[1, 2] and keeps the best. Every candidate is
    verified with the full Theorem 6 expression.
    """
    eps = check_positive("epsilon", epsilon)
    dlt = check_open_unit("delta", delta)
    m = check_count("m", m)
    return _calibrate(eps, dlt, m, bool(two_sided))


@functools.lru_cache(maxsize=256)
def _calibrate(eps: float, dlt: float, m: int, two_sided: bool) -> SparseThresholdCalibration:
    # Memoised: a pure function of its inputs that costs ≈ 17 ms, paid by every
    # Lumberjack fit (the empirical audits fit thousands of tiny forests).

    def gauss(log_sigma: float) -> float:
        s = math.exp(log_sigma)
        return float(_gaussian_curve(np.array(eps), np.array(float(m)), s)) - dlt

    lo, hi = math.log(1e-3), math.log(1e7)
    sigma_min = math.exp(optimize.brentq(gauss, lo, hi, xtol=1e-13))
    best = None
    for factor in 1.0 + np.array([1e-6, 1e-4, 1e-3, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]):
        sigma = sigma_min * float(factor)
        gap = _smallest_gap(eps, dlt, m, sigma, two_sided)
        if best is None or gap < best[1]:
            best = (sigma, gap)
    sigma, gap = best
    certified = _delta_of(two_sided)(epsilon=eps, sigma=sigma, gap=gap, m=m)
    if not certified <= dlt:
        raise AssertionError(f"calibration overshoots: δ {certified} > {dlt}")
    return SparseThresholdCalibration(
        epsilon=eps,
        delta=dlt,
        m=m,
        sigma=sigma,
        gap=gap,
        tau=1.0 + gap,
        delta_certified=certified,
        two_sided=two_sided,
    )


def zcdp_delta(*, rho: float, epsilon: float) -> float:
    """δ of a ρ-zCDP mechanism at ε ≥ ρ (Lumberjack Lemma 9, after Bun & Steinke 2016).

    δ = 2 e^{−(ε−ρ)²/(4ρ)} / (1 + (ε−ρ)/(2ρ) + √((1 + (ε−ρ)/(2ρ))² + 4/(πρ))).
    """
    r, e = check_positive("rho", rho), check_positive("epsilon", epsilon)
    if e < r:
        raise ValueError(f"epsilon must be at least rho = {r}; got {e}")
    x = (e - r) / (2.0 * r)
    return (
        2.0
        * math.exp(-((e - r) ** 2) / (4.0 * r))
        / (1.0 + x + math.sqrt((1.0 + x) ** 2 + 4.0 / (math.pi * r)))
    )


def largest_rho(*, epsilon: float, delta: float) -> float:
    """Largest ρ whose Lemma 9 conversion gives (ε, δ)-DP (bisection; δ grows with ρ)."""
    return _largest_rho(check_positive("epsilon", epsilon), check_open_unit("delta", delta))


@functools.lru_cache(maxsize=256)
def _largest_rho(e: float, d: float) -> float:
    # Memoised: 200 bisection steps, paid by every Lumberjack fit.
    lo, hi = 1e-12 * e, e
    if zcdp_delta(rho=lo, epsilon=e) > d:
        raise ValueError(f"no ρ > 0 reaches (ε={e}, δ={d})")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_delta(rho=mid, epsilon=e) <= d:
            lo = mid
        else:
            hi = mid
    return lo
