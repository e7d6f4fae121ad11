"""In-process estimators: runtime paths agree (DP-SGD and the histogram learners); DP-SGD's
seeds, backends, custom modules."""

import math

import numpy as np
import pytest
import torch
from fedpriv.server.estimators import (
    BDPEClassifier,
    DPGAMClassifier,
    DPLogisticClassifier,
    DPMLPClassifier,
)
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier
from sklearn.metrics import roc_auc_score
from torch import nn

from fedpriv.data import box_standardisation, load_heart, load_synthetic
from fedpriv.data.node import declared_max_records
from tests.keys import key_for

KEY = key_for(3)
ESTIMATOR = {"logistic": DPLogisticClassifier, "mlp": DPMLPClassifier}


@pytest.fixture(scope="module")
def heart():
    return load_heart()


HEART_BOUND = declared_max_records("heart", 4, 0)


def _fit(data, model="logistic", **kw):
    # An injected key: fits compared across paths and backends draw the same noise and coins.
    # Heart's public per-hospital bound (a bundled corpus): no record count is released.
    args = {"rounds": 25, "sampling_rate": 0.1, "epsilon": 2.0, "seed": 3, "secret_key": KEY,
            "max_records": HEART_BOUND, **kw}  # fmt: skip
    return ESTIMATOR[model](**args).fit(data)


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_secure_plain_and_per_client_paths_release_the_same_model(heart, model, monkeypatch):
    secure = _fit(heart, model=model)
    plain = _fit(heart, model=model, secure_aggregation=False)
    np.testing.assert_array_equal(secure.model_.params, plain.model_.params)
    from fedpriv.federation import runtime

    original = runtime.InProcessRuntime.__init__

    def per_client(self, **kw):
        original(self, **{**kw, "vectorised": False})

    monkeypatch.setattr(runtime.InProcessRuntime, "__init__", per_client)
    one_by_one = _fit(heart, model=model)
    np.testing.assert_array_equal(one_by_one.model_.params, secure.model_.params)


#: The histogram learners on Heart's schema, small: every client answers at once in process.
HISTOGRAM = {
    "dp_gam": (DPGAMClassifier, {"rounds": 20, "interactions": 1, "interaction_rounds": 4}),
    "bdpe": (BDPEClassifier, {"trees": 3, "depth": 3}),
    "lumberjack": (LumberjackClassifier, {"trees": 4, "depth": 14, "recalibrate_share": 0.1}),
    "random_forest": (DPRandomForestClassifier, {"trees": 5, "depth": 4, "mode": "disjoint"}),
}


@pytest.mark.parametrize("method", sorted(HISTOGRAM))
def test_histogram_learners_fit_all_clients_at_once_as_one_by_one(heart, method, monkeypatch):
    from fedpriv.federation import runtime

    cls, settings = HISTOGRAM[method]
    args = {"epsilon": 2.0, "seed": 3, "secret_key": KEY, "max_records": HEART_BOUND, **settings}
    fits = {secure: cls(**args, secure_aggregation=secure).fit(heart) for secure in (True, False)}
    original = runtime.InProcessRuntime.__init__

    def per_client(self, **kw):
        original(self, **{**kw, "vectorised": False})
        assert not self.vectorised

    monkeypatch.setattr(runtime.InProcessRuntime, "__init__", per_client)
    one_by_one = cls(**args).fit(heart).model_.to_arrays()
    for fit in fits.values():
        got = fit.model_.to_arrays()
        assert got.keys() == one_by_one.keys()
        for name, value in got.items():
            np.testing.assert_array_equal(value, one_by_one[name], err_msg=name)


def test_same_seed_and_key_same_model_other_key_or_seed_other_model(heart):
    a, b = _fit(heart, model="mlp"), _fit(heart, model="mlp")
    np.testing.assert_array_equal(a.model_.params, b.model_.params)
    other_key = _fit(heart, model="mlp", secret_key=key_for(4))  # other noise and coins
    assert not np.allclose(a.model_.params, other_key.model_.params)
    other_seed = _fit(heart, model="mlp", seed=4)  # same key, other initial weights
    assert not np.allclose(a.model_.params, other_seed.model_.params)
    # No key: fresh OS entropy at every fit, so two fits differ.
    fresh = [_fit(heart, model="mlp", secret_key=None) for _ in range(2)]
    assert not np.allclose(fresh[0].model_.params, fresh[1].model_.params)


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_opacus_backend_trains_the_same_model(heart, model):
    fast = _fit(heart, model=model)
    slow = _fit(heart, model=model, backend="opacus")
    np.testing.assert_allclose(slow.model_.params, fast.model_.params, rtol=1e-7, atol=1e-9)


def test_privacy_and_communication_reports(heart):
    clf = _fit(heart, model="mlp", hidden=4)
    d = heart.X.shape[1]
    P = d * 4 + 2 * 4 + 1
    assert clf.epsilon_spent_ <= 2.0
    # The centring round, 22 steps, and two recalibration rounds: on Heart's few
    # rows the steps' noise walk is large, so ``auto`` releases the affine map's
    # 2C + 2 sums (not the bias shift's 2) in each.
    assert len(clf.ledger_.entries) == 25
    assert clf.communication_.floats_uploaded.tolist() == [d + 22 * P + 2 * 6] * 4
    assert clf.model_.recalibration is not None
    assert clf.noise_multiplier_ == _fit(heart, model="mlp", participation=0.5).noise_multiplier_


def test_standardisation_comes_from_the_schema_only(heart):
    clf = _fit(heart, centre_share=0.0)
    shift, scale = box_standardisation(heart.schema)
    np.testing.assert_array_equal(clf.model_.input_map.shift, shift)
    np.testing.assert_array_equal(clf.model_.input_map.scale, scale)
    assert 0 < shift.sum() < shift.size  # numeric columns shifted, indicators not
    raw = _fit(heart, standardise=False, centre_share=0.0)
    np.testing.assert_array_equal(raw.model_.input_map.scale, np.ones(shift.size))
    # Centred (the default): the box map, then minus the released mean of the mapped rows.
    centred = _fit(heart)
    np.testing.assert_array_equal(centred.model_.input_map.scale, scale)
    assert not np.array_equal(centred.model_.input_map.shift, shift)


def test_non_private_mlp_learns_the_interactions():
    # The synthetic task defeats linear models (≈ .72) but not a network (paper: .93).
    ds = load_synthetic()
    X, y = ds.xy("test")
    mlp = DPMLPClassifier(epsilon=math.inf, seed=0, secret_key=KEY).fit(ds)
    logistic = DPLogisticClassifier(epsilon=math.inf, seed=0, secret_key=KEY).fit(ds)
    assert mlp.privacy_report_ is None and mlp.epsilon_spent_ == np.inf
    assert roc_auc_score(y, mlp.predict_proba(X)[:, 1]) > 0.88
    assert roc_auc_score(y, logistic.predict_proba(X)[:, 1]) < 0.75


def test_any_torch_module_trains_through_opacus(heart):
    d = heart.X.shape[1]
    module = nn.Sequential(
        nn.Linear(d, 6, dtype=torch.float64), nn.Tanh(), nn.Linear(6, 1, dtype=torch.float64)
    )
    init = np.random.default_rng(0).normal(0, 0.2, sum(p.numel() for p in module.parameters()))
    nn.utils.vector_to_parameters(torch.from_numpy(init), module.parameters())
    clf = _fit(heart, module=module, backend="opacus", rounds=40, epsilon=4.0)
    X, y = heart.xy("test")
    assert clf.predict_proba(X).shape == (y.size, 2)
    assert clf.epsilon_spent_ <= 4.0
    assert not np.allclose(clf.model_.params, init)
    with pytest.raises(ValueError, match="custom torch module needs backend='opacus'"):
        _fit(heart, module=module)


def test_get_and_set_params():
    clf = DPMLPClassifier()
    assert clf.get_params()["hidden"] == 16
    assert clf.set_params(hidden=8).hidden == 8
    with pytest.raises(ValueError, match="unknown parameter 'depth'"):
        clf.set_params(depth=3)
