"""DP-SGD's recalibration rounds: the noise walk, ``auto``, and the ``linear`` map end to end."""

import logging
import math

import numpy as np
import pytest
from fedpriv.server.estimators import DPLogisticClassifier, DPMLPClassifier
from fedpriv.server.method_estimator import MethodEstimator
from fedpriv.strategies.dpsgd_recalibration import WALK_LIMIT, noise_walk, resolve
from sklearn.metrics import brier_score_loss

from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.trees import sigmoid
from fedpriv.options import Recalibration
from tests.keys import key_for


def test_the_noise_walk_and_the_auto_rule():
    # √T · η · zC / (ρqn): 400 steps, η 1, zC 3.4, batch 96 → 0.708.
    assert noise_walk(steps=400, learning_rate=1.0, noise_std=3.4, batch=96.0) == pytest.approx(
        20 * 3.4 / 96
    )
    assert resolve("auto", WALK_LIMIT) is Recalibration.LINEAR
    assert resolve("auto", math.nextafter(WALK_LIMIT, 0)) is Recalibration.BIAS
    assert resolve("bias", 10.0) is Recalibration.BIAS
    assert resolve(Recalibration.LINEAR, 0.0) is Recalibration.LINEAR
    with pytest.raises(ValueError, match="recalibration must be one of"):
        resolve("temperature", 1.0)


def _skewed(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 10))
    y = (rng.random(n) < sigmoid(3.0 * X[:, 0] - 2.5)).astype(int)  # base rate ≈ 0.2
    return X, y


def test_on_few_rows_auto_fits_the_map_and_it_shrinks_the_spread(tmp_path):
    X, y = _skewed(1500, 0)
    Xt, yt = _skewed(4000, 1)
    common = dict(
        hidden=32,
        rounds=200,
        learning_rate=1.0,
        clip_norm=1.0,
        sampling_rate=0.05,
        epsilon=0.5,
        num_clients=3,
        max_records=500,  # the declared bound: n = 1,500, the rows' count
        secure_aggregation=False,
        secret_key=key_for(3),
    )
    auto = DPMLPClassifier(**common).fit(X, y)
    bias = DPMLPClassifier(recalibration="bias", **common).fit(X, y)
    m = auto.model_.recalibration
    assert m is not None and bias.model_.recalibration is None
    assert m.slope < 0.8  # the noisy weights spread the probabilities: shrunk
    # The last two rounds released the recalibration sums.
    assert [e.label for e in auto.ledger_.entries[-2:]] == [
        f"round {t}: recalibration sums" for t in (198, 199)
    ]
    base = brier_score_loss(yt, np.full(yt.size, y.mean()))
    b_auto = brier_score_loss(yt, auto.predict_proba(Xt)[:, 1])
    b_bias = brier_score_loss(yt, bias.predict_proba(Xt)[:, 1])
    # Measured: 0.218 against 0.243 with the bias shift (base rate 0.210): the map
    # at least halves the excess over the base rate on 1,500 rows at ε = 0.5.
    assert b_auto - base < (b_bias - base) / 2, (b_auto, b_bias, base)
    # The map is part of the released model: saved and loaded with it.
    loaded = MethodEstimator.load(auto.save(tmp_path / "mlp.npz"))
    np.testing.assert_array_equal(loaded.predict_proba(Xt), auto.predict_proba(Xt))


def test_with_many_rows_auto_keeps_the_bias_shift_and_logistic_defaults_to_it():
    X, y = _skewed(20000, 2)
    clf = DPMLPClassifier(
        rounds=30, epsilon=8.0, num_clients=3, secure_aggregation=False, secret_key=key_for(4)
    ).fit(X, y)
    assert clf.model_.recalibration is None
    assert DPLogisticClassifier().get_params()["recalibration"] == "bias"


def test_a_rare_class_below_the_noise_gets_no_runaway_shift():
    # Three classes, the second at 0.5 % of N = 10,000 rows; its released mean
    # prediction came out negative (noise std 200 per sum). Unfloored, its rate is
    # read as 1e-4 and the class is pushed up by log(0.005/1e-4) = 3.9 logits
    # against the first; floored at 2σ/N = 0.04 (both rates), it is not moved.
    n, sigma = 10_000.0, 200.0
    resid = np.array([0.0, -100.0, 100.0])  # Σ(p − e_y)
    total = np.array([8000.0, -50.0, 2050.0])  # Σp, the second one below 0 by noise
    released = np.concatenate([resid, total])
    unfloored = recal.bias_shift(released, n, 3)
    floored = recal.bias_shift(released, n, 3, noise_std=sigma)
    assert unfloored[1] - unfloored[0] == pytest.approx(math.log(0.005 / 1e-4))
    assert abs(floored[1] - floored[0]) < 1e-12
    # A class well above the noise is shifted the same either way.
    assert floored[2] - floored[0] == pytest.approx(unfloored[2] - unfloored[0])


def _fit_mlp(X, y, epsilon, **kw):
    return DPMLPClassifier(
        hidden=4, rounds=12, sampling_rate=0.2, recalibration="linear", epsilon=epsilon,
        num_clients=3, max_records=200, secret_key=key_for(2), **kw,
    ).fit(X, y)  # fmt: skip


def test_a_recalibration_release_that_shows_nothing_degrades_the_run(caplog):
    # Labels unrelated to the features at ε = 0.3: the released sums show no positive
    # association, the map's slope sits at its floor and the predictions are the
    # released class rates. The run says so: degraded, with the reason and a warning.
    rng = np.random.default_rng(0)
    X, y = rng.random((600, 5)), (rng.random(600) < 0.3).astype(int)
    with caplog.at_level(logging.WARNING):
        est = _fit_mlp(X, y, 0.3, secure_aggregation=False)
    assert est.model_.recalibration.degenerate
    assert est.run_status_ == "degraded" and est.run_outcome_.rounds_aborted == 0
    line = est.run_outcome_.line()
    assert line.startswith("run degraded: all 12 of 12 rounds released; the recalibration")
    assert "slope is at its floor" in line
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("run degraded" in m and "recalibration" in m for m in warned)
    # The twin: labels that follow the features at ε = 4; an informative map, completed.
    X = rng.random((600, 5))
    y = (rng.random(600) < sigmoid(8.0 * X[:, 0] - 5.0)).astype(int)
    ok = _fit_mlp(X, y, 4.0, secure_aggregation=False)
    assert not ok.model_.recalibration.degenerate and ok.run_status_ == "completed"
    assert ok.run_outcome_.line() == "run completed: all 12 of 12 rounds released"


def test_the_linear_map_is_released_under_distributed_noise():
    # The round's sum arrives as the survivors' noisy sum (a DistributedSum); made a
    # plain array first, the release refused it as an exact sum and the fit failed.
    X, y = _skewed(600, 5)
    est = _fit_mlp(X, y, 1.0, noise="distributed", tolerated_dropouts=1)
    assert est.model_.recalibration is not None
    assert [e.label for e in est.ledger_.entries[-2:]] == [
        f"round {t}: recalibration sums" for t in (10, 11)
    ]
    assert est.privacy_report_.epsilon <= 1.0
