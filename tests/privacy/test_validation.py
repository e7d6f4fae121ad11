"""Every mechanism and boundary rejects bad parameters, naming value and range."""

import math

import numpy as np
import pytest

from fedpriv.privacy import (
    ExponentialMechanism,
    GaussianMechanism,
    GaussianReportNoisyMax,
    LaplaceMechanism,
    PermuteAndFlip,
    PrivacyBudget,
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
)
from tests.keys import private_rng

BAD_POSITIVE = [0.0, -1.0, math.nan, math.inf]


@pytest.mark.parametrize("bad", BAD_POSITIVE)
@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda v: GaussianMechanism(l2_sensitivity=v, noise_multiplier=1.0), "l2_sensitivity"),
        (lambda v: GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=v), "noise_multiplier"),
        (lambda v: LaplaceMechanism(l1_sensitivity=v, epsilon=1.0), "l1_sensitivity"),
        (lambda v: LaplaceMechanism(l1_sensitivity=1.0, epsilon=v), "epsilon"),
        (lambda v: ExponentialMechanism(epsilon=v), "epsilon"),
        (lambda v: ExponentialMechanism(epsilon=1.0, sensitivity=v), "sensitivity"),
        (lambda v: PermuteAndFlip(epsilon=v), "epsilon"),
        (lambda v: PermuteAndFlip(epsilon=1.0, sensitivity=v), "sensitivity"),
        (
            lambda v: GaussianReportNoisyMax(l2_sensitivity=v, noise_multiplier=1.0),
            "l2_sensitivity",
        ),
        (
            lambda v: GaussianReportNoisyMax(l2_sensitivity=1.0, noise_multiplier=v),
            "noise_multiplier",
        ),
    ],
)
def test_positive_parameters_are_checked(factory, field, bad):
    with pytest.raises(ValueError, match=rf"{field} must lie in \(0, inf\); got {bad!r}"):
        factory(bad)


def test_type_errors_name_the_type():
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        LaplaceMechanism(l1_sensitivity=1.0, epsilon="1")
    with pytest.raises(TypeError, match="real number"):
        GaussianMechanism(l2_sensitivity=True, noise_multiplier=1.0)


@pytest.mark.parametrize("delta", [-0.1, 1.0, 1.5, math.nan])
def test_budget_delta_range(delta):
    with pytest.raises(ValueError, match=r"delta must lie in \[0, 1\); got"):
        PrivacyBudget(epsilon=1.0, delta=delta)


def test_budget_allows_explicit_infinity_only_for_epsilon():
    assert PrivacyBudget(epsilon=math.inf, delta=1e-5).epsilon == math.inf
    with pytest.raises(ValueError, match=r"epsilon must lie in \(0, inf\]"):
        PrivacyBudget(epsilon=0.0, delta=1e-5)


@pytest.mark.parametrize(
    "value", [[1.0, np.nan], [np.inf, 0.0], [[0.0, -np.inf]]], ids=["nan", "inf", "-inf"]
)
def test_values_must_be_finite(value):
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match=r"value must be finite everywhere .* found"):
        mech.apply(value, rng=private_rng(0))


def test_scores_must_be_finite_and_1d():
    em = ExponentialMechanism(epsilon=1.0)
    with pytest.raises(ValueError, match="scores must be finite"):
        em.apply([0.0, np.nan], rng=private_rng(0))
    with pytest.raises(ValueError, match="scores must be 1-dimensional"):
        em.apply([[0.0, 1.0]], rng=private_rng(0))


PRIVATE_ONLY = r"rng must be a private generator \(SecretKey\.generator\(\.\.\.\), ChaCha20\); got "


@pytest.mark.parametrize(
    ("rng", "got"),
    [
        (np.random, "module"),
        (np.random.default_rng(0), "PCG64"),
        (np.random.Generator(np.random.MT19937(0)), "MT19937"),
    ],
    ids=["global-module", "pcg64", "mt19937"],
)
def test_global_rng_module_is_refused(rng, got):
    # The global module, and any seeded (non-ChaCha20) generator, on the private path.
    mech = LaplaceMechanism(l1_sensitivity=1.0, epsilon=1.0)
    with pytest.raises(TypeError, match=PRIVATE_ONLY + got + ": noise and sampling coins"):
        mech.apply([0.0], rng=rng)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_epsilon": -1.0}, r"target_epsilon must lie in \(0, inf\)"),
        ({"target_delta": 0.0}, r"target_delta must lie in \(0, 1\); got 0.0"),
        ({"sampling_probability": 1.5}, r"sampling_probability must lie in \(0, 1\]; got 1.5"),
        ({"steps": 0}, r"steps must be an integer in \[1, inf\); got 0"),
    ],
)
def test_calibration_inputs_are_checked(kwargs, message):
    base = {"target_epsilon": 1.0, "target_delta": 1e-5, "sampling_probability": 0.1, "steps": 5}
    with pytest.raises(ValueError, match=message):
        calibrate_gaussian_noise_multiplier(**{**base, **kwargs})


def test_analytic_gaussian_inputs_are_checked():
    with pytest.raises(ValueError, match=r"delta must lie in \(0, 1\)"):
        analytic_gaussian_noise_multiplier(epsilon=1.0, delta=0.0)
