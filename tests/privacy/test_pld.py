"""The vectorised Gaussian PLD builder equals dp-accounting's public path."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from fedpriv.privacy import BoundedRangeDpEvent, PureDpEvent
from fedpriv.privacy.pld import amplified_pure_epsilon, composed_pld, flatten, gaussian_pld


@pytest.mark.parametrize(
    ("z", "q", "vdi"),
    [(0.6, 0.05, 1e-4), (1.0, 0.05, 1e-3), (3.0, 0.01, 1e-4), (1.3, 1.0, 1e-4), (0.8, 0.5, 1e-3)],
)
def test_fast_gaussian_pld_equals_library(z, q, vdi):
    ours = gaussian_pld(z, sampling_probability=q, value_discretization_interval=vdi)
    ref = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=vdi)
    for delta in (1e-3, 1e-5, 1e-7):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            ref.get_epsilon_for_delta(delta), rel=1e-9, abs=1e-12
        )
    for eps in (0.1, 1.0, 3.0):
        assert ours.get_delta_for_epsilon(eps) == pytest.approx(
            ref.get_delta_for_epsilon(eps), rel=1e-7, abs=1e-15
        )


def test_composed_pld_matches_pld_accountant():
    event = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.1)), 20
            ),
            dp_event.LaplaceDpEvent(2.0),
            dp_event.GaussianDpEvent(3.0),
        ]
    )
    ours = composed_pld(flatten(event), 1e-4)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    assert ours.get_epsilon_for_delta(1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-8)


def test_flatten_merges_and_drops_noops():
    g = dp_event.GaussianDpEvent(1.0)
    event = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(g, 3),
            dp_event.NoOpDpEvent(),
            g,
            dp_event.LaplaceDpEvent(1.0),
        ]
    )
    assert flatten(event, 2) == [(g, 8), (dp_event.LaplaceDpEvent(1.0), 2)]


def test_pure_dp_translation_is_the_randomised_response_pair():
    # ε-DP dominating pair: δ(ε') = (1 − e^{ε'−ε}) / (1 + e^{−ε}) for 0 ≤ ε' ≤ ε.
    pld = composed_pld([(PureDpEvent(1.0), 1)], 1e-4)
    for eps_prime in (0.0, 0.4, 0.9):
        expected = (1 - math.exp(eps_prime - 1.0)) / (1 + math.exp(-1.0))
        assert pld.get_delta_for_epsilon(eps_prime) == pytest.approx(expected, abs=2e-4)
    assert pld.get_epsilon_for_delta(0.0) == pytest.approx(1.0, abs=1e-4)
    br = composed_pld([(BoundedRangeDpEvent(1.0), 1)], 1e-4)
    assert br.get_epsilon_for_delta(0.0) == pytest.approx(1.0, abs=1e-4)


def test_amplification_by_poisson_subsampling():
    assert amplified_pure_epsilon(1.0, 1.0) == pytest.approx(1.0)
    assert amplified_pure_epsilon(1.0, 0.1) == pytest.approx(math.log(1 + 0.1 * (math.e - 1)))
    sub = composed_pld([(dp_event.PoissonSampledDpEvent(0.1, PureDpEvent(1.0)), 1)], 1e-4)
    assert sub.get_epsilon_for_delta(0.0) == pytest.approx(np.log1p(0.1 * np.expm1(1.0)), abs=1e-4)


def test_non_private_event_has_no_pld():
    assert composed_pld([(dp_event.NonPrivateDpEvent(), 1)], 1e-4) is None
    assert composed_pld([(dp_event.GaussianDpEvent(0.0), 1)], 1e-4) is None
