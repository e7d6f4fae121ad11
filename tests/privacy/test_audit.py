"""Empirical privacy audits: ε̂ ≤ claimed ε for every mechanism (≥ 1,000 trials).

Each audit is paired with a deliberately broken mechanism that the same audit
catches, so a passing audit is evidence rather than a test that cannot fail.
"""

import numpy as np
import pytest
from scipy import stats

from fedpriv.privacy import (
    ExponentialMechanism,
    GaussianMechanism,
    GaussianReportNoisyMax,
    LaplaceMechanism,
    PermuteAndFlip,
    account,
    audit_epsilon,
    clopper_pearson,
)
from fedpriv.privacy.pld import flatten
from tests.keys import private_rng

TRIALS = 4_000
DELTA = 1e-5


def _claimed(event):
    return account(flatten(event), DELTA).epsilon


def _audit(mech, value, neighbour, statistic, seed):
    return audit_epsilon(
        lambda rng: mech.apply(value, rng=rng),
        lambda rng: mech.apply(neighbour, rng=rng),
        statistic=statistic,
        n_trials=TRIALS,
        delta=DELTA,
        rng=private_rng(seed),
    )


def test_clopper_pearson_against_scipy_exact_interval():
    lo, hi = clopper_pearson(7, 50, 0.025)
    ci = stats.binomtest(7, 50).proportion_ci(confidence_level=0.95, method="exact")
    assert lo == pytest.approx(ci.low, rel=1e-9)
    assert hi == pytest.approx(ci.high, rel=1e-9)
    assert clopper_pearson(0, 10, 0.05)[0] == 0.0
    assert clopper_pearson(10, 10, 0.05)[1] == 1.0


def test_audit_rejects_too_few_trials():
    with pytest.raises(ValueError, match=r"n_trials must be an integer in \[200, inf\); got 100"):
        audit_epsilon(
            lambda r: 0.0, lambda r: 0.0, n_trials=100, delta=0.0, rng=np.random.default_rng()
        )


def test_gaussian_audit():
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.2)
    claimed = _claimed(mech.dp_event)
    res = _audit(mech, [0.0], [1.0], lambda y: y[0], seed=10)
    assert 0.5 < res.epsilon_lower_bound <= claimed
    broken = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=0.3)  # 4× too little noise
    bad = _audit(broken, [0.0], [1.0], lambda y: y[0], seed=11)
    assert bad.epsilon_lower_bound > claimed


def test_laplace_audit():
    mech = LaplaceMechanism(l1_sensitivity=1.0, epsilon=1.0)
    res = _audit(mech, [0.0], [1.0], lambda y: y[0], seed=12)
    assert 0.3 < res.epsilon_lower_bound <= 1.0
    broken = LaplaceMechanism(l1_sensitivity=0.25, epsilon=1.0)  # sensitivity understated 4×
    bad = _audit(broken, [0.0], [1.0], lambda y: y[0], seed=13)
    assert bad.epsilon_lower_bound > 1.0


# Neighbouring score vectors: each score moves by at most Δ = 1.
U = np.array([0.0, 1.0, 0.0])
U_NEIGHBOUR = np.array([1.0, 0.0, 0.0])


@pytest.mark.parametrize("cls", [ExponentialMechanism, PermuteAndFlip])
def test_selection_audit(cls):
    mech = cls(epsilon=2.0, sensitivity=1.0)
    res = _audit(mech, U, U_NEIGHBOUR, lambda i: float(i == 0), seed=14)
    assert 0.2 < res.epsilon_lower_bound <= 2.0
    # Claiming monotone scores when they are not doubles the real loss.
    broken = cls(epsilon=2.0, sensitivity=0.5, monotone=True)
    bad = _audit(broken, U, U_NEIGHBOUR, lambda i: float(i == 0), seed=15)
    assert bad.epsilon_lower_bound > 2.0


def test_report_noisy_max_audit():
    mech = GaussianReportNoisyMax(l2_sensitivity=np.sqrt(2.0), noise_multiplier=1.2)
    claimed = _claimed(mech.dp_event)
    res = _audit(mech, U, U_NEIGHBOUR, lambda i: float(i == 0), seed=16)
    assert 0.2 < res.epsilon_lower_bound <= claimed
    broken = GaussianReportNoisyMax(l2_sensitivity=np.sqrt(2.0), noise_multiplier=0.1)
    bad = _audit(broken, U, U_NEIGHBOUR, lambda i: float(i == 0), seed=17)
    assert bad.epsilon_lower_bound > claimed
