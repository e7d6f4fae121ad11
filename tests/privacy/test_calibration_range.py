"""Extreme calibration inputs: each calibrates on bounded PLDs or is refused before any PLD.

No test asserts on wall time: the bound is the number of points of the
largest PLD built (recorded by wrapping ``composed_pld``), or a refusal
raised before any PLD exists. On the old code ε = 1e6 and q = 1e-9 allocated
until a ``MemoryError`` (60 GiB, 2.26 TiB), δ = 1e-300 overflowed σ², and
10⁷ compositions spent 26 s per PLD in dp-accounting's exact ``size**count``.
"""

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_pmf

from fedpriv.privacy import pld as pld_mod
from fedpriv.privacy import pld_size
from fedpriv.privacy.calibration import (
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
    calibrate_noise_multiplier,
    gaussian_delta,
    log_gaussian_delta,
    subsampled_gaussian_event,
)
from fedpriv.privacy.calibration_range import CalibrationRangeError
from fedpriv.privacy.participation import calibrate_participation_noise_multiplier

PLAN = {"target_delta": 1e-5, "sampling_probability": 0.05, "steps": 75}

REFUSED = {
    # ε so large that z would fall below the PLD-size floor (old: MemoryError, 60 GiB)
    "epsilon=1e6": ({**PLAN, "target_epsilon": 1e6}, r"target_epsilon must lie in \(0, ~\d"),
    # a record is almost never sampled: 1-(1-q)^T = 7.5e-8 <= δ (old: 344 s, then 2.26 TiB)
    "q=1e-9": (
        {**PLAN, "target_epsilon": 2.0, "sampling_probability": 1e-9},
        r"sampling_probability must exceed 1\.33\d*e-07 for steps=75",
    ),
    # below the mass a composed PLD puts at infinite loss (old: OverflowError in σ²)
    "delta=1e-300": (
        {**PLAN, "target_epsilon": 2.0, "target_delta": 1e-300},
        r"target_delta must lie in \(1e-15, 1\) for 75 steps; got 1e-300",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_uncalibratable_inputs_are_refused_on_bounded_plds(case, largest_pld):
    kwargs, message = REFUSED[case]
    with pytest.raises(CalibrationRangeError, match=message):
        calibrate_gaussian_noise_multiplier(**kwargs)
    # The floor is found on coarse search PLDs: a fraction of the budget.
    assert largest_pld[0] <= pld_size.MAX_PLD_POINTS // 10
    if case != "epsilon=1e6":
        assert largest_pld[0] == 0  # refused before any PLD was built


def test_the_tight_participation_path_refuses_an_unsampled_plan(largest_pld):
    with pytest.raises(CalibrationRangeError, match="sampling_probability must exceed"):
        calibrate_participation_noise_multiplier(
            target_epsilon=2.0,
            target_delta=1e-5,
            sampling_probability=1e-6,
            participation=0.1,
            steps=75,
            accounting="tight",
        )
    assert largest_pld[0] == 0


CALIBRATED = {
    # ε tiny: the walk goes up, to z ≈ 1.5e5, on PLDs of a few points
    "epsilon=1e-6": dict(target_epsilon=1e-6, q=0.05, steps=75),
    # one full-batch release
    "q=1,T=1": dict(target_epsilon=2.0, q=1.0, steps=1),
}


@pytest.mark.parametrize("case", CALIBRATED)
def test_extreme_but_calibratable_inputs_stay_within_the_point_budget(case, largest_pld):
    c = CALIBRATED[case]
    cal = calibrate_noise_multiplier(  # uncached: the PLDs are really built
        lambda z: subsampled_gaussian_event(z, sampling_probability=c["q"], steps=c["steps"]),
        target_epsilon=c["target_epsilon"],
        target_delta=1e-5,
    )
    assert cal.epsilon <= c["target_epsilon"]
    assert 0 < largest_pld[0] <= pld_size.MAX_PLD_POINTS
    if case == "q=1,T=1":  # the analytic Gaussian's z at ε = 2 is 1.99; the PLD's is a hair above
        assert cal.noise_multiplier == pytest.approx(1.994, abs=0.01)


def test_ten_million_compositions_take_the_dense_path(monkeypatch):
    # dp-accounting's sparse self_compose computes size**count exactly: 26 s at 1e7.
    def refuse(self, num_times, tail_mass_truncation=1e-15):
        if num_times > 1000:
            raise AssertionError("sparse self-composition at a huge count")
        return original(self, num_times, tail_mass_truncation)

    original = pld_pmf.SparsePLDPmf.self_compose
    monkeypatch.setattr(pld_pmf.SparsePLDPmf, "self_compose", refuse)
    event = dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1591.0))
    pld = pld_mod.composed_pld([(event, 10**7)], 1e-4)
    assert pld_size.span(pld) <= pld_size.MAX_PLD_POINTS
    # the same ε as before (measured on the sparse path: 0.5625036)
    assert pld.get_epsilon_for_delta(1e-5) == pytest.approx(0.5625036, abs=1e-6)


# -- the analytic Gaussian (the random forest's leaves) -----------------------
def test_analytic_gaussian_at_a_tiny_epsilon_brackets_upwards():
    # z ≈ 4e4 lies past the old upper bracket 1e4 (old: "f(a) and f(b) must have different signs")
    z = analytic_gaussian_noise_multiplier(epsilon=1e-6, delta=1e-5)
    assert 1e4 < z < 1e6
    assert gaussian_delta(1e-6, z) <= 1e-5


def test_analytic_gaussian_at_delta_1e_300_is_exact_in_log_space():
    # old: δ(z) underflowed to 0 and the search returned its upper bracket, z = 1e4
    z = analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-300)
    assert 30.0 < z < 45.0
    assert log_gaussian_delta(1.0, z) <= math.log(1e-300)
    assert log_gaussian_delta(1.0, 0.99 * z) > math.log(1e-300)  # and tight


def test_log_gaussian_delta_agrees_with_the_direct_formula():
    for eps, z in ((0.5, 1.0), (2.0, 0.7), (1.0, 5.0)):
        assert log_gaussian_delta(eps, z) == pytest.approx(math.log(gaussian_delta(eps, z)), 1e-9)
