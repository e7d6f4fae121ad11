"""The one "largest x within ε" search (fedpriv.privacy.scale_search)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.privacy.scale_search import OutOfReach, largest_within


def _curve(a: float, p: float, cap: float = math.inf):
    return lambda x: (min(a * x**p, cap), x)


@settings(max_examples=60, deadline=None)
@given(a=st.floats(0.01, 100.0), p=st.floats(0.3, 3.0), target=st.floats(0.05, 20.0),
       start=st.floats(1e-3, 1e3))  # fmt: skip
def test_power_curves_land_in_the_top_percent_and_never_overshoot(a, p, target, start):
    """ε = a·x^p spans every shape the callers see (PLD composition ≈ √k, basic ≈ k)."""
    found = largest_within(
        _curve(a, p), target=target, start=start, rtol=0.01, min_x=1e-12, max_x=1e12
    )
    assert found.value == a * found.x**p <= target
    assert found.value >= 0.99 * target
    assert found.payload == found.x and found.evaluations <= 60


def test_a_saturated_curve_stops_at_the_cap_with_nothing_above():
    found = largest_within(
        _curve(1.0, 1.0, cap=0.5), target=1.0, start=0.1, rtol=0.01, min_x=1e-6, max_x=64.0
    )
    assert found.x == 64.0 and found.above is None and found.value == 0.5


def test_a_jump_is_bracketed_and_the_figures_above_are_kept():
    def leaping(x):
        return (0.5 * x if x < 1.5 else 10.0 * x), None

    found = largest_within(leaping, target=1.0, start=1.0, rtol=0.01, min_x=1e-6, max_x=1e6)
    assert found.value <= 1.0 and 1.4 < found.x < 1.5 <= found.above
    assert found.above_value >= 15.0 and found.above / found.x <= 1.0 + 1e-6


def test_the_bracket_tolerance_bounds_the_work():
    def leaping(x):
        return (0.5 * x if x < 1.5 else 10.0 * x), None

    coarse = largest_within(
        leaping, target=1.0, start=1.0, rtol=0.01, min_x=1e-6, max_x=1e6, closed=1e-4
    )
    fine = largest_within(leaping, target=1.0, start=1.0, rtol=0.01, min_x=1e-6, max_x=1e6)
    assert coarse.evaluations < fine.evaluations and coarse.above / coarse.x <= 1.0 + 1e-4


def test_infinite_figures_count_as_infeasible():
    found = largest_within(
        lambda x: (math.inf if x > 2.0 else x / 2.0, None),
        target=1.0, start=8.0, rtol=0.01, min_x=1e-6, max_x=1e6,
    )  # fmt: skip
    assert 0.99 <= found.value <= 1.0 and found.x <= 2.0


def test_a_target_the_floor_overshoots_is_out_of_reach():
    with pytest.raises(OutOfReach) as err:
        largest_within(
            lambda x: (1.5 + x, None), target=1.0, start=0.3, rtol=0.01, min_x=1e-4, max_x=10.0,
            down=0.25,
        )  # fmt: skip
    assert err.value.x < 1e-4 and err.value.value > 1.0
