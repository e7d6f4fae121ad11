"""The run ledger: order, budget refusal before release, reservations, JSON."""

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event

from fedpriv.privacy import (
    ExponentialMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    PermuteAndFlip,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
    calibrate_gaussian_noise_multiplier,
    event_from_dict,
    subsampled_gaussian_event,
)
from fedpriv.privacy import accounting as accounting_mod
from tests.keys import private_rng


def _ledger(eps=1.0, delta=1e-5):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=delta))


def test_records_every_release_in_order_and_reports_both_accountants():
    ledger = _ledger(eps=5.0)
    rng = private_rng(0)
    gauss = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=4.0)
    ledger.release(gauss, np.zeros(3), rng=rng, sampling_probability=0.1, label="grad")
    ledger.release(LaplaceMechanism(l1_sensitivity=1.0, epsilon=0.5), [1.0], rng=rng, label="count")
    ledger.release(ExponentialMechanism(epsilon=0.3), [0.0, 1.0], rng=rng, label="split")
    ledger.release(PermuteAndFlip(epsilon=0.2), [0.0, 1.0], rng=rng, label="leaf")
    report = ledger.report()
    assert [e.label for e in report.entries] == ["grad", "count", "split", "leaf"]
    assert report.entries[0].event == dp_event.PoissonSampledDpEvent(
        0.1, dp_event.GaussianDpEvent(4.0)
    )
    acc = report.accounting
    assert acc.epsilon == min(acc.epsilon_pld, acc.epsilon_rdp)
    # Pure-DP pieces alone cost 0.5 + 0.3 + 0.2 under basic composition; the
    # certified figure is never worse than that plus the Gaussian's.
    assert 0.5 < acc.epsilon < 1.0 + 1.0
    assert ledger.epsilon() == acc.epsilon


def test_report_serialises_to_json_and_events_round_trip():
    ledger = _ledger(eps=3.0)
    rng = private_rng(1)
    ledger.release(GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=3.0), [0.0], rng=rng)
    ledger.release(ExponentialMechanism(epsilon=0.5, monotone=True), [0.0, 2.0], rng=rng)
    ledger.spend(dp_event.ZCDpEvent(rho=0.01), label="zcdp")
    data = json.loads(ledger.report().to_json())
    assert data["n_releases"] == 3
    assert data["pld_method"] == "pld+rdp"
    assert data["binding_accountant"] in {"pld", "rdp"}
    assert data["epsilon"] == pytest.approx(ledger.epsilon())
    assert data["budget"] == {"epsilon": 3.0, "delta": 1e-5}
    events = [event_from_dict(e["event"]) for e in data["events"]]
    assert events == [e.event for e in ledger.entries]


def test_refuses_before_drawing_noise_and_records_nothing():
    ledger = _ledger(eps=1.0)
    rng = private_rng(2)
    loud = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=0.5)  # ε ≫ 1 at δ = 1e-5
    with pytest.raises(
        PrivacyBudgetExceededError, match=r"over the budget ε=1; nothing was released"
    ):
        ledger.release(loud, [0.0], rng=rng)
    # No draw was made: the generator continues exactly where a fresh one starts.
    np.testing.assert_array_equal(rng.random(4), private_rng(2).random(4))
    assert ledger.entries == ()
    assert ledger.epsilon() == 0.0


def test_invalid_value_records_nothing():
    ledger = _ledger(eps=10.0)
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=2.0)
    with pytest.raises(ValueError, match="finite"):
        ledger.release(mech, [np.nan], rng=private_rng(0))
    assert ledger.entries == ()


def test_calibrated_plan_fits_exactly_and_one_more_release_is_refused():
    eps, delta, q, steps = 1.0, 1e-5, 0.05, 40
    cal = calibrate_gaussian_noise_multiplier(
        target_epsilon=eps, target_delta=delta, sampling_probability=q, steps=steps
    )
    ledger = _ledger(eps=eps, delta=delta)
    mech = GaussianMechanism(l2_sensitivity=2.0, noise_multiplier=cal.noise_multiplier)
    rng = private_rng(3)
    ledger.reserve(
        mech.dp_event if q == 1 else dp_event.PoissonSampledDpEvent(q, mech.dp_event), steps
    )
    for t in range(steps):
        ledger.release(mech, np.zeros(2), rng=rng, sampling_probability=q, label=f"round {t}")
    assert ledger.epsilon() == pytest.approx(cal.epsilon, rel=1e-12)
    assert ledger.epsilon() <= eps
    with pytest.raises(PrivacyBudgetExceededError):
        ledger.release(mech, np.zeros(2), rng=rng, sampling_probability=q)
    assert len(ledger.entries) == steps


def test_reserved_releases_skip_re_accounting(monkeypatch):
    ledger = _ledger(eps=2.0)
    event = dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(2.0))
    ledger.reserve(event, 30)
    calls = []
    real = accounting_mod.account
    monkeypatch.setattr(accounting_mod, "account", lambda *a, **k: calls.append(1) or real(*a, **k))
    for _ in range(30):
        ledger.spend(event)
    assert calls == []
    ledger.spend(event)  # past the reservation: accounted again
    assert len(calls) == 1


def test_reservation_over_budget_raises_and_reserves_nothing():
    ledger = _ledger(eps=1.0)
    with pytest.raises(PrivacyBudgetExceededError, match="reserving 1000"):
        ledger.reserve(subsampled_gaussian_event(1.0, sampling_probability=0.1, steps=1), 1000)
    assert ledger.report().reserved == ()


def test_non_private_events_need_an_infinite_budget():
    with pytest.raises(PrivacyBudgetExceededError):
        _ledger(eps=8.0).spend(dp_event.NonPrivateDpEvent())
    open_ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=math.inf, delta=1e-5))
    open_ledger.spend(dp_event.NonPrivateDpEvent(), label="non-private baseline")
    assert open_ledger.epsilon() == math.inf
    assert json.loads(open_ledger.report().to_json())["epsilon"] == "inf"


def test_rejects_non_events_and_coarse_discretisation():
    with pytest.raises(TypeError, match="DpEvent"):
        _ledger().spend("gaussian")
    with pytest.raises(ValueError, match=r"discretization must lie in \(0, 1e-2\]; got 0.1"):
        PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5), discretization=0.1)


def test_progress_bound_is_an_upper_bound_on_the_certified_epsilon():
    ledger = _ledger(eps=3.0)
    event = dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.2))
    assert ledger.epsilon_upper_bound() == 0.0
    ledger.reserve(event, 40)
    for _ in range(40):
        ledger.spend(event)
    certified = ledger.epsilon()
    assert certified <= ledger.epsilon_upper_bound() <= certified * 1.05
