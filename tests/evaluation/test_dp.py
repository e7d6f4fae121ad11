"""DP evaluation maths: histograms, binned metrics and their bounds, coverage on Adult."""

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from fedpriv.data import load_adult
from fedpriv.evaluation import binary_metrics
from fedpriv.evaluation.dp import (
    METRICS,
    bin_index,
    binned_accuracy,
    binned_auc,
    binned_brier,
    brier_bound,
    estimate_metrics,
    score_histogram,
)
from fedpriv.privacy import GaussianMechanism
from tests.keys import key_for

B = 20
BINNED = {"auc": binned_auc, "brier": binned_brier, "accuracy": binned_accuracy}


def _exact(y, s):
    m = binary_metrics(y, s)
    return {k: m[k] for k in METRICS}


@pytest.fixture(scope="module")
def adult_scores():
    """Held-out Adult scores of a logistic regression fitted on 4,000 training rows (~0.1 s)."""
    ds = load_adult()
    train = ds.split.train[:4000]
    clf = LogisticRegression(max_iter=300).fit(ds.X[train], ds.y[train])
    test = ds.split.test
    return clf.predict_proba(ds.X[test])[:, 1], ds.y[test]


def test_bins_put_exactly_the_scores_at_or_above_one_half_in_the_upper_half():
    below = np.nextafter(0.5, 0.0)
    s = np.array([0.0, 0.05, below, 0.5, np.nextafter(0.5, 1.0), 1.0, -3.0, 7.0, np.inf, np.nan])
    np.testing.assert_array_equal(bin_index(s, B), [0, 1, 9, 10, 10, 19, 0, 19, 19, -1])
    rng = np.random.default_rng(0)
    s = np.concatenate([rng.random(500), np.full(50, 0.5), np.full(50, below)])
    y = rng.integers(0, 2, s.size)
    h = score_histogram(s, y, B)
    assert float(binned_accuracy(h)[0]) == pytest.approx(((s >= 0.5) == y).mean(), abs=1e-15)


def test_one_record_moves_exactly_one_count_and_invalid_ones_none():
    rng = np.random.default_rng(1)
    s, y = rng.random(300), rng.integers(0, 2, 300)
    h = score_histogram(s, y, B)
    for extra_s, extra_y in [(0.0, 0), (0.5, 1), (1.0, 1), (0.37, 0), (2.0, 0)]:
        h2 = score_histogram(np.append(s, extra_s), np.append(y, extra_y), B)
        diff = h2 - h
        assert np.abs(diff).sum() == 1.0 and diff.max() == 1.0  # L1 = L2 = 1
    for bad_s, bad_y in [(0.3, 2), (0.3, -1), (0.3, 0.5), (0.3, np.nan), (np.nan, 1)]:
        s2, y2 = np.append(s, bad_s), np.append(y.astype(float), bad_y)
        np.testing.assert_array_equal(score_histogram(s2, y2, B), h)


def test_scores_at_bin_centres_give_the_exact_metrics():
    # No within-bin spread: the binned formulas must equal the exact metrics (ties ½).
    rng = np.random.default_rng(2)
    s = (rng.integers(0, B, 2000) + 0.5) / B
    y = (rng.random(2000) < s).astype(int)
    h = score_histogram(s, y, B)
    exact = _exact(y, s)
    for name, binned in BINNED.items():
        assert float(binned(h)[0]) == pytest.approx(exact[name], abs=1e-12), name


@pytest.mark.parametrize("seed", range(5))
def test_binning_bounds_hold_and_the_brier_one_is_at_most_one_over_b(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    y = rng.integers(0, 2, n)
    s = np.clip(rng.normal(0.35 + 0.3 * y, 0.12 + 0.1 * seed), 0, 1)  # varied overlap
    h = score_histogram(s, y, B)
    exact = _exact(y, s)
    for name, binned in BINNED.items():
        value, bound = (float(v) for v in binned(h))
        assert abs(exact[name] - value) <= bound + 1e-12, name
    assert float(binned_brier(h)[1]) <= brier_bound(B) == 1 / B - 1 / (4 * B * B)


def test_binning_bounds_are_attained():
    # AUC: all positives just above all negatives inside one bin: exact 1, binned ½, W ½.
    s = np.array([0.401, 0.402, 0.403, 0.404])
    y = np.array([0, 0, 1, 1])
    h = score_histogram(s, y, B)
    assert _exact(y, s)["auc"] == 1.0
    assert tuple(float(v) for v in binned_auc(h)) == (0.5, 0.5)
    # Brier: label 0 scored 1 (top of the last bin): the gap is exactly 1/B − 1/(4B²).
    h = score_histogram(np.array([1.0]), np.array([0]), B)
    value, bound = (float(v) for v in binned_brier(h))
    assert 1.0 - value == pytest.approx(brier_bound(B), abs=1e-15)
    assert bound == pytest.approx(brier_bound(B), abs=1e-15)


def test_undefined_metrics_are_reported_as_one_half_plus_or_minus_one_half():
    only_negatives = np.zeros(2 * B)
    only_negatives[:3] = 10.0
    for h, names in [(np.zeros(2 * B), METRICS), (only_negatives, ("auc",))]:
        est = estimate_metrics(h, std=2.0, replicas=200)
        for name in names:
            m = getattr(est, name)
            assert (m.value, m.interval) == (0.5, (0.0, 1.0)), name


def test_without_noise_the_estimate_is_the_binned_metric_with_its_binning_bound(adult_scores):
    s, y = adult_scores
    h = score_histogram(s, y, B)
    est = estimate_metrics(h, std=0.0)
    for name, binned in BINNED.items():
        m = getattr(est, name)
        value, bound = (float(v) for v in binned(h))
        assert (m.value, m.binning_error, m.noise_error) == (value, bound, 0.0)
        assert m.covers(_exact(y, s)[name])


def test_stated_errors_cover_the_exact_metrics_over_200_keys_on_adult(adult_scores):
    """ε_eval = 1, δ = 1e-5 (σ ≈ 3.73) on Adult's 16,281 test rows, 200 secret keys.

    Coverage of the exact metric by value ± error, and of the binned metric by
    value ± noise_error alone (the bootstrap's part), must be ≥ 0.95 minus 3
    binomial standard deviations; half the noise error must cover clearly less
    (else the noise error would be inflated); the errors must be useful.
    Measured over 400 keys (AUC/Brier/accuracy): exact coverage 1.00/1.00/0.965, noise
    0.94/0.95/0.965, half 0.67/0.65/0.67; mean errors 0.018/0.013/0.0019. (Heart's 252
    test rows at ε = 1: exact coverage 0.993/0.993/0.965, errors 0.17/0.09/0.12.)
    """
    s, y = adult_scores
    h = score_histogram(s, y, B)
    exact = _exact(y, s)
    binned = {name: float(f(h)[0]) for name, f in BINNED.items()}
    mech = GaussianMechanism.for_budget(epsilon=1.0, delta=1e-5, l2_sensitivity=1.0)
    n_keys = 200
    hits = {name: np.zeros((n_keys, 3), dtype=bool) for name in METRICS}
    worst = dict.fromkeys(METRICS, 0.0)
    for i in range(n_keys):
        noisy = mech.apply(h, rng=key_for(i).generator("evaluation-coverage"))
        est = estimate_metrics(noisy, std=mech.std, alpha=0.05)
        for name in METRICS:
            m = getattr(est, name)
            gap = abs(m.value - binned[name])
            hits[name][i] = [m.covers(exact[name]), gap <= m.noise_error, gap <= m.noise_error / 2]
            worst[name] = max(worst[name], m.error)
    floor = 0.95 - 3 * math.sqrt(0.95 * 0.05 / n_keys)  # ≈ 0.904
    for name in METRICS:
        covered, noise_covered, half_covered = hits[name].mean(axis=0)
        assert covered >= floor, (name, covered)
        assert noise_covered >= floor, (name, noise_covered)
        assert half_covered <= 0.9, (name, half_covered)
    # The AUC's stated error covers the exact AUC for at least 95 % of the keys outright.
    assert hits["auc"][:, 0].mean() >= 0.95, hits["auc"][:, 0].mean()
    assert worst["auc"] < 0.1 and worst["brier"] < 0.05 and worst["accuracy"] < 0.01, worst


def test_negative_noisy_counts_are_kept_unless_clipping_is_asked_and_values_stay_in_range():
    h = np.zeros(2 * B)
    # Noisy counts of a sparse histogram; right: negatives below ½ (bin 2), positives above.
    h[[2, 15, B + 3, B + 18]] = [5.0, 4.0, -3.0, 6.0]
    raw = estimate_metrics(h, std=1.0, replicas=200)
    clipped = estimate_metrics(h, std=1.0, replicas=200, clip=True)
    np.testing.assert_array_equal(raw.histogram, h)
    np.testing.assert_array_equal(clipped.histogram, np.maximum(h, 0.0))
    assert raw.accuracy.value == pytest.approx(11 / 12, abs=1e-15)  # N = 12
    assert clipped.accuracy.value == pytest.approx(11 / 15, abs=1e-15)  # N = 15
    h[B // 2 + 5] = -4.0  # right 11 of N = 4: the ratio 2.75 is reported as 1
    over = estimate_metrics(h, std=1.0, replicas=200)
    assert over.accuracy.value == 1.0
    for est in (raw, clipped, over):
        for name in METRICS:
            m = getattr(est, name)
            assert 0.0 <= m.value <= 1.0 and m.error >= 0.0
