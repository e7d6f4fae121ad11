"""DP boosting: λ follows the noise, the accounted intercept, softmax leaves for C ≥ 3 classes."""

import math

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.server.method_estimator import MethodEstimator
from fedpriv.strategies.boosting import (
    L2_SENSITIVITY,
    SOFTMAX_L2_SENSITIVITY,
    BoostingConfig,
    DPBoostingStrategy,
)
from sklearn.metrics import roc_auc_score

from fedpriv.data import iid
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for, private_rng


def _begun(config, *, epsilon, n_classes=2):
    s = DPBoostingStrategy(config, n_classes=n_classes)
    ledger = (
        None
        if epsilon is None
        else PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    )
    s.begin(n_features=3, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng(0))
    return s


@pytest.mark.parametrize("n_classes", [2, 3])
def test_lambda_is_lam_times_the_noise_std_and_grows_with_z(n_classes):
    cfg = BoostingConfig(rounds=5, sampling_rate=1.0, lam=5.0, reg_lambda=1.0)
    delta2 = L2_SENSITIVITY if n_classes == 2 else SOFTMAX_L2_SENSITIVITY
    lams = {}
    for eps in (0.5, 8.0):
        s = _begun(cfg, epsilon=eps, n_classes=n_classes)
        assert s.l2_sensitivity == delta2
        assert math.isclose(s.reg_lambda_, 5.0 * s.noise_multiplier_ * delta2, rel_tol=1e-12)
        lams[eps] = (s.noise_multiplier_, s.reg_lambda_)
    # Smaller ε → larger z → proportionally larger λ.
    assert lams[0.5][1] > lams[8.0][1] > 1.0
    assert math.isclose(lams[0.5][1] / lams[8.0][1], lams[0.5][0] / lams[8.0][0], rel_tol=1e-12)
    # The floor, and the non-private reference, are reg_lambda.
    assert _begun(BoostingConfig(lam=0.0, reg_lambda=3.0), epsilon=2.0).reg_lambda_ == 3.0
    assert _begun(cfg, epsilon=None).reg_lambda_ == 1.0


def _clients(y, X):
    return make_clients(X, y, iid(y.size, n_clients=4, rng=np.random.default_rng(1)))


@pytest.mark.parametrize("intercept", [True, False])
def test_the_intercept_round_is_accounted_and_lands_near_the_base_rate(intercept):
    rng = np.random.default_rng(2)
    X, y = rng.random((4000, 3)), (rng.random(4000) < 0.2).astype(float)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=8.0, delta=1e-5))
    cfg = BoostingConfig(rounds=4, depth=2, sampling_rate=1.0, intercept=intercept)
    rt = InProcessRuntime(
        clients=_clients(y, X), handler=BoostingClient(), seed=0, secret_key=key_for(4)
    )
    strategy = rt.run(DPBoostingStrategy(cfg), ledger=ledger)
    model = strategy.model()
    assert len(model.trees) == cfg.n_trees == 4 - int(intercept)
    assert len(ledger.report().entries) == 4  # the intercept is one event of the plan
    if intercept:
        # One Newton step from 0: −Σ(½ − y)/(n/4 + λ) ≈ −0.3/0.25 = −1.2 (noise σ_H ≈ 2, λ ≈ 10).
        assert -1.25 < model.base < -1.1, model.base
    else:
        assert model.base == 0.0


def _three_classes(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2))
    y = np.where(X[:, 0] < 0.4, 0, np.where(X[:, 1] < 0.5, 1, 2))
    return X, y


def test_multiclass_fit_separates_three_classes_and_reloads(tmp_path):
    X, y = _three_classes(3000, 0)
    Xt, yt = _three_classes(1000, 1)
    est = DPBoostingClassifier(
        rounds=30,
        depth=3,
        sampling_rate=0.5,
        epsilon=4.0,
        classes=[0, 1, 2],
        num_clients=3,
        secret_key=key_for(5),
    ).fit(X, y)
    p = est.predict_proba(Xt)
    assert p.shape == (1000, 3) and np.allclose(p.sum(axis=1), 1.0, atol=1e-12)
    auc = roc_auc_score(yt, p, multi_class="ovr")
    assert auc > 0.85, auc  # chance is 0.5
    assert (est.predict(Xt) == yt).mean() > 0.7  # chance ≈ 0.4
    assert est.noise_multiplier_ > 0 and est.epsilon_spent_ <= 4.0
    back = MethodEstimator.load(est.save(tmp_path / "m.npz"))
    for name in ("predict_proba", "decision_function", "predict"):
        np.testing.assert_array_equal(getattr(back, name)(Xt), getattr(est, name)(Xt))
