"""Accounting against independent computations and published values.

* Balle & Wang (2018): the analytic Gaussian mechanism, exact δ(ε).
* T-fold Gaussian = one Gaussian with z/√T (Dong, Roth & Su 2022, Cor. 2).
* Poisson-subsampled Gaussian, T = 1: δ(ε) by direct quadrature of the
  hockey-stick divergence, both directions.
* Poisson-subsampled Gaussian, T > 1: an independent FFT composition of a
  bucketed privacy-loss distribution (pessimistic and optimistic rounding)
  brackets the PLD figure; an independent integer-order RDP (Mironov, Talwar &
  Zhang 2019, §3.3) bounds the RDP figure.
* PLD ≤ RDP on the same events.
"""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy import integrate, optimize, special, stats

from fedpriv.privacy import (
    BoundedRangeDpEvent,
    PureDpEvent,
    account,
    gaussian_delta,
    pld_epsilon,
    rdp_epsilon,
    subsampled_gaussian_event,
)
from fedpriv.privacy.pld import flatten


def _analytic_epsilon(z: float, delta: float) -> float:
    return optimize.brentq(lambda e: gaussian_delta(e, z) - delta, 0.0, 100.0, xtol=1e-12)


@pytest.mark.parametrize(("z", "delta"), [(1.0, 1e-5), (3.7306, 1e-5), (0.8, 1e-3), (5.0, 1e-7)])
def test_single_gaussian_matches_analytic(z, delta):
    exact = _analytic_epsilon(z, delta)
    eps, method = pld_epsilon(flatten(dp_event.GaussianDpEvent(z)), delta)
    assert method == "pld"
    assert exact <= eps <= exact + 2e-4


def test_balle_wang_reference_point():
    # Balle & Wang 2018, §5: σ = 3.73 gives (1, 1e-5)-DP for Δ = 1.
    assert _analytic_epsilon(3.7306, 1e-5) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(("z", "steps"), [(2.0, 10), (5.0, 100), (10.0, 400)])
def test_composed_gaussian_is_gaussian(z, steps):
    exact = _analytic_epsilon(z / math.sqrt(steps), 1e-5)
    event = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), steps)
    eps, _ = pld_epsilon(flatten(event), 1e-5)
    assert exact <= eps <= exact * (1 + 2e-3) + 1e-4


def _subsampled_delta_direct(eps: float, z: float, q: float) -> float:
    """max over both directions of ∫ (P − e^ε Q)_+ for P = (1−q)N(0)+qN(1), Q = N(0).

    The loss ratio is monotone in x, so each integrand is positive on one side
    of the point where P = e^ε Q; integrating only there avoids the kink.
    """
    mix = lambda x: (1 - q) * stats.norm.pdf(x, 0, z) + q * stats.norm.pdf(x, 1, z)  # noqa: E731
    base = lambda x: stats.norm.pdf(x, 0, z)  # noqa: E731
    opts = {"epsabs": 0.0, "epsrel": 1e-11, "limit": 400}
    # remove: mix > e^ε base for x > x_r
    x_r = 0.5 + z * z * math.log((math.exp(eps) - (1 - q)) / q)
    remove, _ = integrate.quad(
        lambda x: mix(x) - math.exp(eps) * base(x), x_r, x_r + 40 * z, **opts
    )
    # add: base > e^ε mix for x < x_a (only possible when e^{-ε} > 1 − q)
    add = 0.0
    if math.exp(-eps) > 1 - q:
        x_a = 0.5 + z * z * math.log((math.exp(-eps) - (1 - q)) / q)
        add, _ = integrate.quad(
            lambda x: base(x) - math.exp(eps) * mix(x), x_a - 40 * z, x_a, **opts
        )
    return max(remove, add)


@pytest.mark.parametrize(
    ("z", "q", "delta"), [(0.8, 0.1, 1e-5), (1.5, 0.3, 1e-6), (0.5, 0.02, 1e-5)]
)
def test_single_subsampled_gaussian_matches_quadrature(z, q, delta):
    exact = optimize.brentq(
        lambda e: _subsampled_delta_direct(e, z, q) - delta, 1e-6, 30, xtol=1e-9
    )
    eps, _ = pld_epsilon(
        flatten(subsampled_gaussian_event(z, sampling_probability=q, steps=1)), delta
    )
    assert exact <= eps + 1e-6
    assert eps <= exact + 5e-4


def _independent_pld_epsilon(z, q, steps, delta, pessimistic):
    """ε from an FFT composition of a bucketed privacy-loss distribution.

    Buckets the loss L(x) = log(1 − q + q e^{(x − 1/2)/z²}) of x ~ P (remove)
    and −L of x ~ N(0, z²) (add) by rounding up (pessimistic) or down.
    """
    grid = 5e-3 / steps  # the bracket's width is about steps · grid
    xs = np.linspace(-9 * z, 9 * z + 1, 400_001)
    mids = 0.5 * (xs[1:] + xs[:-1])
    loss = np.logaddexp(math.log1p(-q), math.log(q) + (mids - 0.5) / z**2)
    p_mix = (1 - q) * np.diff(stats.norm.cdf(xs, 0, z)) + q * np.diff(stats.norm.cdf(xs, 1, z))
    p_base = np.diff(stats.norm.cdf(xs, 0, z))
    best = 0.0
    for losses, probs in ((loss, p_mix), (-loss, p_base)):
        r = np.ceil if pessimistic else np.floor
        idx = r(losses / grid).astype(np.int64)
        lo = idx.min()
        pmf = np.bincount(idx - lo, weights=probs)
        size = 1 << int(np.ceil(np.log2(steps * pmf.size)))
        comp = np.fft.irfft(np.fft.rfft(pmf, size) ** steps, size)[: steps * (pmf.size - 1) + 1]
        comp = np.clip(comp, 0, None)
        vals = (np.arange(comp.size) + steps * lo) * grid

        def delta_at(e, comp=comp, vals=vals):
            m = vals > e
            return float(np.sum(comp[m] * -np.expm1(e - vals[m])))

        if delta_at(0.0) <= delta:
            continue
        best = max(best, optimize.brentq(lambda e, f=delta_at: f(e) - delta, 0.0, vals.max()))
    return best


@pytest.mark.parametrize(("z", "q", "steps"), [(1.0, 0.05, 50), (0.8, 0.1, 20), (2.0, 0.02, 100)])
def test_composed_subsampled_gaussian_bracketed_by_independent_fft(z, q, steps):
    eps, _ = pld_epsilon(
        flatten(subsampled_gaussian_event(z, sampling_probability=q, steps=steps)), 1e-5
    )
    upper = _independent_pld_epsilon(z, q, steps, 1e-5, pessimistic=True)
    lower = _independent_pld_epsilon(z, q, steps, 1e-5, pessimistic=False)
    assert lower - 1e-3 <= eps <= upper + 1e-3
    assert upper - lower < 0.02 * eps  # the bracket is informative


def _integer_order_rdp(z, q, alpha):
    # A_α = Σ_k C(α,k)(1−q)^{α−k} q^k exp((k²−k)/(2z²)) (Mironov, Talwar & Zhang 2019, §3.3).
    k = np.arange(alpha + 1)
    log_terms = (
        special.gammaln(alpha + 1)
        - special.gammaln(k + 1)
        - special.gammaln(alpha - k + 1)
        + (alpha - k) * math.log1p(-q)
        + k * math.log(q)
        + (k * k - k) / (2 * z * z)
    )
    return special.logsumexp(log_terms) / (alpha - 1)


def _rdp_to_eps(rdp, alpha, delta):
    # Canonne, Kamath & Steinke 2020 / Balle et al. 2020 conversion (as dp-accounting uses).
    return rdp + math.log1p(-1 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


@pytest.mark.parametrize(("z", "q", "steps"), [(1.0, 0.05, 100), (0.9, 0.01, 1000), (2.0, 0.2, 50)])
def test_rdp_matches_independent_integer_orders(z, q, steps):
    event = subsampled_gaussian_event(z, sampling_probability=q, steps=steps)
    ours = rdp_epsilon(flatten(event), 1e-5)
    independent = min(
        _rdp_to_eps(steps * _integer_order_rdp(z, q, a), a, 1e-5) for a in range(2, 257)
    )
    # dp-accounting also searches fractional orders, so it may only be tighter.
    assert ours <= independent + 1e-9
    assert ours >= 0.95 * independent
    assert pld_epsilon(flatten(event), 1e-5)[0] <= ours


@pytest.mark.parametrize(
    "event",
    [
        subsampled_gaussian_event(1.1, sampling_probability=0.05, steps=75),
        dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 20),
        dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(2.0), dp_event.GaussianDpEvent(4.0)]),
    ],
    ids=["subsampled-gaussian", "laplace", "two-gaussians"],
)
def test_pld_is_tighter_than_rdp(event):
    acc = account(flatten(event), 1e-6)
    assert acc.epsilon_pld <= acc.epsilon_rdp
    assert acc.binding == "pld"
    assert acc.epsilon == acc.epsilon_pld


def test_bounded_range_rdp_is_the_zcdp_bound():
    # 50 ε-BR selections: RDP via 50·ε²/8-zCDP; with ρ-zCDP, ε(δ) ≤ ρ + 2√(ρ log(1/δ)).
    groups = [(BoundedRangeDpEvent(0.1), 50)]
    rho = 50 * 0.1**2 / 8
    acc = account(groups, 1e-6)
    assert acc.epsilon_rdp <= rho + 2 * math.sqrt(rho * math.log(1e6))
    assert acc.epsilon <= 50 * 0.1  # never worse than basic composition
    # Pure-DP selections are charged ε²/2 in RDP: more than BR's ε²/8.
    assert account([(PureDpEvent(0.1), 50)], 1e-6).epsilon_rdp > acc.epsilon_rdp


def test_zcdp_events_are_reported_through_a_labelled_split():
    groups = [
        (dp_event.ZCDpEvent(rho=0.05), 1),
        (dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.0)), 100),
    ]
    acc = account(groups, 1e-5)
    assert acc.pld_method == "pld+rdp"
    pld_only = pld_epsilon(groups[1:], 1e-5)[0]
    assert acc.epsilon_pld > pld_only  # the zCDP release is charged, not dropped
    assert math.isfinite(acc.epsilon_rdp)
