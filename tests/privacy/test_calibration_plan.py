"""One scale over a plan of pure releases (fedpriv.privacy.calibration_plan)."""

import pytest
from dp_accounting import dp_event

from fedpriv.privacy import accounting
from fedpriv.privacy.calibration_plan import calibrate_pure_plan
from fedpriv.privacy.calibration_range import CalibrationRangeError
from fedpriv.privacy.events import BoundedRangeDpEvent, PureDpEvent

DELTA = 1e-5


def _plan(x: float, eps: float = 1.0) -> list:
    """40 bounded-range selections, 10 Laplace releases and one pure event: shares of ε."""
    return [
        (BoundedRangeDpEvent(x * 0.4 * eps / 40), 40),
        (dp_event.LaplaceDpEvent(1.0 / (x * 0.5 * eps / 10)), 10),
        (PureDpEvent(x * 0.1 * eps), 1),
    ]


@pytest.mark.parametrize("eps", [0.3, 3.0])
def test_the_scale_spends_the_target_within_rtol_and_never_above(eps):
    out = calibrate_pure_plan(lambda x: _plan(x, eps), target_epsilon=eps, delta=DELTA)
    assert out.reached and out.shortfall == ""
    assert 0.99 * eps <= out.epsilon <= eps
    assert out.scale > 1.2  # basic composition's split (x = 1) spends far less
    acc = accounting.account(_plan(out.scale, eps), DELTA)  # the ledger's own figure
    assert acc.epsilon == pytest.approx(out.epsilon, rel=1e-12) and acc.epsilon <= eps
    assert (out.epsilon_pld, out.epsilon_rdp) == pytest.approx((acc.epsilon_pld, acc.epsilon_rdp))
    # Twin: the split itself would fail the same check.
    assert accounting.account(_plan(1.0, eps), DELTA).epsilon < 0.99 * eps


def test_a_start_that_overshoots_walks_down():
    out = calibrate_pure_plan(_plan, target_epsilon=1.0, delta=DELTA, start=20.0)
    assert 0.99 <= out.epsilon <= 1.0 and out.scale < 20.0


def test_a_capped_scale_says_why_it_falls_short():
    out = calibrate_pure_plan(_plan, target_epsilon=1.0, delta=DELTA, max_scale=1.1)
    assert out.scale == 1.1 and not out.reached and out.epsilon < 0.99
    assert "largest scale allowed, 1.1" in out.shortfall


def test_a_jump_in_the_accounted_epsilon_says_where():
    # ε(x) leaps past the target at x = 1.5: no scale spends 99 % of it.
    def leaping(x):
        return [(BoundedRangeDpEvent(0.5 * x if x < 1.5 else 10.0 * x), 1)]

    out = calibrate_pure_plan(leaping, target_epsilon=1.0, delta=DELTA)
    assert not out.reached and out.epsilon <= 1.0 and 1.4 < out.scale < 1.5
    assert "jumps from" in out.shortfall


def test_an_unreachable_target_is_refused():
    with pytest.raises(CalibrationRangeError, match=r"target_epsilon=0\.5"):
        calibrate_pure_plan(lambda x: [(PureDpEvent(5.0), 1)], target_epsilon=0.5, delta=DELTA)


def test_a_repeated_calibration_is_served_from_the_cache():
    first = calibrate_pure_plan(_plan, target_epsilon=0.7, delta=DELTA)
    again = calibrate_pure_plan(_plan, target_epsilon=0.7, delta=DELTA)
    assert first.evaluations > 0 and again.evaluations == 0
    assert again.scale == first.scale and again.epsilon == first.epsilon
