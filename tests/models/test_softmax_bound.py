"""The multiclass boosting kernel keeps every record's (g, h) inside the assumed sensitivity."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models._kernels import SOFTMAX_GRAD_NORM, SOFTMAX_HESS_NORM, softmax_grad_hess

TOL = 1e-12


def _gh(margin, y):
    margin = np.asarray(margin, dtype=np.float64)
    g, h = np.empty(margin.size), np.empty(margin.size)
    softmax_grad_hess(margin, float(y), g, h)
    return g, h


@settings(max_examples=150, deadline=None)
@given(
    logits=st.lists(st.floats(-50, 50), min_size=3, max_size=12),
    label=st.integers(0, 11),
)
def test_per_record_vectors_never_exceed_the_bound(logits, label):
    y = label % len(logits)
    g, h = _gh(logits, y)
    assert np.linalg.norm(g) <= SOFTMAX_GRAD_NORM + TOL
    assert np.linalg.norm(h) <= SOFTMAX_HESS_NORM + TOL
    assert (h >= 0).all() and (h <= 0.25).all()
    # Inside the bound the clip is the identity: g = p − e_y, h = p(1 − p).
    p = np.exp(np.asarray(logits) - max(logits))
    p /= p.sum()
    np.testing.assert_allclose(g, p - np.eye(len(logits))[y], atol=1e-12)
    np.testing.assert_allclose(h, p * (1 - p), atol=1e-12)


def test_the_bounds_are_attained_or_nearly():
    assert math.isclose(SOFTMAX_HESS_NORM**2, 4 / 27) and math.isclose(SOFTMAX_GRAD_NORM**2, 2)
    # ‖h‖² = 4/27 exactly at three classes with p = 1/3 each (and, for C > 3, in the limit).
    _, h = _gh([0.0, 0.0, 0.0], 0)
    assert math.isclose(np.linalg.norm(h), SOFTMAX_HESS_NORM, rel_tol=1e-12)
    _, h = _gh([0.0, 0.0, 0.0, -40.0, -40.0], 0)
    assert np.linalg.norm(h) > SOFTMAX_HESS_NORM * (1 - 1e-9)
    # ‖g‖² → 2 as p_y → 0 with the mass on one other class.
    g, _ = _gh([-20.0, 20.0, -20.0], 0)
    assert np.linalg.norm(g) > SOFTMAX_GRAD_NORM * (1 - 1e-9)


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6)),
        min_size=3,
        max_size=6,
    ),
    y=st.one_of(st.floats(allow_nan=True), st.integers(-3, 8).map(float)),
)
def test_hostile_logits_and_labels_stay_inside_the_bound(logits, y):
    g, h = _gh(logits, y)
    assert np.isfinite(g).all() and np.isfinite(h).all()
    assert np.linalg.norm(g) <= SOFTMAX_GRAD_NORM + TOL
    assert np.linalg.norm(h) <= SOFTMAX_HESS_NORM + TOL
