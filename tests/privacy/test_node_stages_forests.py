"""The stages the tree learners declare to the nodes, checked against recorded full fits.

Random forest (Gaussian, Laplace and exponential leaves; all and disjoint
trees), Lumberjack (its sparse-threshold structure, one event for the forest;
Gaussian or exponential leaves; the recalibration round) and bdpe (level sums
feeding the exponential mechanism, the last level also feeding the Laplace
leaves, the calibration counts): every query a node answers belongs to a
declared stage, the node's own sensitivity reproduces the strategy's noise
multiplier, one extreme record moves real replies by no more than the claimed
Δ (and by more than half of it: the check has power), and a tampered setting
changes Δ or is refused.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from fedpriv.clients.bdpe import BDPEClient
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.clients.random_forest import RandomForestClient
from fedpriv.strategies.bdpe import BDPEConfig, BDPEStrategy
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy

from fedpriv.federation.node_stage import StageMechanism
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.privacy.distributed import DistributedNoise
from tests.keys import key_for
from tests.privacy.node_stages import (
    adversaries,
    check_membership,
    clients_of,
    data,
    fit,
    node_epsilon,
    node_multiplier,
    replay,
)

RELATIVE = 1e-9


def _same_epsilon(handler, stages, ledger):
    """The node's ε from its own sensitivities is the server ledger's (to the accountants'
    numerics: equivalent Gaussian compositions, e.g. k releases at σ and one at σ/√k)."""
    node = node_epsilon(handler, stages, ledger.accounting_delta)
    assert node == pytest.approx(ledger.epsilon(), rel=1e-3)


def _forest(leaf_mechanism="gaussian", mode="all", noise=None):
    X, y = data()
    config = RandomForestConfig(trees=5, depth=3, mode=mode, leaf_mechanism=leaf_mechanism)
    strategy = RandomForestStrategy(
        config, space=FeatureSpace.unit_box(X.shape[1]), n_records=len(y)
    )
    clients = clients_of(X, y)
    recorder, _ = fit(strategy, RandomForestClient(), clients, noise=noise)
    return strategy, recorder.queries, clients


def test_random_forest_distributed_stage_is_the_shares_stage():
    # Under distributed noise the nodes add the leaf noise: the stage is the
    # GaussianRounds stage, without participation amplification, at the shares' std.
    strategy, queries, _ = _forest(noise=DistributedNoise(dropouts=0, max_parties=3))
    handler = RandomForestClient()
    (stage,) = strategy.node_stages()
    check_membership(handler, [stage], queries)
    assert node_multiplier(handler, stage) == pytest.approx(
        strategy.noise_multiplier_, rel=RELATIVE
    )
    assert stage.participation == 1.0
    assert strategy.noise_std(queries[0]) == pytest.approx(stage.noise, rel=1e-15)


@pytest.mark.parametrize("mode", ["all", "disjoint"])
@pytest.mark.parametrize("leaf_mechanism", ["gaussian", "laplace", "exponential"])
def test_random_forest_stage_matches_its_queries_and_noise(leaf_mechanism, mode):
    strategy, queries, clients = _forest(leaf_mechanism, mode)
    handler = RandomForestClient()
    stages = strategy.node_stages()
    template = check_membership(handler, stages, queries)
    (stage,) = stages
    assert stage.name == "leaf_counts" and stage.rounds == 1
    if leaf_mechanism == "gaussian":
        z = node_multiplier(handler, stage)
        assert z == pytest.approx(strategy.noise_multiplier_, rel=RELATIVE)
    elif leaf_mechanism == "laplace":
        inv_eps = node_multiplier(handler, stage)
        assert inv_eps == pytest.approx(1.0 / strategy._mechanism.epsilon, rel=RELATIVE)
    else:
        assert stage.mechanism is StageMechanism.BOUNDED_RANGE
        assert stage.noise == strategy.eta_
        assert stage.uses == (1 if mode == "disjoint" else 5)
        assert stage.unit == template["leaf_counts"].l1
    _same_epsilon(handler, stages, strategy._ledger)
    # (c) one extreme record, every row in the sample, the client's own key (disjoint).
    key = key_for(11)
    worst = replay(handler, queries, clients[0], adversaries(4, 2), key=key)
    assert worst["leaf_counts"] > 0.5, worst  # a half-claimed Δ would be exceeded


def test_random_forest_tampered_settings_change_the_sensitivity_or_are_refused():
    _, queries, clients = _forest("gaussian", "disjoint")
    handler = RandomForestClient()
    (q,) = queries
    base = handler.reply_sensitivity(q)
    # Every tree seeing every record (mode "all") is a larger Δ than the stage's: √k.
    every = handler.reply_sensitivity(dataclasses.replace(q, config={**q.config, "mode": "all"}))
    assert every.l2 == pytest.approx(math.sqrt(5))
    assert every.l2 > base.l2 == 1.0
    with pytest.raises(ValueError, match=r"sampling_rate must be 1\.0"):
        handler.reply_sensitivity(dataclasses.replace(q, sampling_rate=0.5))
    with pytest.raises(ValueError, match="mode must be one of"):
        handler.reply_sensitivity(dataclasses.replace(q, config={**q.config, "mode": "x"}))
    missing = {k: v for k, v in q.config.items() if k != "trees"}
    with pytest.raises(ValueError, match="lacks 'trees'"):
        handler.reply_sensitivity(dataclasses.replace(q, config=missing))
    # The answer uses the checked count: more trees in the arrays than the config says
    # is refused before a row is read.
    more = dataclasses.replace(q, config={**q.config, "trees": 4})
    with pytest.raises(ValueError, match="trees"):
        handler.reply_sensitivity(more)  # the length no longer matches
    rows = clients[0]
    with pytest.raises(ValueError, match="query holds 5 trees; its config says 4"):
        handler.answer(more, rows, np.arange(rows.n), {}, key_for(1))


def _lumberjack(leaf_mechanism="gaussian", recalibrate_share=0.0, trees=4, depth=9):
    X, y = data()
    config = LumberjackConfig(
        trees=trees, depth=depth, stage_height=4, leaf_mechanism=leaf_mechanism,
        recalibrate_share=recalibrate_share,
    )  # fmt: skip
    strategy = LumberjackStrategy(config, space=FeatureSpace.unit_box(X.shape[1]), n_records=len(y))
    clients = clients_of(X, y)
    recorder, _ = fit(strategy, LumberjackClient(), clients, epsilon=4.0)
    return strategy, recorder.queries, clients


@pytest.mark.parametrize(
    ("leaf_mechanism", "recalibrate"), [("gaussian", 0.0), ("exponential", 0.0), ("gaussian", 0.2)]
)
def test_lumberjack_stages_match_their_queries_and_noise(leaf_mechanism, recalibrate):
    strategy, queries, clients = _lumberjack(leaf_mechanism, recalibrate)
    handler = LumberjackClient()
    stages = {s.name: s for s in strategy.node_stages()}
    template = check_membership(handler, list(stages.values()), queries)
    structure = stages["structure"]
    # Theorem 6: one (ε₁, δ₁) event for the whole forest, whatever the stage count.
    assert structure.mechanism is StageMechanism.APPROX and structure.uses == 1
    assert structure.rounds == len(strategy.config.heights) == 3
    assert structure.unit == template["structure"].l1 == 4 * 4
    k = strategy.config.trees
    if leaf_mechanism == "gaussian":
        z = node_multiplier(handler, stages["leaves"])
        assert z == pytest.approx(strategy.leaf_std_ / math.sqrt(k), rel=RELATIVE)
    else:
        assert stages["leaves"].mechanism is StageMechanism.BOUNDED_RANGE
        assert (stages["leaves"].noise, stages["leaves"].uses) == (strategy.eta_, k)
    if recalibrate:
        z = node_multiplier(handler, stages["recalibration"])
        assert z == pytest.approx(strategy._recal.noise.noise_multiplier, rel=RELATIVE)
    else:
        assert "recalibration" not in stages
    _same_epsilon(handler, list(stages.values()), strategy._ledger)
    worst = replay(handler, queries, clients[0], adversaries(4, 2))
    assert set(worst) == set(stages)
    assert worst["structure"] > 0.5 and worst["leaves"] > 0.5, worst


def test_lumberjack_leaf_noise_is_the_declared_std():
    # The Gaussian leaves draw z·(√k + γ√d) per count: the std a node's z is derived from.
    strategy, queries, _ = _lumberjack("gaussian")
    (stage,) = [s for s in strategy.node_stages() if s.name == "leaves"]
    d = queries[-1].reply_length
    assert strategy.leaf_noise(d) <= stage.noise
    assert strategy.leaf_noise(stage.reply_length) == pytest.approx(stage.noise, rel=1e-15)
    assert strategy.leaf_noise(d) > strategy.leaf_std_


def test_lumberjack_tampered_settings_change_the_sensitivity_or_are_refused():
    _, queries, _ = _lumberjack()
    handler = LumberjackClient()
    q = queries[0]
    base = handler.reply_sensitivity(q)
    taller = dataclasses.replace(q, config={**q.config, "height": 8})
    assert handler.reply_sensitivity(taller).l1 == 2 * base.l1
    with pytest.raises(ValueError, match="height must be an integer in \\[1, 10\\]"):
        handler.reply_sensitivity(dataclasses.replace(q, config={**q.config, "height": 11}))
    with pytest.raises(ValueError, match="sampling_rate"):
        handler.reply_sensitivity(dataclasses.replace(q, sampling_rate=0.25))
    with pytest.raises(ValueError, match="kind must be one of"):
        handler.reply_sensitivity(dataclasses.replace(q, config={**q.config, "kind": "other"}))


def _bdpe(**kw):
    X, y = data()
    config = BDPEConfig(trees=3, depth=3, **kw)
    strategy = BDPEStrategy(config, numeric=np.ones(X.shape[1], bool), n_records=len(y))
    clients = clients_of(X, y)
    recorder, _ = fit(strategy, BDPEClient(), clients)
    return strategy, recorder.queries, clients


def test_bdpe_stages_match_their_queries_and_noise():
    strategy, queries, clients = _bdpe()
    handler = BDPEClient()
    stages = {s.name: s for s in strategy.node_stages()}
    template = check_membership(handler, list(stages.values()), queries)
    G = strategy.n_candidates
    assert (stages["split"].rounds, stages["leaves"].rounds, stages["calibration"].rounds) == (
        6,
        3,
        1,
    )
    assert stages["split"].unit == stages["leaves"].unit == template["split"].l1 == 1 + G
    assert stages["split"].noise == strategy.epsilon_level_
    (leaves,) = stages["leaves"].extra  # the last level's sums also release the leaves
    assert stages["leaves"].noise == strategy.epsilon_level_
    assert leaves.part == "leaf_masses" and leaves.length == 4 * 2 ** (strategy.config.depth - 1)
    assert template["leaves"].parts["leaf_masses"] == (1.0, 1.0)
    # Every selection ε_level, every tree's Laplace leaves and the calibration: the
    # node's own accountant gives the server ledger's ε.
    ledger = strategy._ledger
    node = node_epsilon(handler, list(stages.values()), ledger.accounting_delta)
    assert node == pytest.approx(ledger.planned_epsilon(), rel=1e-6)
    assert node <= strategy._budget.epsilon
    worst = replay(handler, queries, clients[0], adversaries(4, 2))
    assert set(worst) == set(stages)
    assert all(w > 0.5 for w in worst.values()), worst


def test_bdpe_tampered_settings_change_the_sensitivity_or_are_refused():
    strategy, queries, clients = _bdpe()
    handler = BDPEClient()
    q = queries[1]
    base = handler.reply_sensitivity(q)
    wider = dataclasses.replace(q, config={**q.config, "candidates": 2 * strategy.n_candidates})
    assert handler.reply_sensitivity(wider).l1 > base.l1
    # The answer uses the checked count: a config that under-states the candidates is
    # refused before a row is read.
    fewer = dataclasses.replace(q, config={**q.config, "candidates": 3})
    rows = clients[0]
    with pytest.raises(ValueError, match="candidates"):
        handler.answer(fewer, rows, np.arange(rows.n), {})
    # The last level is the leaves' stage: a query cannot pass one off as a split.
    deeper = dataclasses.replace(q, config={**q.config, "level": 2})
    assert handler.reply_sensitivity(deeper).stage == "leaves"
    with pytest.raises(ValueError, match="level must be an integer in \\[0, 2\\]"):
        handler.reply_sensitivity(dataclasses.replace(q, config={**q.config, "level": 3}))
    with pytest.raises(ValueError, match="sampling_rate"):
        handler.reply_sensitivity(dataclasses.replace(q, sampling_rate=0.5))
    with pytest.raises(ValueError, match="phase must be one of"):
        handler.reply_sensitivity(dataclasses.replace(q, config={"phase": "other"}))


@pytest.mark.parametrize("learner", ["random_forest", "lumberjack", "bdpe"])
def test_an_under_claimed_sensitivity_is_caught_by_the_same_records(learner, monkeypatch):
    # The twin of the replay checks: a handler that claims half its Δ is caught.
    run, handler = {
        "random_forest": (_forest, RandomForestClient()),
        "lumberjack": (_lumberjack, LumberjackClient()),
        "bdpe": (_bdpe, BDPEClient()),
    }[learner]
    _, queries, clients = run()
    honest = type(handler).reply_sensitivity

    def halved(self, query):
        rs = honest(self, query)
        return dataclasses.replace(rs, l1=rs.l1 / 2, l2=rs.l2 / 2)

    monkeypatch.setattr(type(handler), "reply_sensitivity", halved)
    with pytest.raises(AssertionError):
        replay(handler, queries, clients[0], adversaries(4, 2), key=key_for(11))
