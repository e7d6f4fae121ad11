"""The Brier-optimal affine recalibration: its per-record bound, its fit, its map."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models import recalibration as R


def _brier(P, codes):
    Q = R.as_class_probabilities(P)
    E = np.eye(Q.shape[1])[codes]
    return float(((Q - E) ** 2).sum(axis=1).mean())


def _probabilities(rng, n, classes, spread):
    if classes == 2:
        return 1.0 / (1.0 + np.exp(-spread * rng.normal(size=n)))
    f = spread * rng.normal(size=(n, classes))
    e = np.exp(f - f.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(
    classes=st.sampled_from([2, 3, 6]),
    spread=st.floats(0.0, 40.0),
    seed=st.integers(0, 2**31 - 1),
    hostile=st.booleans(),
)
def test_one_record_moves_a_reply_by_at_most_the_sensitivity(classes, spread, seed, hostile):
    rng = np.random.default_rng(seed)
    P = _probabilities(rng, 5, classes, spread)
    codes = rng.integers(0, classes, size=5)
    if hostile:  # whatever the model or the labels hold, the clip holds
        P = np.array(P, dtype=float)
        P.flat[0] = rng.choice([np.nan, -4.0, 9.0])
        codes[0] = rng.choice([-1, classes, 10**6])
    full = R.record_sums(P, codes)
    without = R.record_sums(P[1:], codes[1:])
    assert full.shape == (R.reply_length(classes),)
    assert np.linalg.norm(full - without) <= R.SENSITIVITY * (1 + 1e-12)


def test_the_bound_is_reached_by_a_confident_right_prediction():
    # p = e_y: ‖[e | p | ⟨p, e⟩ | ‖p‖²]‖² = 1 + 1 + 1 + 1 = 4, so 2 is tight.
    assert np.linalg.norm(R.record_sums(np.array([1.0]), np.array([1]))) == pytest.approx(2.0)


@pytest.mark.parametrize("classes", [2, 4])
def test_exact_sums_give_the_least_squares_slope(classes):
    rng = np.random.default_rng(0)
    n = 4000
    truth = _probabilities(rng, n, classes, 1.0)
    Q = R.as_class_probabilities(truth)
    codes = np.array([rng.choice(classes, p=q) for q in Q])
    overdispersed = _probabilities(np.random.default_rng(0), n, classes, 3.0)  # same draws, ×3
    fitted = R.fit(R.record_sums(overdispersed, codes), n)
    # Independent computation: ordinary least squares of e − ȳ on p − p̄, pooled over classes.
    P = R.as_class_probabilities(overdispersed)
    E = np.eye(classes)[codes]
    x, t = (P - P.mean(axis=0)).ravel(), (E - E.mean(axis=0)).ravel()
    assert fitted.slope == pytest.approx(float(x @ t / (x @ x)), rel=1e-9)
    assert 0 < fitted.slope < 1  # the spread is shrunk
    np.testing.assert_allclose(fitted.rates, E.mean(axis=0), atol=1e-9)
    # In sample it beats both the model and the constant base-rate predictor.
    after = _brier(fitted.apply(overdispersed), codes)
    assert after < _brier(overdispersed, codes)
    assert after < _brier(np.tile(E.mean(axis=0), (n, 1)), codes)


def test_the_map_keeps_the_ranking_the_range_and_the_simplex():
    rng = np.random.default_rng(1)
    p = rng.random(500)
    m = R.LinearRecalibration(0.3, np.array([0.8, 0.2]), np.array([0.6, 0.4]))
    q = m.apply(p)
    assert np.all(np.diff(q[np.argsort(p)]) >= 0) and q.min() >= 0 and q.max() <= 1
    P = _probabilities(rng, 300, 3, 2.0)
    Q = R.LinearRecalibration(0.5, np.array([0.5, 0.3, 0.2]), P.mean(axis=0)).apply(P)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0)
    for c in range(3):  # each one-vs-rest ranking is unchanged
        order = np.argsort(P[:, c])
        assert np.all(np.diff(Q[order, c]) >= -1e-12)


def test_with_noisy_sums_a_model_without_signal_falls_back_to_about_the_base_rate():
    rng = np.random.default_rng(2)
    n = 3000
    P = _probabilities(rng, n, 2, 2.0)  # spread out, but unrelated to the labels
    codes = (rng.random(n) < 0.3).astype(int)
    exact, sigma = R.record_sums(P, codes), 100.0
    base = _brier(np.full(n, codes.mean()), codes)
    after = [
        _brier(R.fit(exact + rng.normal(0.0, sigma, exact.size), n, sigma).apply(P), codes)
        for _ in range(200)
    ]
    # Without recalibration the model is far worse than the base rate (0.69 against
    # 0.42, Brier summed over both classes); the map, fitted from sums with noise
    # std 100, is within 0.01 of it on average (measured 0.422).
    assert _brier(P, codes) > base + 0.1
    assert np.mean(after) < base + 0.01


def test_the_slope_stays_in_its_public_range():
    n = 100
    # A release claiming a huge covariance cannot stretch the model past MAX_SLOPE
    # or past the simplex bound min ȳ/p̄.
    hostile = np.array([50.0, 50.0, 50.0, 50.0, 1e6, 0.0])
    m = R.fit(hostile, n)
    assert R.MIN_SLOPE <= m.slope <= R.MAX_SLOPE
    assert m.slope <= np.min(m.rates / m.mean) + 1e-12
    assert R.fit(np.array([50.0, 50.0, 50.0, 50.0, -1e6, 0.0]), n).slope == R.MIN_SLOPE


def test_round_trip_and_validation():
    m = R.LinearRecalibration(0.4, np.array([0.7, 0.2, 0.1]), np.array([0.6, 0.3, 0.1]))
    back = R.LinearRecalibration.from_array(m.to_array())
    assert back.slope == m.slope and back.n_classes == 3
    np.testing.assert_array_equal(back.rates, m.rates)
    with pytest.raises(ValueError, match="slope must lie in"):
        R.LinearRecalibration(0.0, m.rates, m.mean)
    with pytest.raises(ValueError, match="rates must be class rates"):
        R.LinearRecalibration(0.5, np.array([0.7, 0.7]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="2C \\+ 2 floats"):
        R.fit(np.zeros(5), 10)
    with pytest.raises(ValueError, match="labels"):
        R.record_sums(np.array([0.5, 0.5]), np.array([1]))


def test_the_covariance_penalty_takes_the_models_own_labels_out_of_the_slope():
    # A model that memorised its rows (a leaf per record: p = e) looks perfectly
    # calibrated in sample; with dof = N degrees of freedom the whole covariance is
    # optimism (Efron 2004, eq. 2.11) and the slope falls to its floor.
    rng = np.random.default_rng(5)
    n = 2000
    codes = (rng.random(n) < 0.3).astype(int)
    memorised = codes.astype(float)
    sums = R.record_sums(memorised, codes)
    assert R.fit(sums, n).slope == pytest.approx(1.0)
    assert R.fit(sums, n, dof=n).slope == R.MIN_SLOPE
    # In between, the covariance drops by Σ_c ȳ_c(1 − ȳ_c)·dof/N exactly.
    P = _probabilities(rng, n, 2, 1.0)
    codes = (rng.random(n) < P).astype(int)  # calibrated: the slope is near 1, unclipped
    sums = R.record_sums(P, codes)
    a, b = R.fit(sums, n), R.fit(sums, n, dof=50.0)
    assert R.MIN_SLOPE < b.slope < a.slope < 1.5
    rates = a.rates
    var = sums[5] / n - float(a.mean @ a.mean)
    assert (a.slope - b.slope) * var == pytest.approx(float(rates @ (1 - rates)) * 50.0 / n)
    with pytest.raises(ValueError, match="dof ≥ 0"):
        R.fit(sums, n, dof=-1.0)


def _overconfident(n, base, seed):
    """A model that ranks well (AUC 0.79) but whose logits are spread 4 times too wide,
    as DP-SGD's noisy MLP (mean prediction 0.27, sd 0.37), on labels at ``base``;
    returns (p, codes)."""
    rng = np.random.default_rng(seed)
    prior = np.log(base / (1 - base))
    logit = prior - 0.6 + 1.3 * rng.normal(size=n)
    codes = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    return 1.0 / (1.0 + np.exp(-(4.0 * (logit - prior) - 1.0))), codes


def _bound_divided_fit(s, bound):
    """The estimator before the count was read from the release: every moment divided
    by the public bound, the rates renormalised on the simplex (the twin below)."""
    rates = R._on_simplex(s[:2] / bound)
    mean = R._on_simplex(s[2:4] / bound)
    cov = s[4] / bound - float(rates @ mean)
    var = max(s[5] / bound - float(mean @ mean), 0.0)
    return float(np.clip(cov / var if var > 0 else 0.0, R.MIN_SLOPE, np.min(rates / mean)))


def test_the_count_is_read_from_the_release_so_a_loose_bound_cannot_collapse_the_map():
    # A DP-SGD MLP on 2,893 rows was fitted with N = 6,585, the upper bound of a released
    # count: S_pe/N − ⟨ȳ, p̄⟩ < 0 for any model, so the slope sat at its floor and every
    # prediction was the base rate. Each half of [Σe | Σp] sums to the count itself.
    n, bound = 2893, 6585
    P, codes = _overconfident(n, 0.113, 0)
    sums = R.record_sums(P, codes)
    assert R.released_count(sums) == (pytest.approx(n), 0.0)
    exact = R.fit(sums, n)
    loose = R.fit(sums, bound)
    assert loose.slope == pytest.approx(exact.slope, rel=1e-12)
    assert 0.15 < exact.slope < 0.5 and not exact.degenerate  # measured 0.252
    # The twin: the bound as the count collapses the same release to a constant.
    assert _bound_divided_fit(sums, bound) == R.MIN_SLOPE
    assert _bound_divided_fit(sums, n) == pytest.approx(exact.slope, rel=1e-12)
    # A count above the public bound (noise) is read as the bound.
    inflated = sums.copy()
    inflated[:4] *= 1.5
    assert R.released_count(inflated)[0] == pytest.approx(1.5 * n)
    assert R.fit(inflated, n).slope != R.fit(inflated, 2 * n).slope


def test_with_noisy_sums_of_a_model_that_ranks_well_the_map_is_not_a_constant():
    # At the noise of DP-SGD's default share (σ ≈ 40 per released sum, ε = 2) on 2,893
    # rows: the slope is above its floor in nearly every draw, and the recalibrated
    # model beats the base rate on fresh rows (Brier summed over both classes).
    n, sigma = 2893, 40.0
    P, codes = _overconfident(n, 0.113, 1)
    fresh_P, fresh = _overconfident(20_000, 0.113, 2)
    exact = R.record_sums(P, codes)
    base = _brier(np.full(fresh.size, codes.mean()), fresh)
    rng = np.random.default_rng(3)
    fits = [R.fit(exact + rng.normal(0.0, sigma, exact.size), 2.3 * n, sigma) for _ in range(200)]
    briers = np.array([_brier(m.apply(fresh_P), fresh) for m in fits])
    assert np.mean([m.degenerate for m in fits]) < 0.02  # measured: none of 200
    assert np.median([m.slope for m in fits]) > 0.15  # measured 0.245 (exact sums: 0.271)
    # Measured: mean 0.1720 against the base rate's 0.1930 (the raw model's 0.3617),
    # at or below the base rate in every draw.
    assert np.mean(briers) < base - 0.01 and np.mean(briers <= base) > 0.95
    assert _brier(fresh_P, fresh) > base + 0.1
    # The twin: dividing by the bound, as before, floors every one of these fits.
    noisy = [exact + rng.normal(0.0, sigma, exact.size) for _ in range(50)]
    assert all(_bound_divided_fit(s, 2.3 * n) == R.MIN_SLOPE for s in noisy)


def test_a_release_that_shows_nothing_is_flagged_degenerate():
    n = 1000
    flat = np.array([800.0, 200.0, 700.0, 300.0, 0.8 * 700 + 0.2 * 300 - 50.0, 600.0])
    m = R.fit(flat, n)  # a negative covariance: the slope sits at its floor
    assert m.slope == R.MIN_SLOPE and m.degenerate
    assert not R.LinearRecalibration(0.01, m.rates, m.mean).degenerate
