"""Fully random DP forest: budget modes, leaf mechanisms, disjoint assignment, runtimes."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.random_forest import RandomForestClient, tree_of_rows
from fedpriv.experiments.audit.runs import RecordingLedger
from fedpriv.server.estimators import DPRandomForestClassifier
from fedpriv.strategies.random_forest import (
    MAX_AUTO_DEPTH,
    RandomForestConfig,
    RandomForestStrategy,
    auto_depth,
    random_complete_tree,
)
from scipy import stats

from fedpriv.data import feature_space_numeric, load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.runtime import client_key
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.models.trees import route
from fedpriv.privacy import (
    BoundedRangeDpEvent,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    chi_square_selection_test,
)
from fedpriv.privacy.audit import ks_noise_test
from fedpriv.privacy.randomness import rounding_margin
from fedpriv.privacy.range_guard import ReleaseOutOfRange, laplace_margin, noise_margin
from tests.keys import key_for, private_rng


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _fit(data, **kw):
    # An injected key: repeated fits (secure vs plain sums) draw the same noise.
    # ε = 1 stated (the estimator's default is now 2).
    # Heart's public per-hospital bound (a bundled corpus): no record count is released.
    args = {"trees": 6, "depth": 5, "epsilon": 1.0, "seed": 2, "secret_key": key_for(2),
            "max_records": declared_max_records("heart", 4, 0), **kw}  # fmt: skip
    return DPRandomForestClassifier(**args).fit(data)


@pytest.mark.parametrize("mode", ["all", "disjoint"])
@pytest.mark.parametrize("leaves", ["exponential", "gaussian", "laplace"])
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
    elif leaves == "laplace":
        # One pure ε-DP Laplace on all leaf counts (its multiplier b/Δ₁ = 1/ε in either mode).
        assert events == [dp_event.LaplaceDpEvent(1.0 / eps)]
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
    with pytest.raises(ValueError, match=r"depth must be an integer in \[0, 16\] \(0: automatic\)"):
        RandomForestConfig(depth=20)
    with pytest.raises(ValueError, match="mode must be one of"):
        RandomForestConfig(mode="bootstrap")
    allowed = r"\['gaussian', 'exponential', 'laplace'\]; got 'median'"
    with pytest.raises(ValueError, match=f"leaf_mechanism must be one of {allowed}"):
        RandomForestConfig(leaf_mechanism="median")
    assert RandomForestConfig(leaf_mechanism="laplace").leaf_mechanism == "laplace"


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
    # Heart's public bound, 4 hospitals × 160 = 640 records: 4 levels at either ε.
    assert depth == 4
    assert RandomForestConfig().depth == 0


def _laplace_forest(mode, *, eps, delta=1e-12, trees=4, depth=10, n_records=400, key=5):
    """A Laplace-leaf forest planned against a recording ledger (strategy only, no clients)."""
    cfg = RandomForestConfig(trees=trees, depth=depth, mode=mode, leaf_mechanism="laplace")
    strategy = RandomForestStrategy(cfg, space=FeatureSpace.unit_box(2), n_records=n_records)
    ledger = RecordingLedger(budget=PrivacyBudget(epsilon=eps, delta=delta))
    strategy.begin(
        n_features=2, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng(key)
    )
    return strategy, ledger


@pytest.mark.parametrize(("mode", "l1"), [("disjoint", 1.0), ("all", 4.0)])
def test_laplace_leaves_add_one_laplace_of_scale_l1_over_epsilon(mode, l1):
    # l1: what one record moves in 4 trees (measured in the disjoint-assignment test above).
    eps = 0.5
    strategy, ledger = _laplace_forest(mode, eps=eps)
    query = strategy.next_query()
    assert query.reply_length == 4 * 2**10 * 2  # 8,192 noisy counts
    counts = np.random.default_rng(1).integers(0, 40, size=query.reply_length).astype(float)
    strategy.update(query, counts)

    # One release through the ledger, of the exact counts, recorded as one ε-DP Laplace.
    assert strategy._mechanism.l1_sensitivity == l1
    assert [e.event for e in ledger.entries] == [dp_event.LaplaceDpEvent(1.0 / eps)]
    [(exact, noisy)] = ledger.releases
    np.testing.assert_array_equal(exact, counts)
    # δ = 1e-12: the pure event composes to ε (PLD: ε(δ) = ε − O(δ)), certified.
    report = ledger.report()
    assert report.certified and 0.99 * eps < report.epsilon <= eps

    # The noise is Laplace(Δ₁/ε) (KS, 8,192 draws; the grid's γd moves b by < 1e-5).
    noise, b = noisy - exact, l1 / eps
    assert ks_noise_test(noise, stats.laplace(0.0, b)) > 1e-3
    # Power: the same draws refute a scale 25 % off (KS distance 0.041) and a Gaussian
    # of the same std √2·b (distance 0.062): p ≈ 1e-13 and 1e-26 here, < 1e-12 on 7 keys.
    assert ks_noise_test(noise, stats.laplace(0.0, 1.25 * b)) < 1e-4
    assert ks_noise_test(noise, stats.laplace(0.0, b / 1.25)) < 1e-4
    assert ks_noise_test(noise, stats.norm(0.0, math.sqrt(2.0) * b)) < 1e-6

    # Leaves: the noisy counts clipped at 0, as proportions (uniform where none is left).
    clipped = np.maximum(noisy, 0.0).reshape(4, 2**10, 2)
    total = clipped.sum(axis=2, keepdims=True)
    want = np.where(total > 0, clipped / np.where(total > 0, total, 1.0), 0.5)
    np.testing.assert_allclose(strategy.model().leaf_scores, want, rtol=0, atol=1e-15)
    assert (total == 0).any() and (total > 0).any()  # both branches taken (b = 8 in "all")


def test_laplace_leaves_reserve_before_any_noise_and_range_check_the_release():
    # Below δ ≈ 1e-16 the truncated PLD of the Laplace is infinite: refused at begin,
    # before a draw, and nothing is recorded.
    with pytest.raises(PrivacyBudgetExceededError, match="LaplaceDpEvent"):
        _laplace_forest("disjoint", eps=0.5, delta=1e-18)
    # A count no honest sum reaches (> n + b·ln(d/p)): discarded, the event still spent.
    strategy, ledger = _laplace_forest("disjoint", eps=1.0, depth=3)
    query = strategy.next_query()
    counts = np.zeros(query.reply_length)
    counts[3] = 400 + laplace_margin(1.0, counts.size) + 30.0  # 30 scales past the margin
    with pytest.raises(ReleaseOutOfRange, match="leaf class counts"):
        strategy.update(query, counts)
    assert len(ledger.entries) == 1 and strategy.model() is None
    # The margin covers the scale the mechanism draws, (Δ₁ + γd)/ε, at any d: 10 trees
    # of depth 16 hold 1.3e6 counts, where γd = 3e-4 is past one part in 10^6.
    d = 10 * 2**16 * 2
    drawn = (1.0 + rounding_margin(d, "l1")) / 1.0
    assert noise_margin(strategy._mechanism, d) >= laplace_margin(drawn, d)


def test_the_laplace_default_depth_reads_the_laplace_std():
    # n / 2^D ≥ 2·√2·b with b = k/ε = 20: D = 6 (7,000 / 64 = 109 ≥ 56.6 > 54.7);
    # the scale b alone (need 40) would give 7, the EM's 1/ε (need 32) 7 too.
    strategy, _ = _laplace_forest("all", eps=0.5, trees=10, depth=0, n_records=7000)
    assert strategy.depth_ == auto_depth(7000, math.sqrt(2.0) * 20.0) == 6
    assert auto_depth(7000, 20.0) == 7
