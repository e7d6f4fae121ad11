"""Appendix A.4 pieces: the Lambert-W optimum, the RDP multipliers, the loss-model fit."""

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from fedpriv.experiments.bench import tstar
from scipy import optimize


@pytest.mark.parametrize(
    ("amplitude", "tau", "c", "kappa", "epsilon", "delta"),
    [
        (0.2, 30.0, 1e-6, 1.2, 2.0, 1e-5),
        (0.05, 80.0, 3e-7, 0.9, 0.5, 1e-6),
        (1.0, 10.0, 1e-5, 1.0, 8.0, 1e-4),
    ],
)
def test_lambert_tstar_matches_brute_force_minimisation(amplitude, tau, c, kappa, epsilon, delta):
    # Under the leading-order z(T)² = κ² q² T log(1/δ)/ε², eq. A1 is A e^(−T/τ) + b T².
    q = 0.05

    def loss(t):
        z2 = kappa**2 * q**2 * t * math.log(1 / delta) / epsilon**2
        return amplitude * math.exp(-t / tau) + c * t * z2 / q**2

    grid = np.linspace(0.01, 5000, 500_001)
    brute = grid[np.argmin([loss(t) for t in grid])]
    brute = optimize.minimize_scalar(
        loss, bounds=(max(brute - 1, 1e-3), brute + 1), method="bounded", options={"xatol": 1e-9}
    ).x
    closed = tstar.lambert_tstar(amplitude, tau, c, kappa, epsilon, delta)
    assert closed == pytest.approx(brute, rel=1e-5)


def test_tstar_grows_with_epsilon_and_shrinks_with_delta_only_through_the_log():
    args = (0.2, 30.0, 1e-6, 1.0)
    values = [tstar.lambert_tstar(*args, e, 1e-5) for e in (0.5, 1, 2, 4, 8)]
    assert values == sorted(values)
    assert tstar.lambert_tstar(*args, 2.0, 1e-6) < tstar.lambert_tstar(*args, 2.0, 1e-4)


@pytest.mark.parametrize(("q", "z"), [(0.05, 0.8), (0.02, 3.0), (0.3, 1.1), (1.0, 2.0)])
def test_rdp_vector_matches_dp_accounting(q, z):
    ours = tstar.rdp_subsampled_gaussian(q, z)
    ref = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, z, tstar.ORDERS)
    np.testing.assert_allclose(ours, ref, rtol=1e-10)


def test_rdp_noise_multiplier_meets_the_target_tightly():
    z = tstar.rdp_noise_multiplier(2.0, 1e-5, 0.05, 50)
    assert tstar.rdp_epsilon(0.05, z, 50, 1e-5) == pytest.approx(2.0, rel=1e-5)
    assert tstar.rdp_epsilon(0.05, z * 0.99, 50, 1e-5) > 2.0


def test_fit_recovers_a_noiseless_loss_model():
    true = tstar.LossFit(floor=0.18, amplitude=0.08, tau=20.0, c=2e-7, rmse=0, r2=1, n_points=0)
    q = 0.05
    rounds = np.array([25, 50, 100, 200, 400] * 2, dtype=float)
    eps = np.repeat([1.0, 4.0], 5)
    z = np.array(
        [tstar.rdp_noise_multiplier(e, 1e-5, q, t) for e, t in zip(eps, rounds, strict=True)]
    )
    fit = tstar.fit_loss_model(rounds, z, true.loss(rounds, z, q), q)
    assert fit.rmse < 1e-4 and fit.r2 > 0.999
    assert tstar.leading_order_kappa(1.0, 1e-5, q, rounds[:5], z[:5]) > 0


def test_exact_tstar_is_the_minimiser_of_the_fitted_loss():
    fit = tstar.LossFit(floor=0.18, amplitude=0.08, tau=20.0, c=2e-7, rmse=0, r2=1, n_points=0)
    t_star = tstar.exact_tstar(fit, 2.0, 1e-5, 0.05)

    def loss(t):
        return fit.loss(
            np.array([t]), np.array([tstar.rdp_noise_multiplier(2.0, 1e-5, 0.05, t)]), 0.05
        )[0]

    assert loss(t_star) <= min(loss(0.9 * t_star), loss(1.1 * t_star))
