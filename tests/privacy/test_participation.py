"""Participation accounting: the tight mixture PLD is ρ·δ_q(ε), the three modes order.

The tight PLD is checked against figures computed without it: a direct
numerical integral of the hockey-stick divergence (one round) and the
binomial expansion over dp-accounting's own subsampled-Gaussian PLDs
(T rounds: k of T rounds touch the record, k ~ Binomial(T, ρ)).
"""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from fedpriv.privacy import (
    EffectiveRateDpEvent,
    GaussianMechanism,
    ParticipationAccounting,
    ParticipationDpEvent,
    PrivacyBudget,
    PrivacyLedger,
    account,
    calibrate_participation_noise_multiplier,
    event_from_dict,
    event_to_dict,
)
from fedpriv.privacy.accounting import _rdp_curve
from fedpriv.privacy.participation import participation_event, plan_event
from fedpriv.privacy.pld import composed_pld, flatten, leaf_pld
from tests.keys import private_rng

DELTA = 1e-5


def _sampled(z, q):
    return dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))


def _hockey_stick(z, q, eps):
    """max over remove/add of H_ε between (1−q)N(0,z²)+qN(1,z²) and N(0,z²), by quadrature."""
    c = 1.0 / (z * math.sqrt(2 * math.pi))
    base = lambda x: c * math.exp(-0.5 * (x / z) ** 2)  # noqa: E731
    mix = lambda x: (1 - q) * base(x) + q * base(x - 1)  # noqa: E731
    e = math.exp(eps)
    opts = {"points": [0.5], "limit": 500, "epsabs": 1e-15}
    remove = integrate.quad(lambda x: max(mix(x) - e * base(x), 0.0), -40, 40, **opts)[0]
    add = integrate.quad(lambda x: max(base(x) - e * mix(x), 0.0), -40, 40, **opts)[0]
    return max(remove, add)


@pytest.mark.parametrize(("z", "q", "rho"), [(0.8, 0.2, 0.3), (1.5, 1.0, 0.5), (0.6, 0.05, 0.25)])
def test_one_round_profile_is_rho_times_the_subsampled_profile(z, q, rho):
    event = participation_event(
        dp_event.GaussianDpEvent(z), sampling_probability=q, participation=rho, accounting="tight"
    )
    ours = leaf_pld(event, 1e-4)
    library = pld_lib.from_gaussian_mechanism(
        z, sampling_prob=q, value_discretization_interval=1e-4
    )
    for eps in (0.05, 0.2, 0.5, 1.0, 2.0):
        exact = rho * _hockey_stick(z, q, eps)
        got = ours.get_delta_for_epsilon(eps)
        # Connect-the-dots is near exact at one round; the quadrature is good to ~1e-9.
        assert got == pytest.approx(exact, rel=1e-6, abs=1e-13)
        assert got == pytest.approx(rho * library.get_delta_for_epsilon(eps), rel=1e-9, abs=1e-15)


def test_composed_profile_is_the_binomial_mixture_of_library_compositions():
    z, q, rho, rounds, vdi = 0.8, 0.2, 0.3, 6, 1e-3
    ours = composed_pld([(ParticipationDpEvent(rho, _sampled(z, q)), rounds)], vdi)
    upper = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=vdi)
    lower = pld_lib.from_gaussian_mechanism(
        z,
        sampling_prob=q,
        value_discretization_interval=vdi,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    weights = stats.binom.pmf(np.arange(rounds + 1), rounds, rho)
    uppers = [None, *(upper.self_compose(k) for k in range(1, rounds + 1))]
    lowers = [None, *(lower.self_compose(k) for k in range(1, rounds + 1))]
    for eps in (0.5, 1.0, 2.0, 3.0):
        hi = sum(weights[k] * uppers[k].get_delta_for_epsilon(eps) for k in range(1, rounds + 1))
        lo = sum(weights[k] * lowers[k].get_delta_for_epsilon(eps) for k in range(1, rounds + 1))
        got = ours.get_delta_for_epsilon(eps)
        # Pessimistic (never below the optimistic bracket) and equal to the pessimistic expansion.
        assert lo <= got
        assert got == pytest.approx(hi, rel=1e-9, abs=1e-15)
        assert got <= lo * (1 + 5e-3)  # measured gap 3e-4 at 1e-3 discretisation


def test_rdp_curve_is_the_mixture_of_the_gaussian_curve():
    orders = np.array([1.5, 2.0, 4.0, 16.0, 64.0])
    z, rho = 1.3, 0.25
    got = _rdp_curve(ParticipationDpEvent(rho, dp_event.GaussianDpEvent(z)), orders)
    gauss = orders / (2 * z * z)  # RDP of the Gaussian (Mironov 2017, Prop. 7)
    # log(1 − ρ + ρ e^x)/(α−1) with x = (α−1)R, written as x + log(ρ + (1−ρ)e^{−x}).
    x = (orders - 1) * gauss
    expected = (x + np.log(rho + (1 - rho) * np.exp(-x))) / (orders - 1)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.all(got < gauss)


def test_accountants_agree_on_a_tight_plan():
    event = plan_event(
        1.0, sampling_probability=0.05, participation=0.5, steps=50, accounting="tight"
    )
    acc = account(flatten(event), DELTA)
    valid = account(
        flatten(plan_event(1.0, sampling_probability=0.05, participation=0.5, steps=50)), DELTA
    )
    assert acc.certified and acc.binding == "pld"
    # Both sound; RDP is the looser one, the PLD is within discretisation of exact.
    assert acc.epsilon_pld <= acc.epsilon_rdp <= acc.epsilon_pld * 1.5
    assert acc.epsilon_pld < valid.epsilon_pld and acc.epsilon_rdp < valid.epsilon_rdp


def test_at_full_participation_all_three_are_the_valid_event():
    g = dp_event.GaussianDpEvent(1.0)
    events = {
        m: participation_event(g, sampling_probability=0.1, participation=1.0, accounting=m)
        for m in ParticipationAccounting
    }
    assert set(events.values()) == {_sampled(1.0, 0.1)}
    assert participation_event(g, sampling_probability=1.0, participation=0.5) == g


def test_paper_events_are_accounted_at_rho_q_but_not_certified():
    paper = participation_event(
        dp_event.GaussianDpEvent(0.9),
        sampling_probability=0.05,
        participation=0.5,
        accounting="paper",
    )
    assert isinstance(paper, EffectiveRateDpEvent)
    acc = account(flatten(dp_event.SelfComposedDpEvent(paper, 20)), DELTA)
    claim = account(flatten(dp_event.SelfComposedDpEvent(_sampled(0.9, 0.025), 20)), DELTA)
    assert acc.epsilon == claim.epsilon and acc.epsilon_rdp == claim.epsilon_rdp
    assert not acc.certified and claim.certified


def test_ledger_records_and_reports_each_mode():
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0)
    rng = private_rng(0)
    reports = {}
    for mode in ParticipationAccounting:
        event = participation_event(
            mech.dp_event, sampling_probability=0.05, participation=0.25, accounting=mode
        )
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=5.0, delta=DELTA))
        ledger.reserve(event, 3)
        for _ in range(3):
            ledger.release(mech, [0.0], rng=rng, sampling_probability=0.05, event=event)
        reports[mode] = ledger.report()
        assert event_from_dict(event_to_dict(event)) == event
        assert [e.event for e in ledger.entries] == [event] * 3
    assert reports["valid"].certified and reports["tight"].certified
    assert not reports["paper"].certified
    paper = reports["paper"].to_dict()
    assert paper["certified"] is False and "NOT a valid guarantee" in paper["caveat"]
    assert reports["valid"].to_dict()["caveat"] == ""
    assert reports["paper"].epsilon < reports["tight"].epsilon < reports["valid"].epsilon


def test_ledger_refuses_an_event_that_does_not_wrap_the_mechanism():
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0)
    other = ParticipationDpEvent(0.5, _sampled(2.0, 0.1))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=5.0, delta=DELTA))
    with pytest.raises(ValueError, match="does not wrap the mechanism's own"):
        ledger.release(mech, [0.0], rng=private_rng(0), event=other)
    assert ledger.entries == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"accounting": "effective"}, r"must be one of \['valid', 'tight', 'paper'\]; got 'eff"),
        ({"participation": 0.0}, r"participation must lie in \(0, 1\]; got 0.0"),
        ({"sampling_probability": 1.5}, r"sampling_probability must lie in \(0, 1\]; got 1.5"),
    ],
)
def test_invalid_inputs_name_the_value_and_the_allowed_range(kwargs, message):
    args = {"sampling_probability": 0.1, "participation": 0.5, "accounting": "tight", **kwargs}
    with pytest.raises(ValueError, match=message):
        participation_event(dp_event.GaussianDpEvent(1.0), **args)
    with pytest.raises(ValueError, match=message):
        calibrate_participation_noise_multiplier(
            target_epsilon=1.0, target_delta=DELTA, steps=5, **args
        )


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    eps=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    q=st.sampled_from([0.02, 0.1, 0.5, 1.0]),
    rho=st.sampled_from([0.1, 0.25, 0.5, 0.9, 1.0]),
    steps=st.integers(1, 20),
)
def test_paper_z_le_tight_z_le_valid_z_and_none_overshoots(eps, q, rho, steps):
    z = {}
    for mode in ParticipationAccounting:
        cal = calibrate_participation_noise_multiplier(
            target_epsilon=eps,
            target_delta=DELTA,
            sampling_probability=q,
            participation=rho,
            steps=steps,
            accounting=mode,
        )
        z[mode] = cal.noise_multiplier
        plan = plan_event(
            z[mode], sampling_probability=q, participation=rho, steps=steps, accounting=mode
        )
        assert account(flatten(plan), DELTA).epsilon <= eps  # never above the target
    assert z["paper"] <= z["tight"] <= z["valid"]
    if rho == 1.0:
        assert z["paper"] == z["tight"] == z["valid"]
    else:
        assert z["paper"] < z["tight"] < z["valid"]


def test_the_paper_z_spends_more_than_claimed_under_a_valid_accounting():
    kw = {"sampling_probability": 0.05, "participation": 0.25, "steps": 50}
    z_paper = calibrate_participation_noise_multiplier(
        target_epsilon=2.0, target_delta=DELTA, accounting="paper", **kw
    ).noise_multiplier
    true_eps = account(flatten(plan_event(z_paper, accounting="tight", **kw)), DELTA).epsilon
    assert true_eps > 2.0 * 1.5  # measured 3.67 (the tight, valid figure) for a claimed 2
