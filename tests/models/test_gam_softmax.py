"""Softmax DP-EBM maths: the per-record norm bounds, their clipping, the intercept's sums."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedpriv.models.gam_softmax import (
    GRAD_L2,
    hess_l2,
    intercept_hessian,
    intercept_sensitivity,
    record_grads,
    softmax,
    softmax_bin_sums,
    softmax_intercept_sums,
    sum_zero,
    term_sensitivity,
)

logits = st.integers(3, 6).flatmap(
    lambda c: arrays(
        np.float64, (4, c), elements=st.floats(-60, 60, allow_nan=False, allow_infinity=False)
    )
)


@settings(max_examples=60, deadline=None)
@given(f=logits, labels=st.lists(st.integers(-2, 8), min_size=4, max_size=4))
def test_each_record_stays_within_the_derived_norms(f, labels):
    C = f.shape[1]
    g, h = record_grads(f, np.array(labels, dtype=np.float64), C)
    assert np.all(np.linalg.norm(g, axis=1) <= GRAD_L2 + 1e-12)
    assert np.all(h >= 0) and np.all(np.linalg.norm(h, axis=1) <= hess_l2(C) + 1e-12)
    # The bounds are properties of the simplex, not of the clipping: unclipped
    # g = p − e_y and h = p(1 − p) already satisfy them for a valid label.
    p = softmax(f)
    for i, y in enumerate(labels):
        if 0 <= y < C:
            raw = p[i] - np.eye(C)[y]
            assert np.linalg.norm(raw) <= math.sqrt(2) + 1e-12
            np.testing.assert_allclose(g[i], raw, atol=1e-12)
        np.testing.assert_allclose(h[i], p[i] * (1 - p[i]), atol=1e-12)


def test_the_bounds_are_nearly_attained_and_clipping_guards_them():
    # All mass on a wrong class: ‖g‖ → √2. Uniform p with C = 2 attains ½√(1 − 1/C).
    g, _ = record_grads(np.array([[50.0, 0.0, 0.0]]), np.array([1.0]), 3)
    assert np.linalg.norm(g) == pytest.approx(math.sqrt(2), abs=1e-12)
    assert hess_l2(2) == pytest.approx(math.sqrt(2) / 4)  # ‖(¼, ¼)‖
    _, h = record_grads(np.zeros((1, 3)), np.array([0.0]), 3)
    assert np.linalg.norm(h) == pytest.approx(math.sqrt(3) * 2 / 9)
    assert math.sqrt(3) * 2 / 9 < hess_l2(3)
    # A NaN margin contributes nothing rather than a NaN.
    g, h = record_grads(np.array([[np.nan, 0.0, 1.0]]), np.array([0.0]), 3)
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(h))
    assert term_sensitivity(3) == pytest.approx(math.sqrt(2 + (1 - 1 / 3) / 4))


def test_one_record_moves_a_term_reply_by_at_most_the_sensitivity():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(100):
        C = int(rng.integers(3, 6))
        f = rng.normal(scale=rng.choice([0.1, 5.0, 60.0]), size=(20, C))
        y = rng.integers(-1, C + 2, 20).astype(np.float64)  # some labels not a class
        bins = rng.integers(0, 4, 20)
        full = softmax_bin_sums(f, y, bins, 4, C)
        drop = softmax_bin_sums(f[1:], y[1:], bins[1:], 4, C)
        worst = max(worst, float(np.linalg.norm(full - drop)))
    assert worst <= term_sensitivity(5) + 1e-12
    assert worst > 1.3  # close to √2: a confident wrong class


def test_intercept_sums_at_margin_zero():
    y = np.array([0, 0, 1, 2, 2, 2, 7.0])  # 7: not a class, counted in no e_y
    out = softmax_intercept_sums(y, 3)
    np.testing.assert_allclose(out[:3], [7 / 3 - 2, 7 / 3 - 1, 7 / 3 - 3])
    assert out[3] == pytest.approx(7 * 2 / 9) and intercept_hessian(3) == pytest.approx(2 / 9)
    # One record moves the reply by at most the sensitivity (here a valid label).
    diff = softmax_intercept_sums(y, 3) - softmax_intercept_sums(y[1:], 3)
    assert np.linalg.norm(diff) == pytest.approx(intercept_sensitivity(3))
    np.testing.assert_allclose(sum_zero(np.array([[1.0, 2.0, 6.0]])), [[-2.0, -1.0, 3.0]])
