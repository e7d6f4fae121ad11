"""Lumberjack learner: accounting, release, runtime paths, structure independence."""

import numpy as np
import pytest

from clients.lumberjack import LumberjackClient
from fedpriv.data import load_heart
from fedpriv.federation.protocol import ClientData
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.privacy import ApproxDpEvent, BoundedRangeDpEvent
from server.estimators import LumberjackClassifier
from strategies.lumberjack import LumberjackConfig, LumberjackStrategy
from tests.keys import key_for, private_rng

KEY = key_for(1)


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _fit(data, **kw):
    # An injected key: repeated fits (secure vs plain sums) draw the same noise.
    args = {"n_trees": 4, "max_depth": 12, "epsilon": 2.0, "seed": 1, "secret_key": KEY, **kw}
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
    cfg = LumberjackConfig(n_trees=4, max_depth=12, epsilon=epsilon)
    strategy = LumberjackStrategy(cfg, space=space)
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
    clf = _fit(heart, epsilon=None, n_trees=10, max_depth=15)
    X, y = heart.xy("train")
    assert clf.privacy_report_ is None
    assert np.mean(clf.predict(X) == y) > 0.9  # every non-empty node splits


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
        LumberjackConfig(n_trees=2, max_depth=3, epsilon=None), space=space
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
        LumberjackConfig(n_trees=2, max_depth=3, epsilon=None), space=space
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


def test_only_nodes_above_the_gate_are_split_and_their_rows_stop(heart):
    # Run the loop by hand; each round's query must split exactly the nodes of
    # the last layer holding more than ``gate`` rows, and the client must stop
    # routing the rows of the others (their candidate becomes −1).
    from fedpriv.data import feature_space_numeric
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger

    X, y = heart.xy("train")
    gate = 9
    space = FeatureSpace(feature_space_numeric(heart.schema))
    strategy = LumberjackStrategy(
        LumberjackConfig(n_trees=3, max_depth=10, epsilon=2.0, gate=gate), space=space
    )
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-6))
    strategy.begin(
        n_features=X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(3),
        secret_rng=private_rng(3),
    )
    client, state = LumberjackClient(), {}
    data = ClientData(client_id=0, X=X, y=y)
    stopped = 0
    while (q := strategy.next_query()) is not None:
        if q.round > 0:
            for k, layers in enumerate(strategy._layers):
                sizes = layers[-1].counts.sum(axis=1)
                assert q.arrays["sizes"][k] == int(np.sum(sizes > gate))
        reply = client.answer(q, data, np.arange(data.n), state)
        live = state["candidate"] >= 0
        # Rows still walking are exactly those in split nodes: the reply counts them.
        assert reply.sum() == live.sum()
        stopped = max(stopped, int((~live).sum()))
        strategy.update(q, reply)
    assert stopped > 0
    cal = strategy.calibration_
    assert f"gate={gate}" in ledger.entries[0].event.mechanism
    assert strategy.calibration_.mechanism(gate=gate).tau == pytest.approx(gate + 1 + cal.gap)


def test_the_default_gate_is_a_quarter_sigma_and_non_private_runs_split_every_node(heart):
    clf = _fit(heart)
    assert clf.gate_ == int(clf.calibration_.sigma // 4) > 0
    assert _fit(heart, epsilon=None).gate_ == 0


def test_an_index_map_sending_rows_to_an_empty_node_is_refused(heart):
    X, y = heart.xy("train")
    space = FeatureSpace(np.ones(X.shape[1], dtype=bool))
    strategy = LumberjackStrategy(
        LumberjackConfig(n_trees=1, max_depth=3, epsilon=None), space=space
    )
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    data, state = ClientData(client_id=0, X=X, y=y), {}
    q0 = strategy.next_query()
    strategy.update(q0, LumberjackClient().answer(q0, data, np.arange(data.n), state))
    q1 = strategy.next_query()
    q1.arrays["index"] = np.full_like(q1.arrays["index"], -2)  # "empty" for every candidate
    with pytest.raises(ValueError, match="inconsistent index map"):
        LumberjackClient().answer(q1, data, np.arange(data.n), state)


@pytest.mark.parametrize("secure", [False, True])
def test_rounds_after_every_node_stops_ask_for_nothing_and_the_forest_is_released(heart, secure):
    # A gate above the root's count stops every row after the first split: the
    # remaining rounds carry zero-length replies (plain and masked sums alike).
    X, _ = heart.xy("train")
    clf = _fit(heart, gate=X.shape[0], secure_aggregation=secure)
    assert clf.communication_.floats_uploaded.max() == 2 * 4 * 2  # round 0 only: 4 roots
    assert all(t.left.size in (1, 3) for t in clf.model_.trees)  # a leaf, or a root split
    assert clf.epsilon_spent_ <= 2.0
