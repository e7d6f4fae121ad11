"""The last round that recalibrates a released model (Lumberjack's option), end to end."""

import numpy as np
import pytest
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.server.estimators import LumberjackClassifier
from fedpriv.server.method_estimator import MethodEstimator
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy
from sklearn.metrics import brier_score_loss

from fedpriv.data import load_synthetic
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.models import recalibration as maths
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyLedger
from fedpriv.records import class_codes
from tests.keys import key_for, private_rng


@pytest.fixture(scope="module")
def data():
    return load_synthetic()


def _fit(data, **kw):
    # The synthetic corpus's public per-client bound (5 × ≤ 615 rows): no count released.
    args = dict(trees=6, depth=14, epsilon=1.0, seed=1, secret_key=key_for(7), max_records=615,
                **kw)  # fmt: skip
    return LumberjackClassifier(**args).fit(data)


def test_the_round_releases_the_maps_sums_and_the_model_carries_the_map(data, tmp_path):
    plain = _fit(data)
    recal = _fit(data, recalibrate_share=0.1)
    assert LumberjackConfig(recalibrate_share=0.1).rounds == LumberjackConfig().rounds + 1
    assert plain.model_.recalibration is None
    m = recal.model_.recalibration
    assert m is not None and m.n_classes == 2
    assert recal.ledger_.entries[-1].label == "recalibration sums"
    assert recal.epsilon_spent_ <= 1.0
    assert recal.communication_.rounds == plain.communication_.rounds + 1
    X, y = data.X[data.split.test], data.y[data.split.test]
    p = recal.predict_proba(X)[:, 1]
    raw = recal.model_.raw_scores(X)[:, 1]
    np.testing.assert_allclose(p, m.apply(raw))  # the map on the forest's own scores
    order = np.argsort(raw, kind="stable")
    assert np.all(np.diff(p[order]) >= -1e-12)  # ranking kept
    loaded = MethodEstimator.load(recal.save(tmp_path / "lj.npz"))
    np.testing.assert_array_equal(loaded.predict_proba(X), recal.predict_proba(X))
    base = brier_score_loss(y, np.full(y.size, data.y[data.split.train].mean()))
    assert brier_score_loss(y, p) < base


def test_a_client_answers_with_the_clipped_sums_of_the_released_forest(data):
    clf = _fit(data)
    forest = clf.model_
    arrays = forest.to_arrays()
    X, y = data.X[:200], data.y[:200]
    q = Query(
        round=3,
        method="lumberjack",
        sampling_rate=1.0,
        reply_length=maths.reply_length(2),
        record_bound=maths.SENSITIVITY,
        arrays=arrays,
        config={"kind": maths.STAGE, "n_classes": 2},
    )
    client = ClientData(client_id=0, X=X, y=y)
    reply = LumberjackClient().answer(q, client, np.arange(200), {})
    np.testing.assert_allclose(
        reply, maths.record_sums(forest.raw_scores(X), class_codes(y, 2)), rtol=1e-12
    )


def test_recalibration_needs_the_public_record_count():
    s = LumberjackStrategy(
        LumberjackConfig(trees=2, depth=7, recalibrate_share=0.1),
        space=FeatureSpace(np.ones(3, dtype=bool)),
    )
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-6))
    with pytest.raises(ValueError, match="needs the public record count"):
        s.begin(
            n_features=3, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng(0)
        )
    with pytest.raises(ValueError, match=r"recalibrate_share must lie in \[0, 1\)"):
        LumberjackConfig(recalibrate_share=1.0)
