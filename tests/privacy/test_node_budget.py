"""Node-enforced budgets: each node's own ledger admits the plan or refuses, failing closed.

A node refuses before it reads a row: a plan over its policy, a plan whose claimed
ε its own accountant does not reproduce, a round beyond the declared count, and,
under distributed noise, shares under-declared by the server.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.federation.protocol import ClientData
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy.distributed import DistributedNoise
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.node_budget import (
    LEDGER_FILE,
    NodeLedger,
    NodePolicy,
    NodeRefusal,
    read_ledger,
)
from tests.keys import key_for
from tests.privacy.test_distributed import Fixed, Probe


class Counting(Fixed):
    """Counts every answer: a refused node must never get here."""

    def __init__(self) -> None:
        self.calls = 0

    def answer(self, query, data, sample, state, key=None):
        self.calls += 1
        return super().answer(query, data, sample, state, key)


class MoreRounds(Probe):
    """Declares ``rounds`` but asks one more (the plan's reservations cover the extra
    one only if it is released beyond them; the nodes stop it first)."""

    def next_query(self):
        if self._t == self.rounds + 1:
            return None
        self.rounds, extra = self.rounds + 1, self.rounds
        try:
            return super().next_query()
        finally:
            self.rounds = extra


class UnderDeclared(Probe):
    """Asks for shares of σ/10 while its ledger records σ (the audit's broken twin)."""

    def noise_std(self, query):
        return super().noise_std(query) / 10.0


def _clients(k):
    return [ClientData(client_id=i, X=np.zeros((4, 1)), y=np.zeros(4)) for i in range(k)]


def _run(strategy, nodes, *, k=3, epsilon=1.0, noise=None, handler=None):
    runtime = InProcessRuntime(
        clients=_clients(k), handler=handler or Fixed(), seed=0, secret_key=key_for(3),
        noise=noise, node_ledgers=nodes, vectorised=False,
    )  # fmt: skip
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    return runtime.run(strategy, ledger=ledger), ledger, runtime


def test_a_plan_within_every_policy_runs_and_both_ledgers_agree(tmp_path):
    nodes = [NodeLedger(NodePolicy(max_epsilon=1.0), tmp_path / f"n{i}") for i in range(3)]
    probe, ledger, _ = _run(Probe(3), nodes)
    assert all(r is not None for r in probe.released)
    server = ledger.report().epsilon
    for node in nodes:
        (run,) = node.runs.values()
        # The node charged the whole plan when it admitted it; the server's final
        # figure is that plan, all of it released.
        assert run["epsilon"] == pytest.approx(server, rel=1e-9)
        assert run["stages"]["noise"]["answered"] == [0, 1, 2]
        assert json_runs(node) == node.runs  # persisted as it went


def json_runs(node):
    return read_ledger(node.path.parent)["runs"]


def test_a_plan_over_the_policy_is_refused_before_any_row_is_read():
    handler = Counting()
    nodes = [NodeLedger(NodePolicy(max_epsilon=0.5)) for _ in range(3)]
    with pytest.raises(NodeRefusal, match=r"over this node's max-epsilon 0.5"):
        _run(Probe(3), nodes, epsilon=1.0, handler=handler)
    assert handler.calls == 0 and all(not n.runs for n in nodes)


def test_a_server_claiming_less_than_its_plan_is_refused():
    """The server under-declares: its claimed ε is not what its declared stages give."""
    node = NodeLedger(NodePolicy(max_epsilon=10.0))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    from fedpriv.privacy.node_budget import strategy_plan

    probe = Probe(3)
    probe.begin(n_features=1, ledger=ledger, rng=None, secret_rng=key_for(1).generator("x"))
    plan = strategy_plan(probe, ledger, stage="noise")
    handler_of = {"probe": Fixed()}.__getitem__
    assert node.admit_plan("honest", dict(plan), handler_of) == pytest.approx(plan["epsilon"])
    with pytest.raises(NodeRefusal, match="this node's own accountant"):
        node.admit_plan("liar", {**plan, "epsilon": plan["epsilon"] / 2}, handler_of)
    assert list(node.runs) == ["honest"]


def test_more_rounds_than_declared_are_refused_by_the_nodes():
    handler = Counting()
    nodes = [NodeLedger(NodePolicy(max_epsilon=2.0)) for _ in range(3)]
    probe, ledger, runtime = _run(MoreRounds(3), nodes, handler=handler)
    assert handler.calls == 3 * 3  # the declared rounds, and not one answer more
    assert probe.got[3] is None  # the extra round: every node refused, nothing released
    assert runtime.communication.client_errors == 3
    assert len(ledger.entries) == 3


def test_under_declared_distributed_shares_are_refused_by_every_node():
    """Under distributed noise the node draws its share itself: asked for σ/10 it refuses."""
    handler = Counting()
    nodes = [NodeLedger(NodePolicy(max_epsilon=2.0)) for _ in range(3)]
    noise = DistributedNoise(dropouts=0, max_parties=3)
    probe, ledger, _ = _run(UnderDeclared(2), nodes, noise=noise, handler=handler)
    assert handler.calls == 0 and probe.got == [None, None] and not ledger.entries
    honest, _, _ = _run(Probe(2), [NodeLedger(NodePolicy(max_epsilon=2.0)) for _ in range(3)],
                        noise=noise)  # fmt: skip
    assert all(g is not None for g in honest.got)


def test_the_lifetime_budget_persists_across_runs_and_fails_closed(tmp_path):
    policy = NodePolicy(max_epsilon=1.0, max_lifetime_epsilon=2.5)
    for _ in range(2):
        _run(Probe(2), [NodeLedger(policy, tmp_path / f"n{i}") for i in range(3)])
    node = NodeLedger(policy, tmp_path / "n0")
    spent, _ = node.lifetime_spend()
    assert 1.9 < spent <= 2.0 and len(node.runs) == 2
    assert node.remaining()[0] == pytest.approx(2.5 - spent)
    with pytest.raises(NodeRefusal, match="lifetime spend"):
        _run(Probe(2), [NodeLedger(policy, tmp_path / f"n{i}") for i in range(3)])
    assert len(read_ledger(tmp_path / "n0")["runs"]) == 2  # nothing charged for the refusal
    with pytest.raises(ValueError, match="needs node-config 'state-dir'"):
        NodeLedger(policy)
    assert (tmp_path / "n0" / LEDGER_FILE).exists()


def test_a_non_private_run_is_refused_by_any_policy():
    nodes = [NodeLedger(NodePolicy(max_epsilon=100.0)) for _ in range(3)]
    runtime = InProcessRuntime(clients=_clients(3), handler=Fixed(), seed=0, node_ledgers=nodes)
    with pytest.raises(NodeRefusal):
        runtime.run(Probe(1), ledger=None)


def test_the_policy_reads_node_config_strictly():
    assert NodePolicy.from_node_config({"partition-id": 0}) is None
    p = NodePolicy.from_node_config({"max-epsilon": 2, "max-lifetime-delta": "1e-4"})
    assert p.max_epsilon == 2.0 and p.max_lifetime_delta == 1e-4 and math.isinf(p.max_delta)
    with pytest.raises(ValueError, match="max-delta must be a number"):
        NodePolicy.from_node_config({"max-delta": "lots"})
    with pytest.raises(ValueError, match="max-epsilon must lie in"):
        NodePolicy(max_epsilon=-1.0)


def test_fedpriv_inspect_shows_a_nodes_lifetime_spend(tmp_path, capsys):
    from fedpriv.server.cli import main

    policy = NodePolicy(max_epsilon=1.0, max_lifetime_epsilon=3.0)
    _run(Probe(2), [NodeLedger(policy, tmp_path / f"n{i}") for i in range(3)])
    spent = NodeLedger(policy, tmp_path / "n1").lifetime_spend()[0]
    assert main(["inspect", str(tmp_path / "n1")]) == 0
    text = capsys.readouterr().out
    assert f"lifetime spend: ε {spent:.6g}" in text and "over 1 run(s)" in text
    assert f"remaining: ε {3.0 - spent:.6g}" in text and "lifetime ε ≤ 3" in text
    assert main(["inspect", "--json", str(tmp_path / "n1")]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert summary["lifetime_epsilon"] == pytest.approx(spent)
