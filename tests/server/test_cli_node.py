"""``fedpriv inspect`` on a node's state and ``fedpriv node approve`` / ``pending``:
anything that is not a sound node state exits 2 with one line, never "nothing spent"."""

from __future__ import annotations

import json

import pytest
from fedpriv.server.cli import main

from fedpriv.privacy.node_approval import is_approved, record_pending
from fedpriv.privacy.node_audit import AUDIT_FILE, AuditLog, plan_hash, verify_audit_log
from fedpriv.privacy.node_budget import LEDGER_FILE, NodeLedger, NodePolicy

H = plan_hash({"stage": "train", "epsilon": 0.5, "rounds": 3})
LEDGER = {
    "policy": {"max-epsilon": 1.0, "max-delta": None, "max-lifetime-epsilon": 3.0,
               "max-lifetime-delta": None},
    "runs": {"r1": {"epsilon": 0.5, "delta": 1e-6, "stages": {"train": {
        "epsilon": 0.5, "rounds": 3, "answered": [0, 1], "noise": []}}}},
}  # fmt: skip


def _node(state, *, ledger=LEDGER, audit=True):
    state.mkdir(parents=True, exist_ok=True)
    if ledger is not None:
        (state / LEDGER_FILE).write_text(json.dumps(ledger))
    if audit:
        log = AuditLog(state)
        log.append("approval", plan_hash=H, by="operator")
        log.append("plan-admitted", plan_hash=H, run="r1", stage="train", method="dp_gam",
                   stages=[{"rounds": 3}], epsilon=0.5, delta=1e-6)  # fmt: skip
        for r in (0, 1):
            log.append("query-answered", run="r1", stage="train", round=r, q=0.1, share_std=3.0)
            log.append("unmask", run="r1", round=r, survivors=3, dropped=0)
        log.append("query-refused", run="r1", stage="train", round=7, reason="beyond the plan")
        log.append("plan-refused", plan_hash="f" * 64, run="r2", reason="over max-epsilon")
    return state


def _refused(capsys, argv):
    """Run ``fedpriv argv``: exit code 2, nothing on stdout, one line on stderr."""
    capsys.readouterr()
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.strip().splitlines()
    return line


# -- inspect -----------------------------------------------------------------------
def test_a_sound_node_state_prints_spend_and_history(tmp_path, capsys):
    state = _node(tmp_path / "node-0")
    capsys.readouterr()
    assert main(["inspect", str(state)]) == 0
    text = capsys.readouterr().out
    assert "lifetime spend: ε 0.5, δ 1e-06 over 1 run(s)" in text
    assert "remaining: ε 2.5" in text and "run r1: ε 0.5, δ 1e-06, 2 rounds answered" in text
    assert "audit log: 8 entries, chain intact" in text
    assert ("history: plans 1 admitted, 1 refused; rounds 2 answered, 1 refused; unmasks 2, "
            "0 refused; approvals 1") in text  # fmt: skip
    assert "last 5 entries:" in text and "#7 " in text and "plan-refused" in text
    assert main(["inspect", "--json", str(state)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lifetime_epsilon"] == 0.5 and report["runs"]["r1"]["rounds_answered"] == 2
    audit = report["audit"]
    assert audit["ok"] and audit["entries"] == 8 and audit["plans_admitted"] == 1
    assert audit["head"] == verify_audit_log(state).head
    assert [e["seq"] for e in audit["last"]] == [3, 4, 5, 6, 7]
    assert "prev" not in audit["last"][0] and "hash" not in audit["last"][0]


def test_a_node_file_names_its_state_directory(tmp_path, capsys):
    state = _node(tmp_path / "n")
    for name in (LEDGER_FILE, AUDIT_FILE):
        assert main(["inspect", str(state / name)]) == 0
        assert "lifetime spend: ε 0.5" in capsys.readouterr().out


def test_a_real_ledger_without_an_audit_log_still_inspects(tmp_path, capsys):
    """A ledger kept before audit logs existed (its log removed here) still inspects."""
    from tests.privacy.test_node_plan import HANDLER_OF, _plan, _query, _stage

    ledger = NodeLedger(NodePolicy(max_epsilon=10.0), tmp_path)
    ledger.admit_plan("r", _plan(_stage(rounds=2)), HANDLER_OF)
    ledger.admit_query("r", "noise", _query(r=0), HANDLER_OF)
    assert [e["kind"] for e in ledger.audit.entries()] == ["plan-admitted", "query-answered"]
    (tmp_path / AUDIT_FILE).unlink()
    assert main(["inspect", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "over 1 run(s)" in text and "audit log: none" in text


def test_an_empty_folder_is_refused(tmp_path, capsys):
    line = _refused(capsys, ["inspect", str(tmp_path)])
    assert f"{tmp_path} holds no node ledger ({LEDGER_FILE})" in line


def test_a_mistyped_path_is_refused(tmp_path, capsys):
    _node(tmp_path / "node-0")
    line = _refused(capsys, ["inspect", str(tmp_path / "node-O")])
    assert line.endswith("node-O does not exist")


def test_the_parent_of_node_states_points_at_them(tmp_path, capsys):
    for i in range(2):
        _node(tmp_path / f"node-{i}")
    line = _refused(capsys, ["inspect", str(tmp_path)])
    assert "holds node state directories (node-0, node-1): inspect one of them" in line


def test_a_corrupt_ledger_is_refused(tmp_path, capsys):
    state = _node(tmp_path, audit=False)
    (state / LEDGER_FILE).write_text('{"runs": {"r1": ')
    line = _refused(capsys, ["inspect", str(state)])
    assert f"node ledger {state / LEDGER_FILE} is not valid JSON (line 1" in line
    (state / LEDGER_FILE).write_bytes(b"\xff\xfe{}")
    assert "is not UTF-8 text" in _refused(capsys, ["inspect", "--json", str(state)])


WRONG_SHAPES = [
    ([], "the top level must be an object; got list"),
    ({}, "'runs' must be an object of runs; got None"),
    ({"runs": []}, "'runs' must be an object of runs; got []"),
    ({"runs": {"r1": 3}}, "runs['r1'] must be an object; got 3"),
    ({"runs": {"r1": {"epsilon": "0.5", "delta": 0, "stages": {}}}},
     "runs['r1'].epsilon must be a number ≥ 0; got '0.5'"),
    ({"runs": {"r1": {"epsilon": 0.5, "delta": 0, "stages": []}}},
     "runs['r1'].stages must be an object"),
    ({"runs": {"r1": {"epsilon": 0.5, "delta": 0, "stages": {"s": {"rounds": 2,
      "answered": "01"}}}}}, "runs['r1'].stages['s'].answered must be a list of rounds"),
    ({"runs": {}, "policy": {"max-epsilon": "lots"}}, "policy 'max-epsilon' = 'lots'"),
]  # fmt: skip


@pytest.mark.parametrize("data, why", WRONG_SHAPES, ids=[w[:30] for _, w in WRONG_SHAPES])
def test_a_ledger_of_the_wrong_shape_is_refused(tmp_path, capsys, data, why):
    state = _node(tmp_path, ledger=data, audit=False)
    line = _refused(capsys, ["inspect", str(state)])
    assert f"node ledger {state / LEDGER_FILE} is not a node ledger: {why}" in line, line


def test_a_broken_chain_is_refused_naming_its_seq(tmp_path, capsys):
    state = _node(tmp_path)
    lines = (state / AUDIT_FILE).read_text().splitlines(keepends=True)
    del lines[3]
    (state / AUDIT_FILE).write_text("".join(lines))
    line = _refused(capsys, ["inspect", str(state)])
    assert f"audit log {state / AUDIT_FILE} is broken at seq 3: deleted line(s)" in line


def test_a_rolled_back_ledger_is_refused(tmp_path, capsys):
    """The ledger replaced by an older copy (no run r1: its budget regained): the audit
    log's admission says otherwise. Twin: without the audit log the same ledger passes."""
    older = {"policy": LEDGER["policy"], "runs": {}}
    state = _node(tmp_path / "audited", ledger=older)
    line = _refused(capsys, ["inspect", str(state)])
    assert "run r1 stage 'train', admitted at audit seq 1, is missing from the ledger" in line
    (state / LEDGER_FILE).unlink()
    line = _refused(capsys, ["inspect", str(state)])
    assert "has no node ledger" in line and "records 1 admitted plan(s)" in line
    twin = _node(tmp_path / "unaudited", ledger=older, audit=False)
    assert main(["inspect", str(twin)]) == 0
    assert "lifetime spend: ε 0, δ 0 over 0 run(s)" in capsys.readouterr().out


def test_a_run_directory_shows_its_model_file(tmp_path, capsys):
    (tmp_path / "model.fedpriv.npz").write_bytes(b"not a zip")
    line = _refused(capsys, ["inspect", str(tmp_path)])
    assert "model.fedpriv.npz: not a fedpriv model file" in line  # the model loader read it


# -- node approve / pending ----------------------------------------------------------
SUMMARY = {"run": "r9", "method": "dp_gam", "stages": [{"rounds": 3}], "epsilon": 0.5,
           "delta": 1e-6, "columns": ["age", "admission"]}  # fmt: skip


def test_node_approve_approves_a_pending_plan(tmp_path, capsys):
    record_pending(tmp_path, H, SUMMARY)
    policy = NodePolicy(require_approval=True)
    assert not is_approved(tmp_path, policy, H)
    capsys.readouterr()
    assert main(["node", "pending", "--state", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert H in out and "method dp_gam" in out and "ε 0.5  δ 1e-06" in out
    assert "columns [age, admission]" in out and "run r9" in out
    assert main(["node", "approve", H, "--state", str(tmp_path)]) == 0
    assert f"approved plan {H} (audit log seq 0)" in capsys.readouterr().out
    assert is_approved(tmp_path, policy, H)
    (entry,) = AuditLog(tmp_path).entries()
    assert entry["kind"] == "approval" and entry["by"] == "operator" and entry["plan_hash"] == H
    assert main(["node", "pending", "--state", str(tmp_path)]) == 0
    assert "no plan waits for approval" in capsys.readouterr().out
    assert main(["node", "approve", H, "--state", str(tmp_path)]) == 0  # idempotent
    assert "already approved" in capsys.readouterr().out and len(AuditLog(tmp_path).entries()) == 1


@pytest.mark.parametrize("bad", ["abc", H[:-1], H + "0", "z" * 64, "../../etc/passwd"])
def test_node_approve_refuses_a_malformed_hash_even_forced(tmp_path, capsys, bad):
    for force in ([], ["--force"]):
        line = _refused(capsys, ["node", "approve", bad, "--state", str(tmp_path), *force])
        assert "PLAN_HASH must be 64 hex digits" in line
    assert list(tmp_path.iterdir()) == []


def test_node_approve_refuses_a_plan_not_pending_unless_forced(tmp_path, capsys):
    line = _refused(capsys, ["node", "approve", H, "--state", str(tmp_path)])
    assert f"plan {H} is not pending" in line and "--force" in line
    policy = NodePolicy(require_approval=True)
    assert not is_approved(tmp_path, policy, H)
    assert main(["node", "approve", H.upper(), "--state", str(tmp_path), "--force"]) == 0
    assert is_approved(tmp_path, policy, H)


def test_node_commands_refuse_a_missing_state_directory(tmp_path, capsys):
    for argv in (["node", "pending"], ["node", "approve", H, "--force"]):
        line = _refused(capsys, [*argv, "--state", str(tmp_path / "nope")])
        assert "no such directory" in line
    assert not (tmp_path / "nope").exists()
