"""A lying coordinator against the real node code: every attack refused, with its twin.

Each attack of the review's table is replayed against the node as it is and against
a *twin* that restores the node's old trust in the coordinator; the twin lets the
same attack through, so each test has power.

- Over Flower (the ServerApp and the real ClientApp handlers, ``clients/app.py``, on
  the loopback grid, ``tests/server/loopback.py``): ``forge`` rewrites what the
  nodes receive, so the coordinator lies while the ServerApp runs as it is.
- On the secure-aggregation client (``fedpriv.federation.secagg``): the unmask
  attacks, where the server lies about who survived.
- Reproduction keys, the exact count and the range guard: where each lives (its
  test names the attack's row).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from fedpriv.server.dp_evaluation import NOISE_STREAM
from flwr.app import ConfigRecord, Message, RecordDict

from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.secagg import SecAggConfig
from fedpriv.federation.status import RunFailedError
from fedpriv.privacy import node_budget
from fedpriv.privacy.node_budget import NodeRefusal, read_ledger
from fedpriv.privacy.node_plan import derive_stage
from tests.federation.test_secagg_consistency import (
    _claim,
    _low_threshold_attack,
    _noisy_round,
)
from tests.server.test_flower_loopback import run_app

BOOSTING = {
    "dataset": "heart", "num-clients": 4, "method": "boosting", "rounds": 3, "depth": 2,
    "epsilon": 1.0, "seed": 5, "round-timeout": 1.0, "max-aborted-share": 1.0,
}  # fmt: skip
#: DP-SGD logistic (the review's row: q 0.02, clip 3; fewer steps here).
LOGISTIC = {
    "dataset": "heart", "num-clients": 4, "method": "logistic", "rounds": 6,
    "sampling-rate": 0.1, "clip-norm": 3.0, "epsilon": 1.0, "seed": 5, "round-timeout": 1.0,
    "max-aborted-share": 1.0,
}  # fmt: skip


def _policy(tmp_path, max_epsilon: float = 1.0) -> dict[int, dict]:
    """Each node's own policy and state directory (its ledger and audit log)."""
    # The loopback run injects a reproduction key (bit-for-bit tests): the nodes allow it.
    return {p: {"max-epsilon": max_epsilon, "state-dir": str(tmp_path / f"node-{p}"),
                "allow-reproduction-key": True} for p in range(4)}  # fmt: skip


class Coordinator:
    """``forge`` for the loopback grid: rewrites the config of one kind of message."""

    def __init__(self, kind: str, rewrite) -> None:
        self.kind, self.rewrite, self.forged = f"query.{kind}", rewrite, 0

    def __call__(self, pid: int, kind: str, msg: Message) -> Message:
        if kind != self.kind:
            return msg
        new = self.rewrite(dict(msg.content["config"]))
        if new is None:
            return msg
        self.forged += 1
        content = RecordDict({k: copy.deepcopy(v) for k, v in msg.content.items()})
        content["config"] = ConfigRecord(new)
        return Message(content=content, metadata=copy.deepcopy(msg.metadata))


def _both(*forges):
    def forge(pid, kind, msg):
        for f in forges:
            msg = f(pid, kind, msg)
        return msg

    return forge


def _plan_rewrite(change):
    """A ``rewrite`` of the declared plan (riding on the key exchange, or alone)."""

    def rewrite(config):
        if "plan" not in config:
            return None
        plan = json.loads(config["plan"])
        if change(plan) is False:
            return None
        return {**config, "plan": json.dumps(plan)}

    return rewrite


def _run(monkeypatch, tmp_path, job, forge):
    """The run's folder and its failure text (``None``: the run completed)."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    nodes = _policy(tmp_path)
    try:
        return run_app(monkeypatch, out_dir, job, forge=forge, node_config=nodes), None
    except (RunFailedError, RuntimeError, NodeRefusal) as err:
        return next(out_dir.iterdir(), None), str(err)


def _released(out) -> int:
    return int(json.loads((out / "communication.json").read_text())["rounds_released"])


def _node_runs(tmp_path, p=0) -> dict:
    return read_ledger(tmp_path / f"node-{p}")["runs"]


def _trusting_admission(monkeypatch):
    """The twin of the plan check: ε from the declared events (the old node), the
    declared stages taken as they come."""
    from fedpriv.privacy import accounting
    from fedpriv.privacy.events import event_from_dict

    def admit(plan, handler_of, *, run_id):
        admitted = [derive_stage(NodeStage.from_dict(s), handler_of) for s in plan["stages"]]
        items = [(event_from_dict(ev), int(n)) for ev, n in plan.get("events", [])]
        eps = float(accounting.account(items, float(plan["accounting_delta"])).epsilon)
        return admitted, eps

    monkeypatch.setattr(node_budget, "admit_stages", admit)


def _trusting_queries(monkeypatch):
    """The twin of the query check: a query counts against the stage its kind names,
    whatever its rate, clip or the stage's mechanism (the old node checked only rounds)."""

    def match(admitted, used, query, handler_of, *, share=None):
        name = handler_of(query.method).reply_sensitivity(query).stage
        return next(
            i for i, a in enumerate(admitted)
            if a.stage.method == query.method and a.stage.name == name
        )  # fmt: skip

    monkeypatch.setattr(node_budget, "match_query", match)


# -- row 1: the node computes ε itself ----------------------------------------------
def _thin_stages(plan):
    for stage in plan["stages"]:
        stage["noise"] /= 1000.0  # the review's z 20 → 0.02: events unchanged


def _thin_shares(config):
    if "noise-share-std" not in config:
        return None
    return {**config, "noise-share-std": config["noise-share-std"] / 1000.0}


@pytest.mark.parametrize("twin", [False, True], ids=["node", "twin"])
def test_stages_carrying_less_noise_than_their_declared_events_are_refused(
    monkeypatch, tmp_path, twin
):
    """Distributed noise, policy max-epsilon 1: the plan's events say the honest noise,
    its stages and then its queries ask for shares a thousand times smaller."""
    if twin:
        _trusting_admission(monkeypatch)
    plan = Coordinator("keys", _plan_rewrite(_thin_stages))
    shares = Coordinator("fedpriv", _thin_shares)
    job = {**BOOSTING, "noise": "distributed", "tolerated-dropouts": 1}
    out, failure = _run(monkeypatch, tmp_path, job, _both(plan, shares))
    assert plan.forged == 4
    if twin:  # the old node: admitted on the events' ε, and the thin shares answered
        assert failure is None and _released(out) >= 1 and shares.forged >= 4
        (run,) = _node_runs(tmp_path).values()
        assert run["epsilon"] <= 1.0  # ... while the true ε of those releases is ~10⁴
    else:
        assert failure is not None and "key exchange: 0 of 4 nodes answered" in failure
        assert shares.forged == 0 and _node_runs(tmp_path) == {}  # no query, nothing charged
        entry = [e for e in node_budget.AuditLog(tmp_path / "node-0").entries()][-1]
        assert entry["kind"] == "plan-refused" and "own accountant" in entry["reason"]


# -- row 2: every query is checked against the admitted plan --------------------------
QUERY_ATTACKS = {
    "q=1": lambda c: None if "q.sampling_rate" not in c or c.get("c.stage") != "step"
    else {**c, "q.sampling_rate": 1.0},
    "clip_norm x10": lambda c: None if c.get("c.stage") != "step"
    else {**c, "c.clip_norm": c["c.clip_norm"] * 10.0},
}  # fmt: skip


@pytest.mark.parametrize("twin", [False, True], ids=["node", "twin"])
@pytest.mark.parametrize("attack", sorted(QUERY_ATTACKS))
def test_a_step_outside_its_admitted_stage_is_refused_before_a_row_is_read(
    monkeypatch, tmp_path, attack, twin
):
    if twin:
        _trusting_queries(monkeypatch)
    forge = Coordinator("fedpriv", QUERY_ATTACKS[attack])
    _run(monkeypatch, tmp_path, LOGISTIC, forge)
    steps = forge.forged // 4  # every node gets every step: centring and recalibration aside
    assert steps >= 1 and forge.forged == 4 * steps
    (run,) = _node_runs(tmp_path).values()
    answered = run["stages"]["noise"]["answered"]
    if twin:  # answered at q = 1 or clip 30: ε 299 and 818 in the review's numbers
        assert len(answered) == LOGISTIC["rounds"]
    else:
        assert len(answered) == LOGISTIC["rounds"] - steps  # every forged step refused
        refused = [e for e in node_budget.AuditLog(tmp_path / "node-0").entries()
                   if e["kind"] == "query-refused"]  # fmt: skip
        assert len(refused) == steps
        why = "sampling rate 1.0" if attack == "q=1" else "could move the reply"
        assert all(why in e["reason"] for e in refused), refused


# -- row 4: rounds beyond what the node accounts ---------------------------------------
def _mute_histogram(plan):
    """The DP evaluation's plan, with its stage declared without a mechanism (no
    events, ε 0): the rounds the review found answered at no charge."""
    if plan.get("stage") != NOISE_STREAM:  # the evaluation's plan, not training's
        return False
    for stage in plan["stages"]:
        stage.update(mechanism="none", noise=0.0, rounds=100)
    plan.update(events=[], epsilon=0.0, rounds=100)
    return True


@pytest.mark.parametrize("twin", [False, True], ids=["node", "twin"])
def test_a_stage_declared_without_a_mechanism_reads_no_row(monkeypatch, tmp_path, twin):
    if twin:
        _trusting_queries(monkeypatch)
    forge = Coordinator("plan", _plan_rewrite(_mute_histogram))
    job = {**BOOSTING, "eval-epsilon": 0.3}
    out, _ = _run(monkeypatch, tmp_path, job, forge)
    assert forge.forged == 4
    (run,) = _node_runs(tmp_path).values()
    evaluation = run["stages"][NOISE_STREAM]
    assert evaluation["epsilon"] == 0.0  # what the muted plan costs on the node's books
    if twin:  # the evaluation round read every held-out row, charged nothing
        assert evaluation["answered"] == [0] or len(evaluation["answered"]) == 1
    else:
        assert evaluation["answered"] == []
        assert _released(out) == 3  # training itself is untouched


# -- row 3: the unmask under the node's rules (the secure-aggregation client) -----------
def test_a_server_claiming_more_dropouts_than_tolerated_gets_nothing():
    # n = 5, f = 1: shares sized for m = 4; the server claims two dropped (|S| = 3 = t).
    clients, ups, codec = _noisy_round(4, r=0)
    released, refusals = _claim(clients, ups, codec, [1, 2, 3], r=0)
    assert released is None and len(refusals) == 6  # 3 refuse to sign, 3 to unmask
    assert all("survivors bound m this node sized" in why for why in refusals)


def test_twin_claimed_dropouts_release_an_under_noised_sum():
    clients, ups, codec = _noisy_round(4, r=0, erase_bound=True)
    released, refusals = _claim(clients, ups, codec, [1, 2, 3], r=0)
    assert refusals == [] and abs(float(np.std(released)) - math.sqrt(3 / 4)) < 0.03


def test_a_threshold_forced_low_by_the_run_config_is_refused():
    total, why = _low_threshold_attack(SecAggConfig(threshold_fraction=0.0))
    assert total is None and "threshold 2 announced for 5 participants" in why


def test_twin_a_threshold_forced_low_unmasks_a_sum_of_two(monkeypatch):
    monkeypatch.setattr(SecAggConfig, "effective_threshold", SecAggConfig.threshold)
    total, expected = _low_threshold_attack(SecAggConfig(threshold_fraction=0.0))
    np.testing.assert_array_equal(total, expected)
