"""Fully random DP forest: budget modes, leaf mechanisms, disjoint assignment, runtimes."""

import math

import numpy as np
import pytest

from clients.random_forest import RandomForestClient, tree_of_rows
from fedpriv.data import feature_space_numeric, load_heart
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.runtime import client_key
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.models.trees import route
from fedpriv.privacy import BoundedRangeDpEvent, chi_square_selection_test
from server.estimators import DPRandomForestClassifier
from strategies.random_forest import (
    MAX_AUTO_DEPTH,
    RandomForestConfig,
    RandomForestStrategy,
    auto_depth,
    random_complete_tree,
)
from tests.keys import key_for, private_rng


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _fit(data, **kw):
    # An injected key: repeated fits (secure vs plain sums) draw the same noise.
    # ε = 1 stated (the estimator's default is now 2).
    args = {"trees": 6, "depth": 5, "epsilon": 1.0, "seed": 2, "secret_key": key_for(2), **kw}
    return DPRandomForestClassifier(**args).fit(data)


@pytest.mark.parametrize("mode", ["all", "disjoint"])
@pytest.mark.parametrize("leaves", ["exponential", "gaussian"])
@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_every_mode_spends_at_most_its_budget(heart, mode, leaves, eps):
    # ε = 0.5 with Gaussian leaves once sat a hair above the budget (analytic vs PLD).
    clf = _fit(heart, mode=mode, leaf_mechanism=leaves, epsilon=eps)
    assert clf.epsilon_spent_ <= eps
    assert clf.epsilon_spent_ > 0.99 * eps  # and uses it
    events = [e.event for e in clf.ledger_.entries]
    if leaves == "exponential":
        n = 1 if mode == "disjoint" else 6  # parallel vs sequential composition
        assert len(events) == n and all(isinstance(e, BoundedRangeDpEvent) for e in events)
        if mode == "disjoint":
            assert events[0].epsilon == pytest.approx(eps)
    else:
        assert len(events) == 1  # one Gaussian on all leaf counts (sensitivity 1 or √k)


def _disjoint_reply(heart, X, y, key, mode="disjoint"):
    space = FeatureSpace(feature_space_numeric(heart.schema))
    strategy = RandomForestStrategy(RandomForestConfig(trees=4, depth=3, mode=mode), space=space)
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    data = ClientData(client_id=1, X=X, y=y)
    return RandomForestClient().answer(strategy.next_query(), data, np.arange(y.size), {}, key)


def test_disjoint_rows_feed_one_tree_each_drawn_from_the_clients_secret_key(heart):
    X, y = heart.xy("train")
    key = client_key(key_for(0), 1)
    for mode, per_row in (("all", 4), ("disjoint", 1)):
        assert _disjoint_reply(heart, X, y, key, mode).sum() == per_row * y.size
    with pytest.raises(ValueError, match="disjoint mode needs the client's secret key"):
        _disjoint_reply(heart, X, y, None)

    # i.i.d. uniform over the trees: the marginal and consecutive pairs (χ²).
    n, k = 20_000, 7
    owner = tree_of_rows(key, n, k)
    assert chi_square_selection_test(owner, np.full(k, 1 / k)) > 1e-3
    assert chi_square_selection_test(owner[:-1] * k + owner[1:], np.full(k * k, 1 / k**2)) > 1e-3
    # Power: the same sample rejects a law 25 % heavier on one tree.
    skewed = np.full(k, 1.0)
    skewed[0] = 1.25
    assert chi_square_selection_test(owner, skewed / skewed.sum()) < 1e-6

    # Fixed for the run by the key (every call, the same trees), secret: another
    # key (another client, another run) assigns otherwise, whatever the position.
    np.testing.assert_array_equal(owner, tree_of_rows(key, n, k))
    np.testing.assert_array_equal(
        _disjoint_reply(heart, X, y, key), _disjoint_reply(heart, X, y, key)
    )
    for other in (client_key(key_for(0), 2), client_key(key_for(1), 1)):
        assert np.mean(tree_of_rows(other, n, k) == owner) < 0.2  # ≈ 1/k by chance

    # Appending a row moves no other row's tree.
    np.testing.assert_array_equal(tree_of_rows(key, n + 1, k)[:n], owner)
    # So for a fixed key, removing the last record moves exactly one count by one
    # (L1 = 1, the sensitivity the disjoint mode accounts for); in "all" mode it
    # moves one count per tree (L1 = k).
    for mode, l1 in (("disjoint", 1.0), ("all", 4.0)):
        full = _disjoint_reply(heart, X, y, key, mode)
        fewer = _disjoint_reply(heart, X[:-1], y[:-1], key, mode)
        assert np.abs(full - fewer).sum() == l1
        assert np.all((full - fewer) >= 0)


def test_complete_trees_are_in_heap_order_with_public_ranges(heart):
    space = FeatureSpace(feature_space_numeric(heart.schema))
    tree = random_complete_tree(4, space, key=3, salt=4)
    assert tree.feature.size == 15 and tree.depth == 4
    assert np.all((tree.threshold >= 0) & (tree.threshold <= 1))
    # Root split ranges: a right child's threshold on the same numeric feature lies above.
    f, t = tree.feature, tree.threshold
    for k in range(7):
        for child, above in ((2 * k + 1, False), (2 * k + 2, True)):
            if f[child] == f[k] and space.numeric[f[k]]:
                assert (t[child] >= t[k]) if above else (t[child] <= t[k])
    X = np.random.default_rng(0).random((50, space.n_features))
    assert route(tree, X).max() < 16


def test_secure_and_plain_sums_release_the_same_forest(heart):
    a = _fit(heart, secure_aggregation=True).model_.to_arrays()
    b = _fit(heart, secure_aggregation=False).model_.to_arrays()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_non_private_and_validation(heart):
    clf = _fit(heart, epsilon=math.inf, trees=30, depth=6)
    X, y = heart.xy("test")
    assert np.mean(clf.predict(X) == y) > 0.7
    with pytest.raises(ValueError, match=r"depth must be 0 \(automatic\) or lie in \[1, 16\]"):
        RandomForestConfig(depth=20)
    with pytest.raises(ValueError, match="mode must be one of"):
        RandomForestConfig(mode="bootstrap")


def test_auto_depth_keeps_two_noise_stds_and_32_records_in_an_expected_leaf():
    # n / 2^D ≥ max(2σ, 32): 3,072 rows, σ = 31 → 62 per leaf → D = 5 (96 ≥ 62 > 48).
    assert auto_depth(3072, 31.0) == 5
    assert auto_depth(3072, 0.0) == 6  # no noise: the 32-record floor (48 ≥ 32 > 24)
    assert auto_depth(10**9, 0.0) == MAX_AUTO_DEPTH
    assert auto_depth(10, 100.0) == 1  # never below one split
    with pytest.raises(ValueError, match="records > 0"):
        auto_depth(0, 1.0)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_the_default_depth_follows_the_public_count_and_the_calibrated_noise(heart, eps):
    clf = _fit(heart, depth=0, epsilon=eps)
    sigma = clf.noise_multiplier_ * math.sqrt(6)  # Gaussian leaves; 6 trees see every row
    depth = auto_depth(clf.context_.n_records, sigma)
    assert {t.feature.size for t in clf.model_.trees} == {2**depth - 1}
    # Heart's 391 training rows: 3 levels at either ε (σ = 19.7: 40 per leaf; σ ≈ 5: 32).
    assert depth == 3
    assert RandomForestConfig().depth == 0
