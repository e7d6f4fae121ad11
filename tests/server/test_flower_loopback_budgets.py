"""Node budgets over the loopback grid: each node's node-config policy admits a run within
it (its ledger agreeing with the server's) and refuses the next one at the plan."""

from __future__ import annotations

import pytest

from fedpriv.privacy.node_budget import read_ledger
from tests.server.test_flower_loopback import _json, run_app


def test_nodes_refuse_a_plan_over_their_own_budget_and_keep_their_ledgers(monkeypatch, tmp_path):
    """Each node's node-config policy: within it the run goes through and every node's
    ledger (in its state-dir) agrees with the server's; over it the run stops at the plan."""
    job = {"dataset": "heart", "num-clients": 4, "method": "boosting", "rounds": 3,
           "depth": 2, "epsilon": 1.0, "seed": 5}  # fmt: skip
    nodes = {p: {"max-epsilon": 1.0, "max-lifetime-epsilon": 1.5,
                 "state-dir": str(tmp_path / f"node-{p}")} for p in range(4)}  # fmt: skip
    out = run_app(monkeypatch, tmp_path / "first", job, node_config=nodes)
    privacy = _json(out, "privacy")
    left = _json(out, "communication")["nodes_remaining_budget"]
    for p in range(4):
        (run,) = read_ledger(tmp_path / f"node-{p}")["runs"].values()
        assert run["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)
        assert run["stages"]["noise"]["answered"] == [0, 1, 2]
        assert left[str(p)]["epsilon"] == pytest.approx(1.5 - run["epsilon"])
    # A second run of ε 1 would take each node past its lifetime 1.5: refused at the plan.
    with pytest.raises(RuntimeError, match="key exchange: 0 of 4 nodes answered"):
        run_app(monkeypatch, tmp_path / "second", job, node_config=nodes)
    assert len(read_ledger(tmp_path / "node-0")["runs"]) == 1
