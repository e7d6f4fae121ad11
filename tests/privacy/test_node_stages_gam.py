"""The stages DP-EBM (``dp_gam``) declares to the nodes, checked against recorded full fits.

Two stages: ``intercept`` (round 0: the intercept's sums and, with the sketch,
the fine histograms, each block normalised, released at z per block = one
release at z/√B) and ``term`` (every later round: a column, the binary group,
the pair selection or a pair, each normalised to one column's sensitivity and
released at z). Every query a node answers belongs to one, the node's own
sensitivity reproduces the strategy's multiplier, one extreme record moves real
replies by no more than the claimed Δ (and by more than half of it: the check
has power), and a tampered setting changes Δ or is refused.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from fedpriv.clients.gam import GAMClient
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig

from fedpriv.federation.protocol import ClientData
from fedpriv.models.gam import Terms
from fedpriv.models.gam_sensitivity import column_sensitivity
from fedpriv.privacy.randomness import rounding_margin
from tests.privacy.node_stages import (
    adversaries,
    check_membership,
    clients_of,
    fit,
    node_epsilon,
    node_multiplier,
    replay,
)

RELATIVE = 1e-9
#: Two numeric columns (4 equal bins) and four binary ones (cut at ½).
NUMERIC, BINARY = 2, 4


def _terms() -> Terms:
    m = NUMERIC + BINARY
    return Terms(
        np.arange(m),
        np.zeros(m),
        np.full(m, -1),
        [True] * NUMERIC + [False] * BINARY,
        (*([0.25, 0.5, 0.75],) * NUMERIC, *([0.5],) * BINARY),
    )


def _data(n=450, n_classes=2, seed=0):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.random((n, NUMERIC)), (rng.random((n, BINARY)) < 0.4).astype(float)])
    score = 2.0 * X[:, 0] + X[:, 2] + 0.3 * rng.standard_normal(n)
    y = np.minimum((score / 3.0 * n_classes).astype(int), n_classes - 1).astype(float)
    return X, y


def _gam(n_classes=2, **kw):
    X, y = _data(n_classes=n_classes)
    config = GAMConfig(**kw)
    strategy = DPGAMStrategy(config, terms=_terms(), n_records=len(y), n_classes=n_classes)
    clients = clients_of(X, y)
    recorder, _ = fit(strategy, GAMClient(), clients)
    return strategy, recorder.queries, clients


CASES = {
    "default": dict(),
    "no-sketch": dict(quantile_bins=False, rounds=20),
    "pairs": dict(rounds=30, interactions=2, interaction_rounds=6),
    "softmax-pairs": dict(n_classes=3, rounds=30, interactions=2, interaction_rounds=6),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gam_stages_match_their_queries_and_noise(case):
    kw = dict(CASES[case])
    n_classes = kw.get("n_classes", 2)
    strategy, queries, clients = _gam(**kw)
    handler = GAMClient()
    stages = {s.name: s for s in strategy.node_stages()}
    template = check_membership(handler, list(stages.values()), queries)
    assert (stages["intercept"].rounds, stages["term"].rounds) == (1, strategy.config.rounds - 1)
    phases = {q.config["phase"] for q in queries}
    want = {"intercept", "term"} | ({"group"} if n_classes == 2 else set())
    want |= {"select", "pair"} if "interactions" in kw else set()
    assert phases == want
    # (c)'s twin: the same records exceed a half-claimed Δ (tests/privacy/node_stages.py).
    z = strategy.noise_multiplier_
    blocks = 2 if strategy.config.quantile_bins else 1
    assert node_multiplier(handler, stages["term"]) == pytest.approx(z, rel=RELATIVE)
    assert node_multiplier(handler, stages["intercept"]) == pytest.approx(
        z / math.sqrt(blocks), rel=RELATIVE
    )
    assert template["term"].l2 == pytest.approx(column_sensitivity(n_classes))
    assert template["intercept"].l2 == pytest.approx(math.sqrt(blocks))
    # Every stage's participation and accounting are the plan's.
    assert {(s.participation, s.accounting) for s in stages.values()} == {(1.0, "valid")}
    # The node's ε from its own sensitivities is the ledger's: round 0 as one release at
    # z/√B is the plan's B releases at z.
    ledger = strategy._noise.ledger
    node = node_epsilon(handler, list(stages.values()), ledger.accounting_delta)
    assert node == pytest.approx(ledger.epsilon(), rel=1e-3)
    worst = replay(handler, queries, clients[0], adversaries(NUMERIC + BINARY, n_classes))
    assert worst["intercept"] > 0.99 and worst["term"] > 0.5, worst


def test_gam_round_zero_blocks_carry_at_least_the_declared_noise():
    # Each block of round 0 is released at z with the std of the whole reply's one
    # release at z/√B (or more): what the node accounts.
    strategy, queries, _ = _gam(rounds=4)
    (stage,) = [s for s in strategy.node_stages() if s.name == "intercept"]
    noise = strategy._noise
    seen = []

    def spy(mechanism, value, **kw):  # the std GaussianMechanism.apply would draw
        margin = rounding_margin(np.size(value), "l2")
        seen.append(mechanism.noise_multiplier * (mechanism.l2_sensitivity + margin))
        return np.asarray(value, dtype=np.float64)

    original = noise.ledger.release
    noise.ledger.release = spy
    try:
        strategy._release_head(np.zeros(queries[0].reply_length))
    finally:
        noise.ledger.release = original
    assert len(seen) == 2
    assert min(seen) >= stage.noise * (1 - 1e-15)
    assert min(seen) == pytest.approx(stage.noise, rel=1e-12)


def test_gam_tampered_settings_change_the_sensitivity_or_are_refused():
    _, queries, clients = _gam(rounds=30, interactions=2, interaction_rounds=6)
    handler = GAMClient()
    by_phase = {q.config["phase"]: q for q in queries}
    term = by_phase["term"]
    base = handler.reply_sensitivity(term)
    # More classes: a larger per-bin sensitivity than the binary stage declares.
    three = dataclasses.replace(term, config={**term.config, "n_classes": 3})
    assert handler.reply_sensitivity(three).l2 > base.l2
    with pytest.raises(ValueError, match=r"sampling_rate must be 1\.0"):
        handler.reply_sensitivity(dataclasses.replace(term, sampling_rate=0.5))
    with pytest.raises(ValueError, match="lacks 'n_classes'"):
        handler.reply_sensitivity(dataclasses.replace(term, config={"phase": "term", "term": 0}))
    # The answer scales by the checked settings: a selection whose config names fewer
    # candidates than its arrays hold, or a model of other classes, is refused.
    rows: ClientData = clients[0]
    select = by_phase["select"]
    fewer = dataclasses.replace(select, config={**select.config, "candidates": 1})
    with pytest.raises(ValueError, match="candidate pairs; its config says 1"):
        handler.answer(fewer, rows, np.arange(rows.n), {})
    with pytest.raises(ValueError, match="classes; its config says 3"):
        handler.answer(three, rows, np.arange(rows.n), {})
    # The group's normalisation follows the checked sparsity: a larger sparsity scales
    # a record's share down further, never up (its Δ stays a column's).
    group = by_phase["group"]
    s = group.config["sparsity"]
    loose = dataclasses.replace(group, config={**group.config, "sparsity": 4 * s})
    a = handler.answer(group, rows, np.arange(rows.n), {})
    b = handler.answer(loose, rows, np.arange(rows.n), {})
    assert handler.reply_sensitivity(loose).l2 == handler.reply_sensitivity(group).l2
    assert np.abs(b).sum() < np.abs(a).sum()
