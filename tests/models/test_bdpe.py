"""bdpe_α's maths: the M_α risk, its sensitivity (brute force), links, weights, sums."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models.bdpe import (
    bayes_risk,
    bin_centres,
    calibrated_alpha,
    candidate_thresholds,
    example_weights,
    feature_bins,
    inverse_link,
    level_sums,
    link,
    max_platt_slope,
    node_risk,
    platt_fit,
    score_sensitivity,
    split_scores,
    surrogate,
)

THRESHOLDS = np.array([0.5, 1.5])  # one feature with values {0, 1, 2}: two candidates


def _scores(x, y, w, alpha):
    """Scores of the two candidates of one node holding rows (x, y, w)."""
    x, y, w = (np.asarray(a, dtype=np.float64) for a in (x, y, w))
    total = np.array([[np.sum(w * (y == 1)), np.sum(w * (y == 0))]])
    left = np.array(
        [[[np.sum(w * (y == 1) * (x <= t)), np.sum(w * (y == 0) * (x <= t))] for t in THRESHOLDS]]
    )
    return split_scores(left, total, alpha)[0], left[0], total[0]


rows = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 1), st.floats(0.0, 1.0, allow_nan=False)),
    min_size=0,
    max_size=7,
)


@settings(max_examples=400, deadline=None)
@given(rows, st.tuples(st.integers(0, 2), st.integers(0, 1), st.floats(0.0, 1.0)),
       st.floats(0.0, 1.0))  # fmt: skip
def test_one_record_moves_no_score_by_more_than_the_sensitivity(data, extra, alpha):
    # Brute force over neighbouring samples D, D' = D + one record (weights in [0, 1]):
    # every candidate's score moves by at most Δ_α(m), m = |D'| the public bound.
    x, y, w = (list(c) for c in zip(*data, strict=True)) if data else ([], [], [])
    s0, left0, tot0 = _scores(x, y, w, alpha)
    s1, left1, tot1 = _scores([*x, extra[0]], [*y, extra[1]], [*w, extra[2]], alpha)
    bound = score_sensitivity(alpha, len(data) + 1)
    assert np.all(np.abs(s1 - s0) <= bound + 1e-9)

    # Monotone: every risk term only rises when a record is added, so −P(left) − P(right)
    # (the score up to the node's own risk, common to all candidates) never rises.
    def risk_sum(left, tot):
        right = tot - left
        return node_risk(left[:, 0], left[:, 1], alpha) + node_risk(right[:, 0], right[:, 1], alpha)

    assert np.all(risk_sum(left1, tot1) >= risk_sum(left0, tot0) - 1e-9)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("m", [1, 4, 100])
def test_the_sensitivity_is_attained(alpha, m):
    # m weight-1 records of class 0 at x = 0, then one of class 1 at x = 2: alone in the
    # right child of both candidates, it raises the node's risk by 2α√m + 2(1 − α).
    s0, *_ = _scores([0] * m, [0] * m, [1.0] * m, alpha)
    s1, *_ = _scores([0] * m + [2], [0] * m + [1], [1.0] * (m + 1), alpha)
    assert np.abs(s1 - s0).max() == pytest.approx(score_sensitivity(alpha, m), rel=1e-12)


def test_a_too_small_sensitivity_is_refuted_by_the_same_brute_force():
    # Friedman & Schuster's Gini bound (2) taken for Matsushita (α = 1): the tight
    # neighbours above move a score by 2√m.
    m = 25
    s0, *_ = _scores([0] * m, [0] * m, [1.0] * m, 1.0)
    s1, *_ = _scores([0] * m + [2], [0] * m + [1], [1.0] * (m + 1), 1.0)
    assert np.abs(s1 - s0).max() == pytest.approx(10.0) and 10.0 > 2.0


def test_bayes_risk_is_the_convex_combination_of_matsushita_and_01():
    u = np.linspace(0, 1, 101)
    mat, zero_one = 2 * np.sqrt(u * (1 - u)), 2 * np.minimum(u, 1 - u)
    np.testing.assert_allclose(bayes_risk(u, 0.3), 0.3 * mat + 0.7 * zero_one)
    assert bayes_risk(0.5, 0.7) == pytest.approx(1.0)
    np.testing.assert_allclose(node_risk(3.0, 1.0, 0.3), 4.0 * bayes_risk(0.75, 0.3))


@settings(max_examples=200, deadline=None)
@given(st.floats(0.001, 0.999), st.floats(0.05, 1.0))
def test_inverse_link_inverts_the_canonical_link(u, alpha):
    if abs(u - 0.5) < 1e-6:
        return  # ψ_α jumps at ½ (α < 1): its inverse is ½ over the whole jump
    assert inverse_link(link(u, alpha), alpha) == pytest.approx(u, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.floats(-20, 20), st.floats(0.05, 1.0))
def test_weights_are_minus_the_surrogate_derivative(z, alpha):
    # w = −F_α′(y±H): central finite difference of the conjugate F_α(z) = (−L_α)*(−z).
    h = 1e-7  # small: at the kink |z| = 2(1 − α) w's slope jumps by ~1/(4α)
    derivative = (surrogate(z + h, alpha) - surrogate(z - h, alpha)) / (2 * h)
    w = example_weights(np.array([z]), np.array([1]), alpha)[0]  # y = 1: y±H = z
    assert w == pytest.approx(-derivative, abs=1e-5)


def test_matsushita_surrogate_and_weights_in_closed_form():
    z = np.linspace(-6, 6, 13)
    np.testing.assert_allclose(surrogate(z, 1.0), 0.5 * (np.sqrt(4 + z * z) - z), atol=1e-12)
    assert example_weights(np.zeros(2), np.array([0, 1]), 0.4) == pytest.approx([0.5, 0.5])
    # A well-classified record weighs less than a misclassified one.
    w = example_weights(np.array([3.0, -3.0]), np.array([1, 1]), 1.0)
    assert w[0] < 0.5 < w[1]


def test_level_sums_match_a_direct_count():
    rng = np.random.default_rng(3)
    n, numeric = 500, np.array([True, False, True])
    X = rng.random((n, 3))
    X[:, 1] = rng.random(n) < 0.3
    y = rng.integers(-1, 2, size=n)  # −1: not a class, counted nowhere
    w = rng.random(n) * 1.5  # above 1: clipped where the sums are computed
    node = rng.integers(0, 4, size=n)
    thresholds = candidate_thresholds(numeric, 4)
    left, total = level_sums(feature_bins(X.T.copy(), thresholds), thresholds, node, 4, y, w)
    wc = np.clip(w, 0, 1)
    g = 0
    for j, ts in enumerate(thresholds):
        for t in ts:
            for k in range(4):
                for c, lab in enumerate((1, 0)):
                    sel = (node == k) & (y == lab) & (X[:, j] <= t)
                    assert left[k, g, c] == pytest.approx(wc[sel].sum(), abs=1e-9)
            g += 1
    for k in range(4):
        assert total[k, 0] == pytest.approx(wc[(node == k) & (y == 1)].sum())
        assert total[k, 1] == pytest.approx(wc[(node == k) & (y == 0)].sum())


def test_candidates_are_public_levels_inside_the_box():
    t = candidate_thresholds(np.array([True, False]), 10)
    np.testing.assert_allclose(t[0], np.arange(1, 11) / 11)
    np.testing.assert_array_equal(t[1], [0.5])


@settings(max_examples=100, deadline=None)
@given(st.floats(1e-3, 50), st.floats(1.0, 1e6), st.floats(0, 5), st.floats(0.05, 1))
def test_calibrated_alpha_is_k_monotonic_and_in_range(eps, weight, k, root):
    a = calibrated_alpha(depth=6, total_weight=weight, epsilon_level=eps, n_candidates=50,
                         max_records=10_000, edge=0.1, k_monotonic=k, alpha_root=root,
                         monotone=True)  # fmt: skip
    assert np.all((a >= 0) & (a <= root + 1e-12))
    for i in range(1, a.size):
        assert a[i] <= a[i - 1] * math.exp(k * 2.0**-i * (1 - a[i - 1])) + 1e-12


def test_calibration_spends_matsushita_where_the_mechanism_can_afford_it():
    common = dict(depth=4, n_candidates=100, max_records=40_000, edge=0.1, k_monotonic=1.0,
                  alpha_root=1.0, monotone=True)  # fmt: skip
    rich = calibrated_alpha(total_weight=20_000, epsilon_level=10.0, **common)
    poor = calibrated_alpha(total_weight=20_000, epsilon_level=0.001, **common)
    assert rich[0] == 1.0 and np.all(np.diff(rich) <= 0)  # shrinks with the node weight
    np.testing.assert_array_equal(poor, 0.0)  # 0/1's sensitivity 2 only


def test_platt_fit_recovers_a_logistic_map_and_caps_a_separable_one():
    rng = np.random.default_rng(0)
    edges = np.linspace(-3, 3, 25)
    H = rng.normal(0, 1, 20_000)
    y = rng.random(H.size) < 1 / (1 + np.exp(-(2 * H - 1)))
    b = np.searchsorted(edges, H)
    pos = np.bincount(b, weights=y, minlength=26)
    neg = np.bincount(b, weights=~y, minlength=26)
    a, c = platt_fit(pos, neg, bin_centres(edges))
    assert abs(a - 2) < 0.15 and abs(c + 1) < 0.1
    # Counts that look separable (noise clipped at 0) would send a to infinity.
    sep_pos, sep_neg = (
        np.where(np.arange(26) >= 13, 50.0, 0.0),
        np.where(np.arange(26) < 13, 50.0, 0.0),
    )
    a, _ = platt_fit(sep_pos, sep_neg, bin_centres(edges), max_slope=max_platt_slope(edges))
    assert a == pytest.approx(10 / 3)
