"""Lumberjack learner: accounting, release, runtime paths, structure independence."""

import math

import numpy as np
import pytest
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.server.estimators import LumberjackClassifier
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy

from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.federation.protocol import ClientData
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.privacy import ApproxDpEvent, BoundedRangeDpEvent
from tests.keys import key_for, private_rng

KEY = key_for(1)


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _fit(data, **kw):
    # An injected key: repeated fits (secure vs plain sums) draw the same noise.
    # Heart's public per-hospital bound (a bundled corpus): no record count is released.
    args = {"trees": 4, "depth": 12, "epsilon": 2.0, "seed": 1, "secret_key": KEY,
            "max_records": declared_max_records("heart", 4, 0), **kw}  # fmt: skip
    return LumberjackClassifier(**args).fit(data)


@pytest.mark.parametrize("leaves", ["exponential", "gaussian"])
def test_ledger_holds_the_structure_pair_and_one_leaf_event_per_tree(heart, leaves):
    from dp_accounting import dp_event

    clf = _fit(heart, leaf_mechanism=leaves)
    entries = clf.ledger_.entries
    assert isinstance(entries[0].event, ApproxDpEvent)
    assert entries[0].event.epsilon == pytest.approx(0.75 * 2.0)
    assert entries[0].event.delta <= 0.75 * 1e-6
    kind = BoundedRangeDpEvent if leaves == "exponential" else dp_event.GaussianDpEvent
    assert [type(e.event) for e in entries[1:]] == [kind] * 4
    assert clf.epsilon_spent_ <= 2.0
    assert clf.privacy_report_.accounting.pld_method.endswith("+basic")
    assert not clf.privacy_report_.reserved  # everything planned was released


def test_secure_and_plain_sums_release_the_same_forest(heart):
    a = _fit(heart, secure_aggregation=True).model_.to_arrays()
    b = _fit(heart, secure_aggregation=False).model_.to_arrays()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def _release(X, y, *, seed=0, epsilon=2.0):
    """One client holding (X, y); the whole server loop by hand."""
    from fedpriv.data import feature_space_numeric
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger

    space = FeatureSpace(feature_space_numeric(load_heart().schema))
    cfg = LumberjackConfig(trees=4, depth=12)
    # One declared record bound for both neighbours (public, not the row count).
    strategy = LumberjackStrategy(cfg, space=space, n_records=400)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-6))
    strategy.begin(
        n_features=X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(seed),
        secret_rng=private_rng(seed),
    )
    client, state = LumberjackClient(), {}
    data = ClientData(client_id=0, X=X, y=y)
    while (q := strategy.next_query()) is not None:
        strategy.update(q, client.answer(q, data, np.arange(data.n), state))
    return strategy.model()


def test_a_neighbouring_dataset_changes_only_what_the_mechanisms_decide(heart):
    # Same seed, one record fewer: every node both forests keep has the same split.
    X, y = heart.xy("train")
    full, fewer = _release(X, y), _release(X[1:], y[1:])
    shared = 0
    for ta, tb in zip(full.trees, fewer.trees, strict=True):
        _, ia, ib = np.intersect1d(ta.key, tb.key, return_indices=True)
        inner = ~ta.is_leaf[ia] & ~tb.is_leaf[ib]
        shared += int(inner.sum())
        np.testing.assert_array_equal(ta.feature[ia][inner], tb.feature[ib][inner])
        np.testing.assert_array_equal(ta.threshold[ia][inner], tb.threshold[ib][inner])
    assert shared > 0


def test_non_private_forest_fits_the_training_data(heart):
    # Every non-empty node splits (a frontier cap above heart's nodes per level).
    clf = _fit(heart, epsilon=math.inf, trees=10, depth=15, max_frontier=1024)
    X, y = heart.xy("train")
    assert clf.privacy_report_ is None
    assert np.mean(clf.predict(X) == y) > 0.9


def test_gaussian_leaves_release_counts_that_the_forest_pools(heart):
    clf = _fit(heart, leaf_mechanism="gaussian")
    model = clf.model_
    assert model.pooled and clf.epsilon_spent_ <= 2.0
    assert any((s < 0).any() for s in model.leaf_scores)  # raw noisy counts, not clipped
    X, _ = heart.xy("test")
    # P(y = 1) from the per-class sums over trees, clipped at 0 (independent recomputation).
    pos, neg = np.zeros(len(X)), np.zeros(len(X))
    for tree, scores in zip(model.trees, model.leaf_scores, strict=True):
        leaf = tree.apply(X)
        pos += scores[leaf, 1]
        neg += scores[leaf, 0]
    pos, neg = np.maximum(pos, 0), np.maximum(neg, 0)
    tot = pos + neg
    want = np.where(tot > 0, pos / np.where(tot > 0, tot, 1), 0.5)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], want)
    em = _fit(heart, leaf_mechanism="exponential").model_
    assert not em.pooled
    assert all(np.isin(s, (0.0, 1.0)).all() for s in em.leaf_scores)


def test_the_forest_is_released_only_after_the_last_level(heart):
    X, y = heart.xy("train")
    space = FeatureSpace(np.zeros(X.shape[1], dtype=bool) | True)
    strategy = LumberjackStrategy(
        LumberjackConfig(trees=2, depth=3), space=space, n_records=X.shape[0]
    )
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    client, state = LumberjackClient(), {}
    data = ClientData(client_id=0, X=X, y=y)
    while (q := strategy.next_query()) is not None:
        assert strategy.model() is None
        strategy.update(q, client.answer(q, data, np.arange(data.n), state))
    assert strategy.model() is not None and len(strategy.model().trees) == 2


def test_config_and_client_refusals(heart):
    with pytest.raises(ValueError, match=r"structure_fraction must lie in \(0, 1\)"):
        LumberjackConfig(structure_fraction=1.0)
    with pytest.raises(ValueError, match="leaf_mechanism must be one of"):
        LumberjackConfig(leaf_mechanism="laplace")
    X, y = heart.xy("train")
    space = FeatureSpace(np.ones(X.shape[1], dtype=bool))
    strategy = LumberjackStrategy(
        LumberjackConfig(trees=2, depth=10),
        space=space,  # 2 stages
        n_records=X.shape[0],
    )
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    data = ClientData(client_id=0, X=X, y=y)
    q0 = strategy.next_query()
    with pytest.raises(ValueError, match="must be all rows"):
        LumberjackClient().answer(q0, data, np.arange(3), {})
    strategy.update(q0, LumberjackClient().answer(q0, data, np.arange(data.n), {}))
    with pytest.raises(ValueError, match="walk state is missing"):
        LumberjackClient().answer(strategy.next_query(), data, np.arange(data.n), {})


def test_the_default_gate_is_the_papers_and_non_private_runs_have_none(heart):
    # The gate no longer steers growth (stages do), so τ = 1 + Δ, the paper's.
    clf = _fit(heart)
    assert clf.gate_ == 0 and clf.calibration_.mechanism(gate=0).tau == clf.calibration_.tau
    assert _fit(heart, epsilon=math.inf).gate_ == 0


@pytest.mark.parametrize("secure", [False, True])
def test_rounds_after_every_node_stops_ask_for_nothing_and_the_forest_is_released(heart, secure):
    # A gate above the root's count answers ⊥ everywhere: every tree is one leaf,
    # the second stage carries zero-length replies (plain and masked sums alike).
    X, _ = heart.xy("train")
    clf = _fit(heart, gate=X.shape[0], secure_aggregation=secure)  # stages of 7 and 5 levels
    assert clf.communication_.floats_uploaded.max() == 4 * 127 + 0 + 4 * 2  # stage 0, leaves
    assert all(t.left.size == 1 for t in clf.model_.trees)
    assert clf.epsilon_spent_ <= 2.0
