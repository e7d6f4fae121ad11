"""DP federated evaluation: the strategy + client through the runtime, the ledger, refusals."""

import numpy as np
import pytest
from fedpriv.clients.evaluation import EvaluationClient, load_scorer
from fedpriv.strategies.evaluation import LABEL, EvaluationConfig, EvaluationStrategy
from fedpriv.strategies.random_forest import RandomForestModel
from sklearn.linear_model import LogisticRegression

from fedpriv.data import load_adult
from fedpriv.evaluation import binary_metrics
from fedpriv.evaluation_dp import estimate_metrics, score_histogram
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.models.heavy_hitters import ForestModel, PrunedTree
from fedpriv.models.networks import InputMap, NetworkModel, NetworkSpec
from fedpriv.models.trees import TreeEnsemble, sample_tree
from fedpriv.privacy import GaussianMechanism, PrivacyBudget, PrivacyLedger
from fedpriv.privacy.ledger import PrivacyBudgetExceededError
from fedpriv.privacy.range_guard import ReleaseOutOfRange
from tests.keys import key_for, private_rng


@pytest.fixture(scope="module")
def adult_eval():
    """A logistic model (4,000 training rows) and Adult's test rows over 3 clients."""
    ds = load_adult()
    train = ds.split.train[:4000]
    clf = LogisticRegression(max_iter=300).fit(ds.X[train], ds.y[train])
    d = ds.X.shape[1]
    params = np.concatenate([clf.coef_[0], clf.intercept_])
    model = NetworkModel(NetworkSpec(kind="logistic", n_features=d), params, InputMap.identity(d))
    X, y = ds.X[ds.split.test], ds.y[ds.split.test]
    parts = np.array_split(np.arange(y.size), 3)
    return model, X, y, make_clients(X, y, parts)


def _strategy(model, config=None, **kw):
    return EvaluationStrategy(
        config or EvaluationConfig(),
        model_method="logistic",
        model_arrays=model.to_arrays(),
        **kw,
    )


def test_one_secure_round_releases_the_exact_histograms_plus_the_ledgers_noise(adult_eval):
    model, X, y, clients = adult_eval
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    strategy = _strategy(model, n_records=y.size)
    key = key_for(11)
    runtime = InProcessRuntime(clients=clients, handler=EvaluationClient(), seed=0, secret_key=key)
    runtime.run(strategy, ledger=ledger)
    # One event, labelled, of the mechanism calibrated to the ledger's (ε, δ).
    mech = strategy.mechanism
    assert mech == GaussianMechanism.for_budget(epsilon=1.0, delta=1e-5, l2_sensitivity=1.0)
    assert [(e.label, e.event) for e in ledger.entries] == [(LABEL, mech.dp_event)]
    assert ledger.epsilon() <= 1.0
    assert strategy.next_query() is None  # one round, one release
    # The handlers' exact histograms (the model rebuilt from the query's arrays) sum
    # to the whole test split's; plus the server's noise stream, that is the release.
    full = score_histogram(model.predict_proba(X), y, 20)
    q = _strategy(model).next_query()
    exact = sum(EvaluationClient().answer(q, c, np.arange(c.n), {}) for c in clients)
    np.testing.assert_array_equal(exact, full)
    noisy = mech.apply(exact, rng=key.derive("server").generator("noise"))
    expected = estimate_metrics(noisy, std=mech.std)
    got = strategy.result()
    np.testing.assert_array_equal(got.histogram, noisy)
    assert got.as_dict() == expected.as_dict()
    truth = binary_metrics(y, model.predict_proba(X))
    assert got.auc.error < 0.1 and got.auc.covers(truth["auc"])


def test_the_evaluations_share_is_checked_against_the_ledger_before_any_noise():
    model = NetworkModel(NetworkSpec(kind="logistic", n_features=2), np.zeros(3))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    big = _strategy(model, EvaluationConfig(epsilon=2.0))
    with pytest.raises(PrivacyBudgetExceededError):
        big.begin(
            n_features=2, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng()
        )
    assert ledger.entries == ()
    fixed = _strategy(model, EvaluationConfig(noise_multiplier=7.0))
    fixed.begin(n_features=2, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng())
    assert fixed.mechanism.noise_multiplier == 7.0
    share = _strategy(model, EvaluationConfig(epsilon=0.5, delta=1e-6))
    share.begin(n_features=2, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng())
    assert share.mechanism == GaussianMechanism.for_budget(
        epsilon=0.5, delta=1e-6, l2_sensitivity=1.0
    )


def test_a_far_out_release_is_discarded_after_its_event_is_recorded():
    model = NetworkModel(NetworkSpec(kind="logistic", n_features=2), np.zeros(3))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    strategy = _strategy(model, EvaluationConfig(bins=4), n_records=10)
    strategy.begin(
        n_features=2, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    query = strategy.next_query()
    with pytest.raises(ReleaseOutOfRange):  # 10 records cannot make a count of 1,000
        strategy.update(query, np.array([1000.0, 0, 0, 0, 0, 0, 0, 0]))
    assert len(ledger.entries) == 1 and strategy.result() is None
    strategy.update(query, None)  # the engine's follow-up: the round released nothing
    assert strategy.next_query() is None and strategy.result() is None


def test_without_a_ledger_the_reference_is_the_exact_binned_metrics(adult_eval):
    model, X, y, _ = adult_eval
    strategy = _strategy(model)
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    h = score_histogram(model.predict_proba(X), y, 20)
    strategy.update(strategy.next_query(), h)
    r = strategy.result()
    assert strategy.mechanism is None and r.std == 0.0
    assert r.as_dict() == estimate_metrics(h, std=0.0).as_dict()
    assert r.accuracy.error == 0.0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"bins": 7}, "bins must be an even integer"),
        ({"bins": 0}, "bins"),
        ({"epsilon": 1.0, "noise_multiplier": 2.0}, "not both"),
        ({"delta": 1e-5}, "needs epsilon"),
        ({"alpha": 1.5}, "alpha must lie in"),
        ({"replicas": 10}, "replicas"),
    ],
)
def test_config_refusals_name_the_key(kw, match):
    with pytest.raises(ValueError, match=match):
        EvaluationConfig(**kw)


def test_the_client_refuses_a_sample_and_an_unknown_model(adult_eval):
    model, _, _, clients = adult_eval
    q = _strategy(model).next_query()
    with pytest.raises(ValueError, match="every held-out row"):
        EvaluationClient().answer(q, clients[0], np.arange(3), {})
    with pytest.raises(ValueError, match="model_method must be one of"):
        load_scorer("nope", {})


def _models(d, rng):
    """One small released model per tree learner, built directly (a fit takes seconds)."""
    trees = [sample_tree(depth=3, n_features=d, rng=rng) for _ in range(3)]
    ensemble = TreeEnsemble(0.3, tuple(trees), tuple(rng.normal(size=(3, 8))))
    votes = rng.dirichlet([1.0, 1.0], size=(3, 8))  # (k, 2^D, C)
    forest = RandomForestModel(tuple(trees), votes)
    # A pruned tree: root split, its left child split, three leaves (BFS order).
    pruned = PrunedTree(
        feature=np.array([0, 1, -1, -1, -1]),
        threshold=np.array([0.5, 0.2, 0.0, 0.0, 0.0]),
        left=np.array([1, 3, -1, -1, -1]),
        right=np.array([2, 4, -1, -1, -1]),
        key=np.zeros(5, dtype=np.int64),
    )
    leaves = tuple(rng.dirichlet([1.0, 1.0], size=5) for _ in range(2))
    lumberjack = ForestModel((pruned, pruned), leaves, pooled=True)
    return {"boosting": ensemble, "random_forest": forest, "lumberjack": lumberjack}


def test_the_loaders_rebuild_each_released_model():
    """Each tree learner's ``to_arrays()`` rebuilt on the client scores like the model."""
    rng = np.random.default_rng(5)
    X = rng.random((300, 4))
    for method, model in _models(4, rng).items():
        scorer = load_scorer(method, model.to_arrays())
        np.testing.assert_allclose(scorer(X), model.predict_proba(X), rtol=0, atol=1e-12)
        assert np.ptp(scorer(X)) > 0.05, method  # the rows do reach different leaves
