"""A lying coordinator over Flower messages: the real ClientApp handlers refuse to unmask.

The ServerApp runs over the loopback grid (``tests/server/loopback.py``); in the
strategy's round 1 its transport equivocates: each node is shown its own survivor list
(the in-process twin of the attack, with exact recovery of the victim's input, is
``tests/federation/test_secagg_consistency.py``), and the server skips its own
signature check so that the unmask requests go out. Every node refuses; the twin, with
the nodes' signature check removed, answers every request.
"""

from __future__ import annotations

import json

import pytest
from fedpriv.server.grid_runtime import GridTransport
from flwr.app import ConfigRecord, RecordDict

from fedpriv.federation import secagg_consistency
from fedpriv.federation.secagg_server import SecAggServer
from tests.server.test_flower_loopback import run_app

ATTACK = 1  # the strategy's round 1 (Flower's round 2)
JOB = {
    "dataset": "synthetic",
    "num-clients": 5,
    "method": "boosting",
    "rounds": 3,
    "intercept": False,
    "depth": 2,
    "epsilon": 2.0,
    "seed": 5,
    "round-timeout": 1.0,
    "max-aborted-share": 0.5,
}
#: Victim 0: it reveals its pair masks with 3 and 4, 1 and 2 theirs with 0, 3 and 4 their
#: shares of b_0 (t = 3 with 0's own): y_0 alone would be unmasked.
VIEWS = {
    0: ([0, 1, 2], [3, 4]),
    1: ([1, 2, 3, 4], [0]),
    2: ([1, 2, 3, 4], [0]),
    3: ([0, 3, 4], [1, 2]),
    4: ([0, 3, 4], [1, 2]),
}


class Liar:
    """Patches :class:`GridTransport` to show each node its own list in round ``ATTACK``."""

    def __init__(self) -> None:
        self.signed: list[int] = []
        self.answered: list[int] = []

    def install(self, monkeypatch) -> None:
        honest_consistency, honest_unmask = GridTransport.consistency, GridTransport.unmask
        liar = self

        def consistency(self, plan, survivors, dropped):
            if plan.query.round != ATTACK:
                return honest_consistency(self, plan, survivors, dropped)
            content = {}
            for p, (live, gone) in VIEWS.items():
                cfg = self._view(plan, live, gone)
                cfg["verify-keys"] = [self.verify_keys[q] for q in plan.asked]
                content[self.node_of[p]] = RecordDict({"config": ConfigRecord(cfg)})
            replies = self._send("consistency", content)
            sigs = {
                self.pid_of[n]: bytes(r.content["meta"]["signature"]) for n, r in replies.items()
            }
            liar.signed = sorted(sigs)
            return sigs

        def unmask(self, request):
            plan, inboxes, signatures = request.plan, request.inboxes, request.signatures
            if plan.query.round != ATTACK:
                return honest_unmask(self, request)
            signers, content = sorted(signatures), {}
            for p, (live, gone) in VIEWS.items():
                cfg = self._view(plan, live, gone)
                cfg.update({"n": plan.query.reply_length, "signers": signers})
                cfg["signatures"] = [signatures[j] for j in signers]
                box = {w: c for w, c in inboxes[p].items() if w in live}  # what it lacks
                cfg.update({"from": list(box), "ct": list(box.values())})
                content[self.node_of[p]] = RecordDict({"config": ConfigRecord(cfg)})
            liar.answered = sorted(self.pid_of[n] for n in self._send("unmask", content))
            return {}  # the attacker keeps what it got; the engine releases nothing

        monkeypatch.setattr(GridTransport, "consistency", consistency)
        monkeypatch.setattr(GridTransport, "unmask", unmask)
        # The lying server forwards every signature, without its own check.
        monkeypatch.setattr(SecAggServer, "check_signatures", lambda self, **kw: kw["signatures"])


@pytest.mark.parametrize("twin", [False, True], ids=["nodes-check", "twin-no-check"])
def test_an_equivocating_server_gets_no_unmask_answer_over_flower(monkeypatch, tmp_path, twin):
    liar = Liar()
    liar.install(monkeypatch)
    if twin:  # the nodes' old behaviour: no signature check before revealing
        monkeypatch.setattr(secagg_consistency, "check_signatures", lambda **kw: [])
    out = run_app(monkeypatch, tmp_path, JOB)
    comm = json.loads((out / "communication.json").read_text())
    assert liar.signed == [0, 1, 2, 3, 4]  # each signed the list it was shown
    assert comm["rounds"] == 3 and comm["rounds_released"] == 2  # the attacked round: none
    if twin:
        assert liar.answered == [0, 1, 2, 3, 4] and comm["client_errors"] == 0
    else:
        assert liar.answered == [] and comm["client_errors"] == 5  # five refusals
