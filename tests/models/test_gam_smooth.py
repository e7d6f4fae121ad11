"""Kernel smoothing of a numeric DP-EBM term's per-bin sums: exact values and invariants."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedpriv.models.gam_smooth import (
    smooth_ordered,
    smoothing_matrix,
    sure_bandwidth,
    sure_risk,
)
from fedpriv.models.gam_softmax import sum_zero

FINITE = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
BANDWIDTH = st.floats(0.0, 5.0, allow_nan=False)


def test_three_bins_at_bandwidth_one_match_the_hand_computed_kernel():
    # Rows of [1, e^-1/2, e^-2] (edge) and [e^-1/2, 1, e^-1/2] (centre), each over its sum.
    a, b = math.exp(-0.5), math.exp(-2.0)
    edge = np.array([1.0, a, b]) / (1 + a + b)
    centre = np.array([a, 1.0, a]) / (1 + 2 * a)
    W = smoothing_matrix(3, 1.0)
    np.testing.assert_allclose(W, [edge, centre, edge[::-1]], rtol=1e-12)
    np.testing.assert_allclose(edge, [0.574096992968, 0.348207427884, 0.077695579149], atol=1e-12)


def test_bandwidth_zero_and_a_kernel_shorter_than_a_bin_are_the_identity():
    np.testing.assert_array_equal(smoothing_matrix(5, 0.0), np.eye(5))
    np.testing.assert_array_equal(smoothing_matrix(5, 0.2), np.eye(5))  # reach 0.86 < 1 bin
    np.testing.assert_array_equal(smoothing_matrix(1, 3.0), [[1.0]])


def test_only_the_ordered_bins_are_smoothed():
    values = np.array([0.0, 3.0, 0.0, 7.0])  # three value bins, then a missing-value bin
    out = smooth_ordered(values, 3, 1.0)
    np.testing.assert_allclose(out[:3], smoothing_matrix(3, 1.0) @ values[:3], rtol=1e-12)
    assert out[3] == 7.0
    np.testing.assert_allclose(
        out[:3], 3 * np.array([0.348207427884, 0.451862761878, 0.348207427884]), atol=1e-11
    )


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"bandwidth must lie in \[0, inf\) bins; got -1"):
        smoothing_matrix(3, -1.0)
    with pytest.raises(ValueError, match="n_ordered must be ≥ 1; got 0"):
        smoothing_matrix(0, 1.0)
    with pytest.raises(
        ValueError, match=r"n_ordered in \[1, n_bins\]; got shape \(3,\), n_ordered 4"
    ):
        smooth_ordered(np.zeros(3), 4, 1.0)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 20), w=BANDWIDTH, c=FINITE, extra=st.integers(0, 1))
def test_a_constant_profile_is_unchanged(n, w, c, extra):
    W = smoothing_matrix(n, w)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(W >= 0)
    values = np.full(n + extra, c)
    np.testing.assert_allclose(smooth_ordered(values, n, w), values, rtol=1e-12, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    values=hnp.arrays(np.float64, st.tuples(st.integers(2, 8), st.just(3)), elements=FINITE),
    w=BANDWIDTH,
)
def test_smoothing_commutes_with_the_class_projection_and_with_reversing_the_bins(values, w):
    n = values.shape[0]
    np.testing.assert_allclose(
        smooth_ordered(sum_zero(values), n, w), sum_zero(smooth_ordered(values, n, w)), atol=1e-9
    )
    np.testing.assert_allclose(
        smooth_ordered(values[::-1], n, w), smooth_ordered(values, n, w)[::-1], atol=1e-9
    )


def test_sure_without_smoothing_is_twice_the_noise_and_without_noise_picks_no_smoothing():
    g = np.array([3.0, -1.0, 4.0, 1.0])
    assert sure_risk(g, 4, 0.0, 2.5) == pytest.approx(2 * 2.5 * 4, rel=1e-12)
    W = smoothing_matrix(4, 1.0)
    expected = np.sum((W @ g - g) ** 2) + 2 * 2.5 * np.trace(W)
    assert sure_risk(g, 4, 1.0, 2.5) == pytest.approx(expected, rel=1e-12)
    assert sure_bandwidth(g, 4, (0.0, 1.0, 2.0), 0.0) == 0.0
    assert sure_bandwidth(g, 4, (0.0, 1.0, 2.0), 1e6) == 2.0  # noise swamps: widest
    assert sure_bandwidth(np.zeros(4), 4, (0.0, 1.0, 2.0), 1.0) == 2.0  # flat: widest


@pytest.mark.parametrize("classes", [0, 3])
def test_sure_is_unbiased_for_the_risk_of_the_smoothed_sums(classes):
    # E[SURE] = E‖W G̃ − G‖² + n tr(Σ), Σ a bin's noise covariance (softmax: on the
    # sum-zero plane, trace σ²(C − 1)); Monte Carlo over 4000 draws.
    rng = np.random.default_rng(7)
    n, sigma, w = 6, 2.0, 1.0
    shape = (n,) if classes == 0 else (n, classes)
    G = sum_zero(rng.normal(0, 3, shape)) if classes else rng.normal(0, 3, shape)
    e = rng.normal(0, sigma, (4000, *shape))
    if classes:
        e = sum_zero(e)
    trace = sigma**2 * ((classes - 1) if classes else 1)
    W = smoothing_matrix(n, w)
    sure = np.array([sure_risk(G + x, n, w, trace) for x in e])
    risk = np.array([np.sum((np.tensordot(W, G + x, 1) - G) ** 2) for x in e]) + n * trace
    assert sure.mean() == pytest.approx(risk.mean(), abs=4 * sure.std() / np.sqrt(len(e)))
