"""The DP-SGD estimators on three classes: the softmax model through the whole fit."""

import math

import numpy as np
import pytest
from fedpriv.server.estimators import DPLogisticClassifier, DPMLPClassifier
from fedpriv.server.method_estimator import MethodEstimator

from tests.keys import key_for


def _three_classes(n=1500, seed=0):
    """Class k is likelier as feature k grows (Bayes accuracy ≈ .63; chance .34)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 4))
    logits = 4.0 * X[:, :3]
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return X, np.array(["a", "b", "c"])[y]


@pytest.mark.parametrize("cls", [DPLogisticClassifier, DPMLPClassifier])
@pytest.mark.parametrize("epsilon", [math.inf, 8.0])
def test_fit_beats_chance_and_columns_follow_classes(cls, epsilon, tmp_path):
    X, y = _three_classes()
    Xt, yt = _three_classes(seed=1)
    clf = cls(
        epsilon=epsilon,
        rounds=200,
        learning_rate=1.0,
        classes=["c", "a", "b"],
        num_clients=3,
        secure_aggregation=False,
        secret_key=key_for(2),
    ).fit(X, y)
    assert clf.classes_.tolist() == ["a", "b", "c"]
    proba = clf.predict_proba(Xt)
    assert proba.shape == (Xt.shape[0], 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    # Column k is P(classes_[k]): highest on the rows where feature k is largest.
    np.testing.assert_array_equal(
        [proba[Xt[:, :3].argmax(axis=1) == k].mean(axis=0).argmax() for k in range(3)], [0, 1, 2]
    )
    accuracy = np.mean(clf.predict(Xt) == yt)
    assert accuracy > 0.5, accuracy  # chance ≈ .34, Bayes ≈ .63
    assert clf.decision_function(Xt).shape == (Xt.shape[0], 3)
    loaded = MethodEstimator.load(clf.save(tmp_path / "model.npz"))
    np.testing.assert_array_equal(loaded.predict_proba(Xt), proba)
    np.testing.assert_array_equal(loaded.predict(Xt), clf.predict(Xt))
