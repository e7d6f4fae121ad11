"""Hostile nodes over Flower messages: the real ServerApp, every case with its outcome.

The ServerApp (``fedpriv.server.app.main``) runs over the loopback grid
(``tests/server/loopback.py``) whose node 1 tampers with its round-2 reply (Flower
rounds count from 1) before the server sees it. A reply is bound to its sender by
its source node id and the message it answers, never by its content, and is checked
before aggregation; what cannot be checked one upload at a time is caught on the
noisy sum. The in-process twin of these cases is ``tests/federation/test_hostile.py``.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from fedpriv.artefact import load_model
from fedpriv.federation.engine import DEFAULT_SCALE
from fedpriv.federation.status import RunFailedError
from tests.server.test_flower_loopback import run_app

HOSTILE, VICTIM = 1, 2
ATTACK = 2  # Flower's round 2 = the strategy's round 1
JOB = {
    "dataset": "heart",
    "num-clients": 4,
    "method": "boosting",
    "rounds": 3,
    "intercept": False,  # Flower's round r + 1 grows tree r
    "depth": 2,
    "epsilon": 2.0,
    "seed": 5,
    "round-timeout": 1.0,  # a withheld reply is waited for this long
    "max-aborted-share": 0.5,  # one lost round of three: degraded, not failed
}
#: case -> (released rounds, discarded rounds, refused replies, client errors)
CASES = {
    "honest": (3, 0, 0, 0),
    "replay": (3, 0, 1, 0),  # round 1's reply again: its round says 1
    "replay_retagged": (2, 1, 0, 0),  # ... relabelled round 2: its masks do not cancel
    "wrong_round": (3, 0, 1, 0),
    "unmasked": (2, 1, 0, 0),  # ring noise instead of a masked vector
    "ring_wrap": (2, 1, 0, 0),
    "past_codec_bound": (2, 1, 0, 0),
    "impersonation": (3, 0, 1, 0),  # claims the victim's partition, and replies twice
    "wrong_length": (3, 0, 1, 0),
    "nan": (3, 0, 1, 0),  # a float vector with NaN in place of ring elements
    "malformed": (3, 0, 1, 0),  # no shares at all
    "straggler": (3, 0, 1, 0),  # its round-2 reply arrives in round 3
    "stranger": (3, 0, 1, 0),  # a node that was never asked answers too
}


class Adversary:
    """``tamper`` for the loopback grid: node ``HOSTILE``'s replies, forged per case."""

    def __init__(self, case: str) -> None:
        self.case, self.round, self.previous, self.late = case, 0, None, None

    def __call__(self, pid: int, kind: str, reply: Message) -> list[Message]:
        if kind != "query.fedpriv":
            return [reply]
        if pid == 0:
            self.round += 1  # node 0 is asked first in every round
        if pid != HOSTILE:
            if self.case == "straggler" and self.late is not None and self.round == ATTACK + 1:
                late, self.late = self.late, None
                return [reply, late]
            return [reply]
        if self.round == ATTACK - 1:
            self.previous = reply
        if self.round != ATTACK or self.case == "honest":
            return [reply]
        return self.forge(reply)

    def forge(self, reply: Message) -> list[Message]:
        case = self.case
        content = copy.deepcopy(reply.content)
        vec = content["reply"]["masked"].numpy().copy()
        if case == "replay":
            return [_as(reply, self.previous.content)]
        if case == "replay_retagged":
            content = copy.deepcopy(self.previous.content)
            content["meta"] = ConfigRecord({"round": ATTACK - 1})
            return [_as(reply, content)]
        if case == "wrong_round":
            content["meta"] = ConfigRecord({"round": ATTACK})
        elif case == "unmasked":
            vec = np.random.default_rng(0).integers(0, 2**63, vec.size, dtype=np.uint64)
        elif case == "ring_wrap":
            vec[:1] += np.uint64(2**63)
        elif case == "past_codec_bound":
            vec[:1] += np.uint64(int(1e9 * DEFAULT_SCALE))  # what encode(1e9) would add
        elif case == "wrong_length":
            vec = np.zeros(vec.size + 1, dtype=np.uint64)
        elif case == "nan":
            vec = np.full(vec.size, np.nan)
        elif case == "malformed":
            del content["shares"]
        elif case == "straggler":
            self.late = reply
            return []
        elif case == "impersonation":
            twin = copy.deepcopy(content)
            twin["meta"] = ConfigRecord({"round": ATTACK - 1, "partition-id": VICTIM})
            return [_as(reply, content), _as(reply, twin)]
        elif case == "stranger":
            stranger = _as(reply, content)
            stranger.metadata.__dict__["_src_node_id"] = 999
            return [reply, stranger]
        content["reply"] = ArrayRecord({"masked": _array(vec)})
        return [_as(reply, content)]


def _array(v):
    from flwr.app import Array

    return Array(np.ascontiguousarray(v))


def _as(reply: Message, content: RecordDict) -> Message:
    """A message with ``content`` and ``reply``'s metadata (source, the message it answers)."""
    return Message(content=copy.deepcopy(content), metadata=copy.deepcopy(reply.metadata))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_node_never_gets_a_forged_value_into_the_model(monkeypatch, tmp_path, case):
    released, discarded, refused, errors = CASES[case]
    out = run_app(monkeypatch, tmp_path, JOB, tamper=Adversary(case))
    comm = json.loads((out / "communication.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == ("completed" if released == 3 else "degraded")
    assert status["rounds_released"] == released and privacy["complete"]
    assert comm["rounds"] == 3 and comm["rounds_released"] == released
    assert comm["rounds_discarded"] == discarded
    assert comm["rejected_replies"] == refused and comm["client_errors"] == errors
    # Spent: every round whose sum went through the ledger (released or discarded).
    assert privacy["n_releases"] == released + discarded
    leaves = load_model(out / "model.fedpriv.npz").model.to_arrays()["leaf_values"]
    assert np.abs(leaves).max() < 5.0  # honest leaves are a few logits; forged ones ~1e8
    if released < 3:
        assert np.all(leaves[ATTACK - 1] == 0.0)  # the attacked tree adds nothing


class Faults:
    """``tamper``: nodes ``dead`` stop answering (killed) or answer errors only (a dead
    worker) from Flower round ``from_round`` on."""

    def __init__(self, dead: set[int], *, errors: bool, from_round: int = 2) -> None:
        self.dead, self.errors, self.from_round, self.round = dead, errors, from_round, 0

    def __call__(self, pid: int, kind: str, reply: Message) -> list[Message]:
        if kind == "query.fedpriv" and pid == 0:
            self.round += 1
        if pid not in self.dead or self.round < self.from_round or kind == "query.keys":
            return [reply]
        if not self.errors:
            return []  # killed: nothing comes back
        err = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="actor died")
        return [Message(error=err, metadata=copy.deepcopy(reply.metadata))]


def test_half_the_nodes_killed_fail_the_run_with_the_rounds_released(monkeypatch, tmp_path):
    # Two of four left: below t = 3, so every round after the kill is aborted.
    job = {**JOB, "rounds": 4, "max-aborted-share": 0.25}
    with pytest.raises(RunFailedError, match=r"3 of 4 rounds released nothing"):
        run_app(monkeypatch, tmp_path, job, tamper=Faults({2, 3}, errors=False))
    out = next(tmp_path.iterdir())
    status = json.loads((out / "status.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    assert status["status"] == "failed" and status["rounds_released"] == 1
    assert privacy["n_releases"] == 1 and privacy["complete"]  # exactly what was released


def test_a_node_answering_only_errors_is_a_dropout_counted_in_the_status(monkeypatch, tmp_path):
    # One dead worker of four: every round is recovered from the three others (t = 3).
    out = run_app(monkeypatch, tmp_path, JOB, tamper=Faults({3}, errors=True, from_round=1))
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "completed" and status["client_errors"] == 3
    assert "3 client error replies" in status["reason"]
    comm = json.loads((out / "communication.json").read_text())
    assert comm["dropout_recoveries"] == 3 and comm["rounds_released"] == 3
