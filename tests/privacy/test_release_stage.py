"""One release stage (fedpriv.privacy.release_stage): reserve, draw, range-check, record."""

import numpy as np
import pytest

from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.events import BoundedRangeDpEvent
from fedpriv.privacy.ledger import PrivacyBudgetExceededError
from fedpriv.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from fedpriv.privacy.range_guard import ReleaseOutOfRange
from tests.keys import private_rng


def _ledger(eps=2.0):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=1e-5))


def _stage(ledger, *, bound=100.0, mech=None):
    from fedpriv.privacy.release_stage import ReleaseStage

    mech = mech or GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=5.0)
    return ReleaseStage(ledger=ledger, mechanism=mech, rng=private_rng(3), bound=bound)


def test_a_release_is_recorded_under_its_label_and_noisy():
    ledger = _ledger()
    stage = _stage(ledger)
    stage.reserve(2)
    out = stage.release(np.full(50, 10.0), label="round 1: sums")
    assert [e.label for e in ledger.entries] == ["round 1: sums"]
    assert ledger.entries[0].event == stage.planned_event
    # N(0, 25) noise on every coordinate: sample sd near 5 (50 draws: within ±40 %).
    assert 3.0 < float(np.std(out - 10.0)) < 7.0


def test_an_out_of_range_sum_is_refused_and_its_twin_within_range_passes():
    ledger = _ledger()
    stage = _stage(ledger, bound=20.0)
    stage.release(np.full(10, 19.0), label="honest")  # the twin: within the bound
    with pytest.raises(ReleaseOutOfRange):
        stage.release(np.full(10, 10_000.0), label="inflated")  # a hostile sum
    # Its noise was drawn: the event stays recorded.
    assert [e.label for e in ledger.entries] == ["honest", "inflated"]


def test_a_release_over_budget_raises_before_any_noise_is_drawn():
    ledger = _ledger(eps=0.1)
    stage = _stage(ledger, mech=LaplaceMechanism(l1_sensitivity=1.0, epsilon=1.0))
    with pytest.raises(PrivacyBudgetExceededError):
        stage.reserve(1)
    with pytest.raises(PrivacyBudgetExceededError):
        stage.release(np.zeros(3), label="too much")
    assert ledger.entries == ()


def test_a_selection_records_its_events_then_draws():
    from fedpriv.privacy.release_stage import ReleaseStage

    ledger = _ledger()
    stage = ReleaseStage(ledger=ledger, rng=private_rng(4), event=BoundedRangeDpEvent(0.1))
    drawn = []
    out = stage.select(lambda rng: drawn.append(len(ledger.entries)) or rng.integers(0, 2, 5),
                       label="leaf labels", events=3)  # fmt: skip
    assert drawn == [3] and out.shape == (5,)  # all three recorded before the draw


def test_a_selection_over_budget_draws_nothing():
    from fedpriv.privacy.release_stage import ReleaseStage

    ledger = _ledger(eps=0.5)
    stage = ReleaseStage(ledger=ledger, rng=private_rng(5), event=BoundedRangeDpEvent(5.0))
    called = []
    with pytest.raises(PrivacyBudgetExceededError):
        stage.select(lambda rng: called.append(1), label="too much")
    assert called == [] and ledger.entries == ()


def test_a_seeded_generator_is_refused():
    from fedpriv.privacy.release_stage import ReleaseStage

    stage = ReleaseStage(
        ledger=_ledger(),
        mechanism=GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0),
        rng=np.random.default_rng(0),
    )
    with pytest.raises((TypeError, ValueError)):
        stage.release(np.zeros(2), label="x")
