"""Noise laws of every mechanism, each with a check that the test has power."""

import itertools
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy import integrate, stats

from fedpriv.privacy import (
    BoundedRangeDpEvent,
    ExponentialMechanism,
    GaussianMechanism,
    GaussianReportNoisyMax,
    LaplaceMechanism,
    PermuteAndFlip,
    PureDpEvent,
    chi_square_selection_test,
    gaussian_delta,
    ks_noise_test,
)
from tests.keys import private_rng

N = 20_000
ALPHA = 1e-3  # per-test false-alarm rate of the goodness-of-fit tests


def _draw(mech, value, n, seed):
    rng = private_rng(seed)
    return np.array([mech.apply(value, rng=rng) for _ in range(n)])


# --- additive noise ---------------------------------------------------------
def test_gaussian_noise_law_and_scale():
    mech = GaussianMechanism(l2_sensitivity=2.0, noise_multiplier=1.5)
    value = np.array([3.0, -1.0, 0.0])
    out = mech.apply(np.tile(value, N), rng=private_rng(1)).reshape(N, 3)
    noise = (out - value).ravel()
    assert mech.std == pytest.approx(3.0)
    assert ks_noise_test(noise, stats.norm(0.0, 3.0)) > ALPHA
    # Power: the same sample rejects a law 5 % too wide and a Laplace of equal variance.
    assert ks_noise_test(noise, stats.norm(0.0, 3.15)) < ALPHA
    assert ks_noise_test(noise, stats.laplace(0.0, 3.0 / math.sqrt(2))) < ALPHA
    assert mech.dp_event == dp_event.GaussianDpEvent(1.5)


def test_laplace_noise_law_and_scale():
    mech = LaplaceMechanism(l1_sensitivity=2.0, epsilon=0.5)
    out = mech.apply(np.zeros(N * 2), rng=private_rng(2))
    assert mech.scale == pytest.approx(4.0)
    assert ks_noise_test(out, stats.laplace(0.0, 4.0)) > ALPHA
    assert ks_noise_test(out, stats.laplace(0.0, 4.4)) < ALPHA
    # dp-accounting's Laplace noise_multiplier is scale / sensitivity.
    assert mech.dp_event == dp_event.LaplaceDpEvent(2.0)


def test_same_generator_state_gives_same_noise():
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0)
    a = mech.apply(np.zeros(5), rng=private_rng(7))
    b = mech.apply(np.zeros(5), rng=private_rng(7))
    c = mech.apply(np.zeros(5), rng=private_rng(8))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_analytic_gaussian_formula_matches_direct_integration():
    # δ(ε) = ∫ max(0, p(x) − e^ε q(x)) dx for N(1, z²) vs N(0, z²) (Balle & Wang 2018, Thm. 8).
    for z, eps in [(1.0, 1.0), (2.0, 0.5), (0.7, 3.0)]:
        p, q = stats.norm(1.0, z), stats.norm(0.0, z)
        direct, _ = integrate.quad(
            lambda x, p=p, q=q, eps=eps: max(0.0, p.pdf(x) - math.exp(eps) * q.pdf(x)),
            -20 * z,
            20 * z + 1,
            points=[0.5 + eps * z * z],
            limit=200,
        )
        assert gaussian_delta(eps, z) == pytest.approx(direct, rel=1e-6, abs=1e-12)


# --- selection --------------------------------------------------------------
SCORES = np.array([3.0, 1.0, 2.5, 0.0, 2.0])


@pytest.mark.parametrize("monotone", [False, True])
def test_exponential_mechanism_matches_softmax(monotone):
    mech = ExponentialMechanism(epsilon=1.2, sensitivity=2.0, monotone=monotone)
    temp = 1.2 / (2.0 if monotone else 4.0)
    expected = np.exp(temp * SCORES) / np.exp(temp * SCORES).sum()
    np.testing.assert_allclose(mech.probabilities(SCORES), expected, rtol=1e-12)
    picks = _draw(mech, SCORES, N, seed=3)
    assert chi_square_selection_test(picks, expected) > ALPHA
    # Power: the other variant's temperature is rejected.
    other = 1.2 / (4.0 if monotone else 2.0)
    wrong = np.exp(other * SCORES) / np.exp(other * SCORES).sum()
    assert chi_square_selection_test(picks, wrong) < ALPHA
    assert mech.dp_event == BoundedRangeDpEvent(1.2)


def _permute_and_flip_exact(p_accept: np.ndarray) -> np.ndarray:
    """Exact PF law by enumerating visiting orders (McKenna & Sheldon 2020, Alg. 1)."""
    k = p_accept.size
    probs = np.zeros(k)
    perms = list(itertools.permutations(range(k)))
    for order in perms:
        survive = 1.0
        for r in order:
            probs[r] += survive * p_accept[r]
            survive *= 1.0 - p_accept[r]
    return probs / len(perms)


@pytest.mark.parametrize("monotone", [False, True])
def test_permute_and_flip_matches_exact_law(monotone):
    mech = PermuteAndFlip(epsilon=1.5, sensitivity=1.0, monotone=monotone)
    scale = 1.5 / (1.0 if monotone else 2.0)
    accept = np.exp(scale * (SCORES - SCORES.max()))
    np.testing.assert_allclose(mech.acceptance_probabilities(SCORES), accept, rtol=1e-12)
    exact = _permute_and_flip_exact(accept)
    assert exact.sum() == pytest.approx(1.0, abs=1e-12)
    picks = _draw(mech, SCORES, N, seed=4)
    assert chi_square_selection_test(picks, exact) > ALPHA
    # Power: PF's law differs from the exponential mechanism's at the same ε.
    em = ExponentialMechanism(epsilon=1.5, sensitivity=1.0, monotone=monotone)
    assert chi_square_selection_test(picks, em.probabilities(SCORES)) < ALPHA
    # PF is never worse in expected score than EM (McKenna & Sheldon 2020, Thm. 2).
    assert exact @ SCORES >= em.probabilities(SCORES) @ SCORES
    assert mech.dp_event == PureDpEvent(1.5)


def _rnm_exact(scores: np.ndarray, std: float) -> np.ndarray:
    """P[argmax = i] = ∫ φ((x−u_i)/σ)/σ Π_{j≠i} Φ((x−u_j)/σ) dx, by quadrature."""
    out = np.zeros(scores.size)
    for i, ui in enumerate(scores):
        others = np.delete(scores, i)

        def integrand(x, ui=ui, others=others):
            return stats.norm.pdf(x, ui, std) * np.prod(stats.norm.cdf(x, others, std))

        out[i], _ = integrate.quad(integrand, ui - 12 * std, ui + 12 * std, limit=200)
    return out


def test_gaussian_report_noisy_max_matches_exact_law():
    mech = GaussianReportNoisyMax(l2_sensitivity=1.0, noise_multiplier=1.3)
    exact = _rnm_exact(SCORES, 1.3)
    assert exact.sum() == pytest.approx(1.0, abs=1e-6)
    picks = _draw(mech, SCORES, N, seed=5)
    assert chi_square_selection_test(picks, exact) > ALPHA
    assert chi_square_selection_test(picks, _rnm_exact(SCORES, 1.0)) < ALPHA
    assert mech.dp_event == dp_event.GaussianDpEvent(1.3)


def test_gaussian_for_budget_is_the_analytic_calibration():
    mech = GaussianMechanism.for_budget(epsilon=1.0, delta=1e-5, l2_sensitivity=2.0)
    # Balle & Wang (2018), §5: σ ≈ 3.73 at ε = 1, δ = 1e-5 (classical bound: 4.84).
    assert mech.noise_multiplier == pytest.approx(3.7306, abs=1e-4)
    assert mech.std == pytest.approx(2 * mech.noise_multiplier)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0, 8.0])
def test_gaussian_for_budget_is_certified_by_the_ledger_and_only_a_hair_above_analytic(epsilon):
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger
    from fedpriv.privacy.calibration import analytic_gaussian_noise_multiplier

    mech = GaussianMechanism.for_budget(epsilon=epsilon, delta=1e-5, l2_sensitivity=1.0)
    exact = analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=1e-5)
    assert exact <= mech.noise_multiplier <= exact * (1 + 1e-6)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    ledger.release(mech, np.zeros(3), rng=private_rng(0), label="one release")
    assert ledger.epsilon() <= epsilon
