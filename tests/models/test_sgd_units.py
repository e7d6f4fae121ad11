"""Per-unit gradient clipping: one unit moves a DP-SGD sum by at most C, however many
records it has; clipping per record lets it move the sum by m·C."""

import numpy as np
import pytest

from fedpriv.models import sgd_units
from fedpriv.models.networks import NetworkSpec, clipped_gradient_sum
from fedpriv.models.sgd_units import unit_clipped_feature_sum, unit_clipped_gradient_sum

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
Y = (RNG.random(60) < 0.5).astype(float)


@pytest.mark.parametrize(("kind", "bias"), [("logistic", 0.0), ("logistic", 1.0), ("mlp", 0.0)])
def test_singleton_units_are_per_record_clipping(kind, bias):
    spec = NetworkSpec(kind=kind, n_features=3, hidden=4)
    params = spec.init_params(np.random.default_rng(1))
    units = np.arange(60)[::-1]
    np.testing.assert_allclose(
        unit_clipped_gradient_sum(spec, params, X, Y, units, 0.1, bias_bound=bias),
        clipped_gradient_sum(spec, params, X, Y, 0.1, bias_bound=bias),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize("m", [1, 4, 16])
def test_one_unit_moves_the_sum_by_at_most_c(monkeypatch, m):
    monkeypatch.setattr(sgd_units, "BLOCK_ROWS", 7)  # blocks never cut a unit
    spec = NetworkSpec(kind="logistic", n_features=3)
    params = spec.init_params(np.random.default_rng(2))
    units = np.repeat(np.arange(20), 3)  # 20 units of 3 records
    canary_x, canary_y = np.tile([[3.0, -3.0, 3.0]], (m, 1)), np.ones(m)
    C = 0.1
    without = unit_clipped_gradient_sum(spec, params, X, Y, units, C)
    with_unit = unit_clipped_gradient_sum(
        spec, params, np.vstack([X, canary_x]), np.append(Y, canary_y),
        np.append(units, np.full(m, 20)), C,
    )  # fmt: skip
    assert np.linalg.norm(with_unit - without) == pytest.approx(C, rel=1e-9)
    # Per-record clipping (the broken twin): the same unit moves it by m·C.
    per_record = clipped_gradient_sum(spec, params, np.vstack([X, canary_x]),
                                      np.append(Y, canary_y), C)  # fmt: skip
    gap = per_record - clipped_gradient_sum(spec, params, X, Y, C)
    assert np.linalg.norm(gap) == pytest.approx(m * C, rel=1e-9)


def test_centring_sums_clip_each_unit_to_r():
    units = np.repeat(np.arange(20), 3)
    R = 0.5
    base = unit_clipped_feature_sum(X, units, R)
    more = unit_clipped_feature_sum(
        np.vstack([X, np.full((8, 3), 2.0)]), np.append(units, np.full(8, 20)), R
    )
    assert np.linalg.norm(more - base) == pytest.approx(R, rel=1e-9)
    assert unit_clipped_feature_sum(np.zeros((0, 3)), np.zeros(0, dtype=int), R).shape == (3,)
