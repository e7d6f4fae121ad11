"""DP-EBM maths: public bins, per-bin sums, their sensitivity and clipping, Newton steps."""

import math

import numpy as np
import pytest

from fedpriv.data.schema import (
    BinaryColumn,
    CategoricalColumn,
    Missing,
    NumericColumn,
    Schema,
    Target,
)
from fedpriv.models.gam import (
    L2_SENSITIVITY,
    GAMModel,
    bin_matrix,
    bin_sums,
    box_terms,
    fine_histograms,
    intercept_sums,
    newton_bin_updates,
    quantile_cuts,
    schema_terms,
)
from fedpriv.models.trees import sigmoid

SCHEMA = Schema(
    name="toy",
    columns=(
        NumericColumn(name="age", lo=0, hi=100, missing=Missing.INDICATOR),
        CategoricalColumn(
            name="colour", categories=("red", "green", "blue"), missing=Missing.ERROR
        ),
        BinaryColumn(name="smoker", positive=("yes",), negative=("no",)),
        NumericColumn(name="bmi", lo=10, hi=60),
    ),
    target=Target(column="y", positive=("1",), labels=("0", "1")),
)


def _rows(rng, n):
    """Encoded rows of SCHEMA: [age, age:missing, red, green, blue, smoker, bmi]."""
    X = np.zeros((n, 7))
    X[:, 0] = rng.random(n)
    X[:, 1] = rng.random(n) < 0.1
    X[X[:, 1] == 1, 0] = 0.0  # a missing age is encoded at the low bound
    X[np.arange(n), 2 + rng.integers(0, 3, n)] = 1.0
    X[:, 5] = rng.random(n) < 0.3
    X[:, 6] = rng.random(n)
    return X


def test_schema_bins_are_public_and_lookups_match_them():
    terms = schema_terms(SCHEMA, bins=4)
    assert [terms.n_bins(k) for k in range(4)] == [4 + 1, 3, 2, 4]  # age has a missing bin
    X = np.array(
        [
            [0.0, 0, 1, 0, 0, 0, 0.1],  # age bin 0, red, no, bmi bin 0
            [0.26, 0, 0, 1, 0, 1, 0.5],  # age bin 1 (¼ ≤ x < ½), green, yes, bmi bin 2
            [0.0, 1, 0, 0, 1, 0, 1.0],  # missing age: bin 4; blue; bmi = 1 in the last bin
            [0.75, 0, 1, 0, 0, 1, 0.7499],  # a cut belongs to the bin above it
        ]
    )
    np.testing.assert_array_equal(
        bin_matrix(terms, np.ascontiguousarray(X.T)),
        [[0, 1, 4, 3], [0, 1, 2, 0], [0, 1, 0, 1], [0, 2, 3, 2]],
    )
    # Without a schema every feature is an equal-width numeric term on [0, 1].
    box = box_terms(2, bins=10)
    np.testing.assert_array_equal(
        bin_matrix(box, np.array([[0.0, 0.05, 0.1, 0.999, 1.0], [0.5] * 5])),
        [[0, 0, 1, 9, 9], [5] * 5],
    )


def test_intercept_from_a_quarter_hessian_is_the_log_odds_newton_step():
    y = np.array([1, 1, 1, 0.0])
    g, h = intercept_sums(y)
    assert (g, h) == (-1.0, 1.0)  # g = ½ − y, h = ¼ each
    # b = −G/H: one Newton step from 0 towards log(3) = 1.0986 lands at 4·(¾ − ½) = 1.
    assert -g / h == pytest.approx(1.0)
    np.testing.assert_array_equal(intercept_sums(np.array([7.0, -3.0])), [-0.5 + 0.5, 0.5])


def test_bin_sums_and_newton_updates():
    margin = np.array([0.0, np.log(3.0), -np.log(4.0), 0.0])  # p = ½, ¾, ⅕, ½
    y = np.array([0.0, 1.0, 0.0, 1.0])
    stats = bin_sums(margin, y, np.array([0, 0, 2, 1]), 3)
    # g = (.5, −.25, .2, −.5), h = (.25, .1875, .16, .25)
    np.testing.assert_allclose(stats, [0.25, -0.5, 0.2, 0.4375, 0.25, 0.16], atol=1e-15)
    step = newton_bin_updates(
        stats[:3], stats[3:], learning_rate=0.5, reg_lambda=1.0, max_update=10.0
    )
    np.testing.assert_allclose(step, -0.5 * stats[:3] / (stats[3:] + 1.0))
    # A negative noisy Σh is floored at 0; an empty bin's noise is clipped to the bound.
    big = newton_bin_updates(
        np.array([30.0, -1.0]),
        np.array([-5.0, -5.0]),
        learning_rate=1,
        reg_lambda=1,
        max_update=2,
    )
    np.testing.assert_array_equal(big, [-2.0, 1.0])


def test_corrupted_labels_and_margins_are_clipped_to_the_assumed_bounds():
    # A label outside {0, 1} would give |g| > 1; an infinite margin p(1 − p) = 0.
    stats = bin_sums(np.array([5.0, -800.0, 800.0]), np.array([-40.0, 9.0, 0.0]), np.zeros(3), 1)
    g, h = stats
    assert g == pytest.approx(1.0 - 1.0 + 1.0)  # clip(p + 40) = 1, clip(0 − 9) = −1, 1 − 0 = 1
    assert 0.0 <= h <= 0.25 * 3
    assert np.all(np.abs(intercept_sums(np.array([40.0, -40.0]))[0]) <= 1.0)


def test_one_record_moves_a_reply_by_at_most_the_sensitivity():
    rng = np.random.default_rng(0)
    terms = schema_terms(SCHEMA, bins=8)
    worst = 0.0
    for _ in range(200):
        X = _rows(rng, 30)
        y = (rng.random(30) < 0.5) * rng.choice([1.0, 7.0, -3.0], 30)  # some labels corrupted
        f = rng.normal(scale=rng.choice([0.1, 3.0, 50.0]), size=30)
        bins = bin_matrix(terms, np.ascontiguousarray(X.T))
        k = int(rng.integers(0, terms.m))
        nb = terms.n_bins(k)
        full = bin_sums(f, y, bins[k], nb)
        drop = bin_sums(f[1:], y[1:], bins[k, 1:], nb)  # neighbour: record 0 removed
        worst = max(worst, float(np.linalg.norm(full - drop)))
        # The sketch's histograms: one count per numeric column.
        h1 = fine_histograms(terms, np.ascontiguousarray(X.T))
        h0 = fine_histograms(terms, np.ascontiguousarray(X[1:].T))
        assert np.linalg.norm(h1 - h0) <= math.sqrt(2) + 1e-12
    assert worst <= L2_SENSITIVITY + 1e-12
    assert worst > 0.9  # the bound is nearly attained (|g| near 1, h near 0)


def test_quantile_cuts_are_post_processing_of_the_counts():
    h = np.zeros(256)
    h[:128] = 10.0  # all mass in the lower half: cuts at its quartiles' cell edges
    np.testing.assert_allclose(quantile_cuts(h, 4), [32 / 256, 64 / 256, 96 / 256])
    h = np.zeros(256)
    h[10] = 100.0
    h[200] = -3.0  # noise: a negative count counts as nothing
    np.testing.assert_allclose(quantile_cuts(h, 8), [11 / 256])  # empty bins merged
    np.testing.assert_allclose(quantile_cuts(-np.ones(256), 4), [0.25, 0.5, 0.75])


def test_model_round_trips_and_predicts_its_lookup():
    rng = np.random.default_rng(1)
    terms = schema_terms(SCHEMA, bins=5).with_cuts({3: np.array([0.2, 0.9])})
    shapes = tuple(rng.normal(size=terms.n_bins(k)) for k in range(terms.m))
    model = GAMModel(base=-0.4, terms=terms, shapes=shapes)
    X = _rows(rng, 50)
    bins = bin_matrix(terms, np.ascontiguousarray(X.T))
    expected = -0.4 + sum(shapes[k][bins[k]] for k in range(terms.m))
    np.testing.assert_allclose(model.decision_function(X), expected, atol=1e-12)
    np.testing.assert_array_equal(model.predict_proba(X), sigmoid(model.decision_function(X)))
    again = GAMModel.from_arrays(model.to_arrays())
    np.testing.assert_array_equal(again.decision_function(X), model.decision_function(X))
    with pytest.raises(ValueError, match="one shape per term"):
        GAMModel(base=0.0, terms=terms, shapes=shapes[:-1])


def test_residual_gain_is_the_gain_left_after_the_step_less_the_noise():
    from fedpriv.models.gam import residual_gain

    g, h = np.array([-30.0, 4.0, 0.0]), np.array([20.0, 10.0, 5.0])
    kw = dict(learning_rate=0.5, reg_lambda=10.0, max_update=2.0)
    step = newton_bin_updates(g, h, **kw)
    left = g + h * step  # computed directly
    assert residual_gain(g, h, step, reg_lambda=10.0) == pytest.approx(np.sum(left**2 / (h + 10.0)))
    # A full Newton step with λ → 0 leaves no gain; noise² is removed bin by bin.
    full = newton_bin_updates(g, h, learning_rate=1.0, reg_lambda=1e-12, max_update=99)
    assert residual_gain(g[:2], h[:2], full[:2], reg_lambda=1e-12) < 1e-9
    assert residual_gain(g, h, step, reg_lambda=10.0, noise_std=1e3) == 0.0
