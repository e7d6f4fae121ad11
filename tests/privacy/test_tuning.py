"""Private hyper-parameter tuning: the RDP transforms, the law of K, calibration and the ledger."""

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy import stats

from fedpriv.privacy import PrivacyBudget, PrivacyBudgetExceededError, PrivacyLedger, accounting
from fedpriv.privacy.calibration import analytic_gaussian_noise_multiplier, gaussian_delta
from fedpriv.privacy.events import TunedSelectionDpEvent, event_from_dict, event_to_dict
from fedpriv.privacy.tuning import (
    ORDERS,
    RunsDistribution,
    poisson_rdp,
    tnb_expected_runs,
    tnb_pmf,
    tnb_rdp,
)
from fedpriv.privacy.tuning_calibration import (
    TuningBudgetError,
    calibrate_base_epsilon,
    selection_epsilon,
)
from tests.keys import private_rng

DELTA = 1e-5


def _sgd_curve(z: float = 1.0, q: float = 0.05, steps: int = 200) -> np.ndarray:
    sampled = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))
    return accounting.rdp_curve(dp_event.SelfComposedDpEvent(sampled, steps))


def _gaussian(eps: float) -> list[dp_event.DpEvent]:
    return [dp_event.GaussianDpEvent(analytic_gaussian_noise_multiplier(epsilon=eps, delta=DELTA))]


@pytest.mark.parametrize(
    "dist",
    [
        RunsDistribution.tnb(eta=1.0, gamma=0.1),
        RunsDistribution.tnb(eta=0.0, gamma=0.05),
        RunsDistribution.tnb(eta=-0.5, gamma=0.3),
        RunsDistribution.poisson(mean=8.0),
    ],
    ids=lambda d: d.describe(),
)
def test_the_tuned_curve_lies_above_the_base_curve(dist):
    base = _sgd_curve()
    tuned = dist.rdp(base)
    assert np.all(tuned >= base - 1e-12)
    # and so does its ε: tuning costs something whenever E[K] > 1.
    from fedpriv.privacy.tuning import epsilon_from_rdp

    assert epsilon_from_rdp(ORDERS, tuned, DELTA) > epsilon_from_rdp(ORDERS, base, DELTA) + 0.05


def test_tnb_reduces_to_one_run_as_gamma_tends_to_one():
    base = _sgd_curve()
    assert tnb_expected_runs(1.0, 1.0 - 1e-9) == pytest.approx(1.0, abs=1e-6)
    assert tnb_expected_runs(0.0, 1.0 - 1e-9) == pytest.approx(1.0, abs=1e-6)
    tuned = tnb_rdp(ORDERS, base, 1.0, 1.0 - 1e-9)
    np.testing.assert_allclose(tuned, base, atol=1e-6)
    # The overhead grows as γ falls (more runs).
    assert np.all(tnb_rdp(ORDERS, base, 1.0, 0.05) > tnb_rdp(ORDERS, base, 1.0, 0.2))


@pytest.mark.parametrize("eta", [-0.5, 0.0, 0.5, 1.0, 3.0])
def test_tnb_pmf_sums_to_one_with_the_stated_mean(eta):
    k = np.arange(1, 40_000)
    p = tnb_pmf(k, eta, 0.1)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert (k * p).sum() == pytest.approx(tnb_expected_runs(eta, 0.1), rel=1e-9)


def test_eta_one_is_geometric_and_eta_zero_logarithmic():
    k = np.arange(1, 30)
    np.testing.assert_allclose(tnb_pmf(k, 1.0, 0.2), 0.2 * 0.8 ** (k - 1), rtol=1e-12)
    np.testing.assert_allclose(tnb_pmf(k, 0.0, 0.2), stats.logser.pmf(k, 0.8), rtol=1e-12)
    assert tnb_expected_runs(1.0, 0.2) == pytest.approx(5.0, rel=1e-12)
    assert RunsDistribution.tnb(eta=0.5, mean=7.0).expected_runs == pytest.approx(7.0, rel=1e-9)


def _chi_square_p(draws: np.ndarray, pmf, top: int) -> float:
    """p-value of draws against pmf on bins lo..top−1 and a top tail bin (k ≥ top)."""
    lo = 0 if (draws == 0).any() or pmf(np.array([0]))[0] > 0 else 1
    ks = np.arange(lo, top)
    expected = np.append(pmf(ks), 1.0 - pmf(ks).sum()) * draws.size
    observed = np.append([(draws == k).sum() for k in ks], (draws >= top).sum())
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize(
    ("dist", "wrong", "top"),
    [
        (
            RunsDistribution.tnb(eta=0.5, gamma=0.2),
            RunsDistribution.tnb(eta=0.5, gamma=0.24),
            12,
        ),
        (RunsDistribution.poisson(mean=5.0), RunsDistribution.poisson(mean=5.4), 12),
    ],
    ids=["tnb", "poisson"],
)
def test_the_sampler_draws_the_stated_law(dist, wrong, top):
    rng = private_rng(7)
    draws = np.array([dist.sample(rng) for _ in range(6000)])
    # Fixed injected key: a deterministic sample; the right law passes ...
    assert _chi_square_p(draws, dist.pmf, top) > 1e-3
    # ... and the test has the power to reject a nearby wrong one (E[K] off by 10-20 %).
    assert _chi_square_p(draws, wrong.pmf, top) < 1e-6


def test_the_sampler_refuses_a_seeded_generator():
    with pytest.raises(TypeError, match="private generator"):
        RunsDistribution.tnb(eta=1.0, gamma=0.2).sample(np.random.default_rng(0))


def test_tnb_matches_the_closed_form_for_a_gaussian_base():
    # Gaussian base ε(λ) = cλ: min over real λ̂ ≥ 1 of c(λ̂ − 1) + L/λ̂ is 2√(cL) − c at
    # λ̂ = √(L/c). The transform on the discrete orders is never below that, and close.
    sigma, eta, gamma = 4.0, 1.0, 0.1
    c, big_l = 1.0 / (2 * sigma**2), math.log(1 / gamma)
    assert math.sqrt(big_l / c) > 1.0
    exact = (
        c * ORDERS
        + (1 + eta) * (2 * math.sqrt(c * big_l) - c)
        + math.log(tnb_expected_runs(eta, gamma)) / (ORDERS - 1)
    )
    got = tnb_rdp(ORDERS, c * ORDERS, eta, gamma)
    assert np.all(got >= exact - 1e-12)
    np.testing.assert_allclose(got, exact, rtol=0.01)


def test_poisson_matches_a_direct_evaluation_of_theorem_6():
    sigma, mu = 3.0, 6.0
    base = ORDERS / (2 * sigma**2)
    got = poisson_rdp(ORDERS, base, mu, base_delta=lambda e: gaussian_delta(e, sigma))
    for i in (5, 40, 100):
        lam = ORDERS[i]
        eps_hat = math.log(1 + 1 / (lam - 1))
        want = lam / (2 * sigma**2) + mu * gaussian_delta(eps_hat, sigma) + math.log(mu) / (lam - 1)
        assert got[i] == pytest.approx(want, rel=1e-12)
    # The default δ̂ (RDP conversion) is sound, hence never tighter than the exact one.
    assert np.all(poisson_rdp(ORDERS, base, mu) >= got - 1e-12)


@pytest.mark.parametrize(
    "dist", [RunsDistribution.tnb(eta=1.0, mean=5.0), RunsDistribution.poisson(mean=5.0)]
)
def test_calibration_never_overshoots_and_is_tight(dist):
    cal = calibrate_base_epsilon(
        target_epsilon=2.0, target_delta=DELTA, candidates=_gaussian, distribution=dist, rtol=0.02
    )
    assert 0.98 * 2.0 <= cal.epsilon <= 2.0
    assert selection_epsilon(cal.event, DELTA) == pytest.approx(cal.epsilon, rel=1e-12)
    assert 0.1 < cal.base_epsilon < 2.0
    assert cal.steps <= 8
    # A per-run budget 5 % larger overshoots: the answer is close to the best.
    from fedpriv.privacy.tuning_calibration import selection_event

    over = selection_event(_gaussian(cal.base_epsilon * 1.05), dist)
    assert selection_epsilon(over, DELTA) > 2.0


def test_the_base_run_is_the_worst_candidate():
    dist = RunsDistribution.tnb(eta=1.0, gamma=0.2)

    def two(eps):  # a cheap and an expensive configuration
        return [*_gaussian(eps), *_gaussian(eps / 4)]

    one = calibrate_base_epsilon(
        target_epsilon=2.0, target_delta=DELTA, candidates=_gaussian, distribution=dist
    )
    both = calibrate_base_epsilon(
        target_epsilon=2.0, target_delta=DELTA, candidates=two, distribution=dist
    )
    assert both.base_epsilon == pytest.approx(one.base_epsilon, rel=0.03)
    assert len(both.event.candidates) == 2


def test_an_unreachable_target_is_refused():
    fixed = dp_event.GaussianDpEvent(1.0)  # a fixed per-run cost (say, a barely noisy score)

    with pytest.raises(TuningBudgetError, match=r"target_epsilon=0\.5"):
        calibrate_base_epsilon(
            target_epsilon=0.5,
            target_delta=DELTA,
            candidates=lambda e: [dp_event.ComposedDpEvent([*_gaussian(e), fixed])],
            distribution=RunsDistribution.tnb(eta=1.0, mean=10.0),
        )


def test_the_ledger_charges_the_selection_and_refuses_an_overspend():
    dist = RunsDistribution.tnb(eta=1.0, mean=5.0)
    cal = calibrate_base_epsilon(
        target_epsilon=2.0, target_delta=DELTA, candidates=_gaussian, distribution=dist
    )
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=DELTA))
    ledger.spend(cal.event, label="private tuning")
    report = ledger.report()
    assert report.accounting.binding == "rdp"
    assert report.accounting.pld_method == "pld+rdp"
    assert report.epsilon == pytest.approx(cal.epsilon, rel=1e-12)
    assert report.epsilon <= 2.0
    data = json.loads(report.to_json())
    assert data["binding_accountant"] == "rdp"
    assert event_from_dict(data["events"][0]["event"]) == cal.event
    # A second selection does not fit: refused before anything is recorded.
    with pytest.raises(PrivacyBudgetExceededError, match="over the budget"):
        ledger.spend(cal.event, label="again")
    assert len(ledger.entries) == 1


def test_the_event_round_trips_and_its_curve_is_the_transform():
    dist = RunsDistribution.tnb(eta=0.5, gamma=0.2)
    composed = dp_event.ComposedDpEvent([*_gaussian(1.0), dp_event.GaussianDpEvent(20.0)])
    cands = (*_gaussian(0.5), composed)
    event = TunedSelectionDpEvent(candidates=cands, distribution="tnb", eta=0.5, gamma=0.2)
    assert event_from_dict(event_to_dict(event)) == event
    base = np.maximum(accounting.rdp_curve(cands[0]), accounting.rdp_curve(cands[1]))
    np.testing.assert_allclose(accounting.rdp_curve(event), dist.rdp(base), rtol=1e-12)
