"""The DP-SGD output-bias recalibration: its per-record bound, its shift, its effect."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import ModelKind, NetworkSpec
from fedpriv.models.trees import sigmoid


@settings(max_examples=40, deadline=None)
@given(
    classes=st.sampled_from([2, 3, 5]),
    scale=st.floats(0.0, 30.0),
    seed=st.integers(0, 2**31 - 1),
    hostile=st.booleans(),
)
def test_one_record_moves_a_reply_by_at_most_the_sensitivity(classes, scale, seed, hostile):
    rng = np.random.default_rng(seed)
    spec = NetworkSpec(kind=ModelKind.MLP, n_features=4, hidden=3, n_classes=classes)
    params = scale * rng.normal(size=spec.n_params)
    X = rng.normal(size=(6, 4))
    y = rng.integers(0, classes, size=6).astype(float)
    if hostile:
        y[0] = rng.choice([-3.0, 7.0, 0.5, np.nan])
    full = recal.record_sums(spec, params, X, y)
    without = recal.record_sums(spec, params, X[1:], y[1:])
    bound = recal.sensitivity(spec.n_outputs)
    assert full.shape == (recal.reply_length(spec.n_outputs),)
    assert np.linalg.norm(full - without) <= bound * (1 + 1e-12)


@pytest.mark.parametrize("classes", [2, 3])
def test_the_shift_matches_the_class_rates_when_every_row_has_the_same_logit(classes):
    spec = NetworkSpec(kind=ModelKind.LOGISTIC, n_features=2, n_classes=classes)
    params = np.zeros(spec.n_params)
    params[-spec.n_outputs :] = [-3.0] if classes == 2 else [-3.0, 0.5, 1.0]
    X = np.zeros((1000, 2))
    y = np.repeat(np.arange(classes), [700, 300] if classes == 2 else [500, 300, 200])
    sums = recal.record_sums(spec, params, X, y)
    shifted = recal.shift_output_bias(spec, params, recal.bias_shift(sums, y.size, spec.n_outputs))
    p = spec.model(shifted).predict_proba(X)
    rates = np.bincount(y) / y.size
    assert (p[:, None] if p.ndim == 1 else p).mean(axis=0) == pytest.approx(
        rates[1:] if classes == 2 else rates, abs=1e-9
    )
    assert np.allclose(shifted[: -spec.n_outputs], params[: -spec.n_outputs])  # weights kept


def test_a_clipped_mlp_is_miscalibrated_and_the_last_rounds_fix_it():
    from fedpriv.server.estimators import DPMLPClassifier

    rng = np.random.default_rng(3)
    X = rng.random((2000, 12))
    y = (rng.random(2000) < sigmoid(4.0 * X[:, 0] - 4.0)).astype(int)  # base rate ≈ 0.12
    common = dict(rounds=100, clip_norm=0.2, sampling_rate=0.1, epsilon=np.inf, seed=0)
    means = {
        share: DPMLPClassifier(recalibrate_share=share, **common).fit(X, y).predict_proba(X)[:, 1]
        for share in (0.0, 0.05)
    }
    assert abs(means[0.0].mean() - y.mean()) > 0.05  # joint clipping: off by count balance
    assert means[0.05].mean() == pytest.approx(y.mean(), abs=0.01)
