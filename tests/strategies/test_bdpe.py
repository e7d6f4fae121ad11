"""bdpe_α's strategy: its plan, its exponential mechanism, aborted and hostile rounds."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.bdpe import BDPEClient
from fedpriv.experiments.audit.runs import run_fit
from fedpriv.server.estimators import BDPEClassifier
from fedpriv.strategies.bdpe import BDPEConfig, BDPEStrategy
from scipy import stats

from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.federation.protocol import ClientData
from fedpriv.models.bdpe import score_sensitivity, split_scores
from fedpriv.privacy import BoundedRangeDpEvent, PrivacyBudget, PrivacyLedger
from fedpriv.privacy.selection import ExponentialMechanism
from tests.keys import key_for, private_rng

#: Heart's public per-hospital bound (a bundled corpus): no record count is released.
HEART_BOUND = declared_max_records("heart", 4, 0)


def _clients(X, y, k=2):
    return [
        ClientData(client_id=i, X=a, y=b)
        for i, (a, b) in enumerate(zip(np.array_split(X, k), np.array_split(y, k), strict=True))
    ]


def test_the_plan_keeps_its_shares_at_one_scale_and_spends_the_budget():
    clf = BDPEClassifier(trees=3, depth=2, epsilon=1.0, beta_tree=0.4, calibrate_share=0.2,
                         seed=0, secret_key=key_for(1), max_records=HEART_BOUND,
                         ).fit(load_heart())  # fmt: skip
    events = [e.event for e in clf.ledger_.entries]
    splits = [e for e in events if isinstance(e, BoundedRangeDpEvent)]
    laplace = [e for e in events if isinstance(e, dp_event.LaplaceDpEvent)]
    assert len(splits) == 3 * 2 and len(laplace) == 3 + 1 and len(events) == 10
    # The shares of basic composition (β_tree (1 − s) ε / (T D), (1 − β_tree)(1 − s) ε / T,
    # s ε), all multiplied by one scale x > 1.
    x = splits[0].epsilon / (0.4 * 0.8 / 6)
    assert x > 1.05 and all(e == splits[0] for e in splits)
    assert 1.0 / laplace[0].noise_multiplier == pytest.approx(x * 0.6 * 0.8 / 3, rel=1e-8)
    assert 1.0 / laplace[-1].noise_multiplier == pytest.approx(x * 0.2, rel=1e-8)
    basic = sum(e.epsilon for e in splits) + sum(1.0 / e.noise_multiplier for e in laplace)
    report = clf.privacy_report_
    # Basic composition is then x·ε, still a (x·ε, 0)-DP guarantee, reported as such;
    # the certified figure at the run's δ spends the budget: [0.99 ε, ε].
    assert basic == pytest.approx(x, rel=1e-8)
    assert report.pure_epsilon == pytest.approx(basic, rel=1e-12)
    assert report.to_dict()["epsilon_pure_basic_composition"] == report.pure_epsilon
    assert 0.99 <= clf.epsilon_spent_ <= 1.0
    assert clf.model_.n_trees == 3 and clf.model_.depth == 2 and clf.model_.platt[0] > 0


def test_without_noise_the_root_takes_the_planted_split():
    rng = np.random.default_rng(0)
    X = rng.random((400, 3))
    y = (X[:, 1] > 0.5).astype(float)
    strategy = BDPEStrategy(BDPEConfig(trees=2, depth=2), numeric=np.ones(3, bool), n_records=400)
    run = run_fit(strategy=strategy, handler=BDPEClient(), clients=_clients(X, y),
                  epsilon=math.inf, delta=1e-5, seed=0, key=key_for(2))  # fmt: skip
    m = run.model
    assert m.feature[0, 0] == 1 and abs(m.threshold[0, 0] - 0.5) < 0.05
    p = m.predict_proba(X)
    assert np.mean((p > 0.5) == (y == 1)) > 0.95


def test_the_root_split_follows_the_exponential_mechanism_on_the_summed_scores():
    # Two candidates (x0 ≤ ½, x1 ≤ ½); 250 fits with fresh keys. The root's choice must
    # follow exp(ε s/Δ) (monotone scores) of the *aggregated* sums, not exp(ε s/(2Δ)).
    rng = np.random.default_rng(1)
    X = (rng.random((200, 2)) < 0.5).astype(float)
    y = np.where(rng.random(200) < 0.95, X[:, 0], 1 - X[:, 0])  # x0 ≤ ½ splits best
    clients = _clients(X, y)
    cfg = BDPEConfig(
        trees=1, depth=1, split_levels=1, beta_tree=0.5, objective="fixed", calibrate_share=0.0
    )
    picks, trials = [], 250
    for t in range(trials):
        s = BDPEStrategy(cfg, numeric=np.zeros(2, bool), n_records=201)
        run = run_fit(strategy=s, handler=BDPEClient(), clients=clients, epsilon=2.0,
                      delta=1e-5, seed=t, key=key_for(1000 + t))  # fmt: skip
        picks.append(int(run.model.feature[0, 0]))
    agg = np.sum(list(run.replies[0].values()), axis=0)  # the exact sum the server scores
    total, left = agg[:2].reshape(1, 2), agg[2:].reshape(1, 2, 2)
    scores = split_scores(left, total, 1.0)[0]
    sens = score_sensitivity(1.0, 201)
    counts = np.bincount(picks, minlength=2)
    eps_level = s.epsilon_level_  # x · β_tree · ε / (T · D), x the plan's scale
    assert eps_level == pytest.approx(s.plan_.scale.scale * 0.5 * 2.0 / (1 * 1))
    honest = ExponentialMechanism(epsilon=eps_level, sensitivity=sens, monotone=True)
    wrong = ExponentialMechanism(epsilon=eps_level, sensitivity=sens, monotone=False)
    p_honest = stats.chisquare(counts, honest.probabilities(scores) * trials).pvalue
    p_wrong = stats.chisquare(counts, wrong.probabilities(scores) * trials).pvalue
    assert p_honest > 1e-3 and p_wrong < 1e-3, (counts, honest.probabilities(scores))


def _begun(cfg, n_features=2, eps=2.0):
    s = BDPEStrategy(cfg, numeric=np.ones(n_features, bool), n_records=50)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=1e-5))
    s.begin(n_features=n_features, ledger=ledger, rng=np.random.default_rng(0),
            secret_rng=private_rng(3))  # fmt: skip
    return s, ledger


def test_an_aborted_level_releases_nothing_and_an_aborted_last_level_drops_the_tree():
    s, ledger = _begun(BDPEConfig(trees=2, depth=2, split_levels=2))
    q = s.next_query()
    s.update(q, None)  # root aborted: a public split, nothing spent
    assert len(ledger.entries) == 0 and s._feature[0] in (0, 1)
    q = s.next_query()
    s.update(q, None)  # last level aborted: no leaves to release, no tree
    assert len(ledger.entries) == 0 and s.model().n_trees == 0
    G = s.n_candidates
    q = s.next_query()
    s.update(q, np.full(2 * (G + 1), 5.0))
    q = s.next_query()
    s.update(q, np.full(4 * (G + 1), 5.0))
    assert s.model().n_trees == 1 and len(ledger.entries) == 3  # two levels, one leaf release


def test_hostile_sums_are_clipped_to_what_an_honest_sum_can_be():
    s, _ = _begun(BDPEConfig(trees=1, depth=1, split_levels=2))
    G = s.n_candidates
    hostile = np.concatenate([[1e9, -1e9], np.full(2 * G, 1e12)])
    s.update(s.next_query(), hostile)  # clipped: node ≤ m = 50, left ≤ node; released
    m = s.model()
    assert m.n_trees == 1 and np.all(np.isfinite(m.leaf_values)) and np.isfinite(m.beta[0])


def test_the_client_cache_of_margins_gives_the_replies_of_a_fresh_client():
    # The handler continues its cached margin sum while the released ensemble only grows;
    # a runtime may drop that state: every reply must be the same floats either way.
    rng = np.random.default_rng(4)
    X = rng.random((300, 3))
    y = (X[:, 0] + 0.3 * rng.random(300) > 0.6).astype(float)
    clients = _clients(X, y)
    strategy = BDPEStrategy(BDPEConfig(trees=3, depth=2), numeric=np.ones(3, bool), n_records=300)
    run = run_fit(strategy=strategy, handler=BDPEClient(), clients=clients, epsilon=2.0,
                  delta=1e-5, seed=0, key=key_for(5))  # fmt: skip
    kept, state = BDPEClient(), {}
    for query, replies in zip(run.queries, run.replies, strict=True):
        cached = kept.answer(query, clients[0], np.arange(clients[0].n), state)
        fresh = BDPEClient().answer(query, clients[0], np.arange(clients[0].n), {})
        np.testing.assert_array_equal(cached, fresh)
        np.testing.assert_array_equal(cached, replies[0])
    assert state["margin_trees"] == 3  # the calibration round saw all three trees
