"""A lying coordinator against the real node code: every attack refused, with its twin.

The ServerApp runs honestly over the loopback grid (``tests/server/loopback.py``),
and ``forge`` rewrites what the nodes receive: a lying coordinator. The nodes are
the real ClientApp handlers (``clients/app.py``) with their own ledgers
(:mod:`fedpriv.privacy.node_budget`, :mod:`fedpriv.privacy.node_plan`). Each attack
is replayed twice: against the node as it is (refused before a row is read,
aborted, or nothing released) and against a *twin* that restores the node's old
trust in the coordinator (its ε from the declared events, queries unchecked),
which the same attack then gets through: so each test has power.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from fedpriv.federation.status import RunFailedError
from fedpriv.privacy import node_budget
from fedpriv.privacy.node_budget import NodeRefusal
from tests.server.test_flower_loopback import run_app

JOB = {
    "dataset": "heart",
    "num-clients": 4,
    "method": "boosting",
    "rounds": 3,
    "depth": 2,
    "epsilon": 1.0,
    "seed": 5,
    "round-timeout": 1.0,
}
POLICY = {p: {"max-epsilon": 1.0} for p in range(4)}


class Coordinator:
    """``forge`` for the loopback grid: rewrites one kind of message to every node and
    records what the nodes answered."""

    def __init__(self, kind: str, rewrite) -> None:
        self.kind, self.rewrite, self.forged = f"query.{kind}", rewrite, 0

    def __call__(self, pid: int, kind: str, msg: Message) -> Message:
        if kind != self.kind:
            return msg
        config = dict(msg.content["config"])
        new = self.rewrite(config)
        if new is None:
            return msg
        self.forged += 1
        content = RecordDict({k: copy.deepcopy(v) for k, v in msg.content.items()})
        content["config"] = ConfigRecord(new)
        return Message(content=content, metadata=copy.deepcopy(msg.metadata))


def _rewrite_plan(change):
    """A ``rewrite`` of the plan that rides on the key exchange."""

    def rewrite(config):
        if "plan" not in config:
            return None
        plan = json.loads(config["plan"])
        change(plan)
        return {**config, "plan": json.dumps(plan)}

    return rewrite


def _legacy_admission(monkeypatch):
    """The twin: the node takes the declared events' ε and checks queries only against
    the stages' noise (the behaviour the review broke)."""
    from fedpriv.privacy import accounting
    from fedpriv.privacy.events import event_from_dict
    from fedpriv.privacy.node_plan import derive_stage

    def admit(plan, handler_of, *, run_id):
        stages = [node_budget.NodeStage.from_dict(s) for s in plan["stages"]]
        admitted = [derive_stage(s, handler_of) for s in stages]
        items = [(event_from_dict(ev), int(n)) for ev, n in plan.get("events", [])]
        eps = float(accounting.account(items, float(plan["accounting_delta"])).epsilon)
        return admitted, eps

    monkeypatch.setattr(node_budget, "admit_stages", admit)


def _answered(out) -> int:
    comm = json.loads((out / "communication.json").read_text())
    return int(comm["rounds_released"])


def _run(monkeypatch, tmp_path, job, forge):
    """The run's result folder, or the failure's text when the nodes stopped it."""
    try:
        return run_app(monkeypatch, tmp_path, job, forge=forge, node_config=POLICY), None
    except (RunFailedError, RuntimeError, NodeRefusal) as err:
        return next(tmp_path.iterdir(), None), str(err)


# -- 1. the node computes ε itself: a plan whose stages carry less noise than its events ---
def _thin_stages(plan):
    for stage in plan["stages"]:
        stage["noise"] /= 1000.0  # z 20 -> 0.02 in the review's words


@pytest.mark.parametrize("twin", [False, True], ids=["node", "twin"])
def test_stages_with_less_noise_than_the_declared_events_are_refused(monkeypatch, tmp_path, twin):
    if twin:
        _legacy_admission(monkeypatch)
    job = {**JOB, "noise": "distributed", "tolerated-dropouts": 1}
    forge = Coordinator("keys", _rewrite_plan(_thin_stages))

    def thin_shares(config):  # ... and asks the shares its thin stages allow
        if "noise-share-std" not in config:
            return None
        return {**config, "noise-share-std": config["noise-share-std"] / 1000.0}

    shares = Coordinator("fedpriv", thin_shares)

    def both(pid, kind, msg):
        return shares(pid, kind, forge(pid, kind, msg))

    out, failure = _run(monkeypatch, tmp_path, job, both)
    assert forge.forged == 4
    if twin:  # today's node: admitted on the events' ε, thin shares answered
        assert failure is None and _answered(out) == 3
    else:
        assert failure is not None and "key exchange" in failure
        assert shares.forged == 0  # not one query reached a node


# -- 2. every query is checked against the admitted plan: q = 1, clip × 10 ---------------
QUERY_ATTACKS = {
    "q=1": lambda c: {**c, "q.sampling_rate": 1.0},
    "record_bound x10": lambda c: {**c, "q.record_bound": c["q.record_bound"] * 10},
    "longer reply": lambda c: {**c, "q.reply_length": c["q.reply_length"] + 8},
}


@pytest.mark.parametrize("twin", [False, True], ids=["node", "twin"])
@pytest.mark.parametrize("attack", sorted(QUERY_ATTACKS))
def test_a_query_outside_its_admitted_stage_is_refused(monkeypatch, tmp_path, attack, twin):
    if twin:
        from fedpriv.privacy import node_plan

        monkeypatch.setattr(node_budget, "match_query", lambda admitted, *a, **k: 0)
        assert node_plan  # the twin skips the query check only
    forge = Coordinator("fedpriv", QUERY_ATTACKS[attack])
    out, failure = _run(monkeypatch, tmp_path, {**JOB, "max-aborted-share": 1.0}, forge)
    assert forge.forged >= 4
    if twin:
        assert out is not None and failure is None
    else:
        # Every node refused every forged round before reading a row: nothing released.
        assert failure is not None or _answered(out) == 0


# -- 4. rounds beyond the plan: a stage without a mechanism, and under-declared rounds -----
def _mute_first_stage(plan):
    plan["stages"][0]["mechanism"] = "none"
    plan["stages"][0]["noise"] = 0.0
    plan["events"] = []  # the liar's ledger accounts nothing for it
    plan["epsilon"] = math.nan  # filled by the node below


def test_a_stage_declared_without_a_mechanism_reads_no_row(monkeypatch, tmp_path):
    def change(plan):
        _mute_first_stage(plan)
        plan.pop("epsilon")

    forge = Coordinator("keys", _rewrite_plan(change))
    out, failure = _run(monkeypatch, tmp_path, {**JOB, "max-aborted-share": 1.0}, forge)
    assert forge.forged == 4
    assert failure is not None or _answered(out) < 3
