"""A node's policy file and its data owner's approval: every bad input is one named
error; methods and columns outside the policy are refused; a plan waits for the
operator, bounded, and is refused as bare "not approved" when none comes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading

import pytest

from fedpriv.privacy import node_policy
from fedpriv.privacy.node_approval import (
    NOT_APPROVED,
    approval_source,
    approve,
    approved_path,
    await_approval,
    is_approved,
    list_pending,
    plan_summary,
    record_pending,
)
from fedpriv.privacy.node_audit import AuditLog, plan_hash, verify_audit_log
from fedpriv.privacy.node_budget import NodePolicy, NodeRefusal, node_policy_config
from fedpriv.privacy.node_policy import PolicyFileError, check_plan_scope, load_policy_file

PLAN = {"stage": "train", "epsilon": 1.0, "delta": 1e-5, "rounds": 3, "events": [], "stages": []}
H = plan_hash(PLAN)
SUMMARY = {"run": "r1", "method": "dp_gam", "stages": [{"rounds": 3}], "epsilon": 1.0,
           "delta": 1e-5, "columns": ["age", "admission"]}  # fmt: skip
FULL = f"""
[policy]
max-epsilon = 2.0
max-delta = 1e-5
max-lifetime-epsilon = 10
max-lifetime-delta = 1e-4
methods = ["dp_gam", "boosting"]
columns = ["age", "admission"]
require-approval = true
approved = ["{H.upper()}"]
approval-timeout = 60
"""


def _file(tmp_path, text):
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- the policy file -----------------------------------------------------------------
def test_a_full_policy_file_loads(tmp_path):
    p = load_policy_file(_file(tmp_path, FULL))
    assert (p.max_epsilon, p.max_delta, p.max_lifetime_epsilon) == (2.0, 1e-5, 10.0)
    assert p.methods == ("dp_gam", "boosting") and p.columns == ("age", "admission")
    assert p.require_approval and p.approved == (H,) and p.approval_timeout == 60.0
    assert NodePolicy.from_toml(tmp_path / "policy.toml") == p


def test_an_empty_policy_table_is_no_limit(tmp_path):
    p = load_policy_file(_file(tmp_path, "[policy]\n"))
    assert math.isinf(p.max_epsilon) and p.methods is None and p.columns is None
    assert not p.require_approval and p.approval_timeout == 300.0


def test_node_config_names_the_policy_file(tmp_path):
    path = _file(tmp_path, FULL)
    config = {"policy-file": str(path), "state-dir": str(tmp_path), "partition-id": 0}
    assert node_policy_config(config, {}) == {"policy-file": str(path), "state-dir": str(tmp_path)}
    p = NodePolicy.from_node_config(config)
    assert p.methods == ("dp_gam", "boosting") and p.max_epsilon == 2.0
    # A limit set in both places must agree; one only the node-config sets is added.
    p = NodePolicy.from_node_config({"policy-file": str(path), "max-epsilon": 2})
    assert p.max_epsilon == 2.0
    with pytest.raises(ValueError, match=r"max-epsilon is 1.0 in the node-config but 2.0 in"):
        NodePolicy.from_node_config({"policy-file": str(path), "max-epsilon": 1})
    path.write_text("[policy]\nmethods = ['dp_gam']\n")
    assert (
        NodePolicy.from_node_config({"policy-file": str(path), "max-delta": 1e-6}).max_delta == 1e-6
    )


BAD = [
    ("[policy]\nmax-epsilonn = 1.0\n", "unknown key [policy] 'max-epsilonn' = 1.0"),
    ("[budget]\nmax-epsilon = 1.0\n", "unknown table or key 'budget'"),
    ("max-epsilon = 1.0\n", "unknown table or key 'max-epsilon'"),
    ("", "needs a [policy] table"),
    ("[policy]\nmax-epsilon = true\n", "max-epsilon must be a number in [0, inf]; got True"),
    ("[policy]\nmax-delta = -1e-5\n", "max-delta must be a number in [0, inf]; got -1e-05"),
    ("[policy]\nmax-epsilon = '1.0'\n", "max-epsilon must be a number in [0, inf]; got '1.0'"),
    ("[policy]\nmax-lifetime-epsilon = nan\n", "max-lifetime-epsilon must be a number"),
    ("[policy]\nmethods = 'dp_gam'\n", "methods must be a list of method names"),
    ("[policy]\nmethods = ['dp-gam']\n", "names unknown method(s) ['dp-gam']"),
    ("[policy]\nmethods = [1]\n", "methods must be a list of method names"),
    ("[policy]\ncolumns = 'age'\n", "columns must be a list of column names, e.g. [\"age\"]"),
    ("[policy]\ncolumns = ['age', '']\n", "columns must be a list of column names"),
    ("[policy]\nrequire-approval = 'yes'\n", "require-approval must be true or false; got 'yes'"),
    ("[policy]\nrequire-approval = 1\n", "require-approval must be true or false; got 1"),
    ("[policy]\napproved = 'abc'\n", "approved must be a list of plan hashes"),
    ("[policy]\napproved = ['abc']\n", "approved must hold plan hashes of 64 hex digits; 'abc'"),
    ("[policy]\napproval-timeout = 0\n", "approval-timeout must be a number of seconds in (0,"),
    ("[policy]\napproval-timeout = 86401\n", "in (0, 86400]; got 86401"),
    ("[policy]\napproval-timeout = true\n", "in (0, 86400]; got True"),
    ("[policy]\nmax-epsilon = \n", "not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize("text, message", BAD, ids=[m[:40] for _, m in BAD])
def test_every_bad_policy_file_is_one_named_error(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(PolicyFileError) as err:
        load_policy_file(path)
    said = str(err.value)
    assert message in said and said.startswith(f"policy-file {str(path)!r}: "), said
    assert "\n" not in said
    with pytest.raises(ValueError, match="policy-file"):  # through the node-config too
        NodePolicy.from_node_config({"policy-file": str(path)})


def test_a_missing_policy_file_is_named(tmp_path):
    with pytest.raises(PolicyFileError, match=r"policy-file '.*nope.toml': no such file"):
        NodePolicy.from_node_config({"policy-file": str(tmp_path / "nope.toml")})


def test_twin_a_string_read_as_a_list_becomes_its_characters(tmp_path, monkeypatch):
    """Without the type check ``columns = "age"`` loads as the columns a, g, e: a plan
    reading "age" is then refused (and one reading "a" allowed)."""
    path = _file(tmp_path, "[policy]\ncolumns = 'age'\n")
    monkeypatch.setattr(node_policy, "_strings", lambda x: all(isinstance(s, str) for s in x))
    p = load_policy_file(path)
    assert p.columns == ("a", "g", "e")
    with pytest.raises(NodeRefusal, match=r"columns \['age'\] are not allowed"):
        check_plan_scope(p, method="dp_gam", columns=["age"])
    check_plan_scope(p, method="dp_gam", columns=["a"])


def test_node_policy_itself_refuses_a_string_for_a_list():
    with pytest.raises(ValueError, match="columns must be a list of non-empty strings; got 'age'"):
        NodePolicy(columns="age")
    with pytest.raises(ValueError, match="approval-timeout must lie in"):
        NodePolicy(approval_timeout=0)
    with pytest.raises(ValueError, match="approved must hold plan hashes"):
        NodePolicy(approved=("xyz",))


# -- scope -------------------------------------------------------------------------
def test_methods_and_columns_outside_the_policy_are_refused():
    p = NodePolicy(methods=("dp_gam",), columns=("age", "admission"))
    check_plan_scope(p, method="dp_gam", columns=["age"])
    with pytest.raises(NodeRefusal) as err:
        check_plan_scope(p, method="boosting", columns=["age"])
    assert str(err.value) == (
        "method 'boosting' is not allowed by this node's policy (allowed: ['dp_gam'])"
    )
    with pytest.raises(NodeRefusal, match=r"columns \['diagnosis'\] are not allowed"):
        check_plan_scope(p, method="dp_gam", columns=["age", "diagnosis"])
    # Twin: the same plans under a policy without a scope pass.
    check_plan_scope(NodePolicy(), method="boosting", columns=["age", "diagnosis"])
    with pytest.raises(TypeError):
        check_plan_scope(p, method="dp_gam", columns="age")  # not split into characters


def test_an_empty_scope_allows_nothing():
    with pytest.raises(NodeRefusal, match="not allowed"):
        check_plan_scope(NodePolicy(methods=()), method="dp_gam", columns=[])


# -- approval ----------------------------------------------------------------------
class FakeClock:
    """A clock the injected sleep advances: no real waiting."""

    def __init__(self):
        self.now, self.sleeps = 1000.0, 0

    def __call__(self):
        return self.now

    def sleep(self, dt):
        assert 0 < dt <= 0.5
        self.sleeps += 1
        self.now += dt


def test_a_pre_approved_plan_passes_at_once(tmp_path):
    policy = NodePolicy(require_approval=True, approved=(H,))
    clock = FakeClock()
    assert await_approval(tmp_path, policy, H, clock=clock, sleep=clock.sleep) == "policy"
    assert clock.sleeps == 0 and is_approved(tmp_path, policy, H)


def test_without_require_approval_nothing_waits(tmp_path):
    clock = FakeClock()
    assert await_approval(tmp_path, NodePolicy(), H, clock=clock, sleep=clock.sleep) == (
        "not required"
    )
    assert clock.sleeps == 0


def test_expiry_refuses_with_the_bare_reason(tmp_path):
    policy = NodePolicy(require_approval=True, approval_timeout=30)
    record_pending(tmp_path, H, SUMMARY)
    clock = FakeClock()
    with pytest.raises(NodeRefusal) as err:
        await_approval(tmp_path, policy, H, clock=clock, sleep=clock.sleep)
    assert str(err.value) == NOT_APPROVED == "not approved"  # no path, no detail
    assert clock.now == pytest.approx(1030.0, abs=1e-9) and clock.sleeps == 120  # 30 s / 0.25
    # Twin: approved, the same wait passes.
    approve(tmp_path, H)
    assert await_approval(tmp_path, policy, H, clock=clock, sleep=clock.sleep) == "operator"


def test_an_explicit_timeout_overrides_the_policys(tmp_path):
    policy = NodePolicy(require_approval=True, approval_timeout=3600)
    clock = FakeClock()
    with pytest.raises(NodeRefusal, match=r"^not approved$"):
        await_approval(tmp_path, policy, H, timeout=1.0, poll=0.1, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == 10
    with pytest.raises(ValueError, match=r"poll must lie in \(0, 0.5\]"):
        await_approval(tmp_path, policy, H, poll=2.0)


def test_an_approval_from_another_thread_during_the_wait_passes(tmp_path):
    policy = NodePolicy(require_approval=True, approval_timeout=86400)
    record_pending(tmp_path, H, SUMMARY)
    waiting = threading.Event()
    clock = FakeClock()

    def sleep(dt):
        waiting.set()  # the node is waiting: the operator acts
        clock.sleep(dt)
        threading.Event().wait(0.005)

    t = threading.Thread(target=lambda: (waiting.wait(60), approve(tmp_path, H)))
    t.start()
    assert await_approval(tmp_path, policy, H, clock=clock, sleep=sleep) == "operator"
    t.join(timeout=60)
    assert clock.sleeps >= 1


def test_an_approval_from_another_process_during_the_wait_passes(tmp_path):
    policy = NodePolicy(require_approval=True, approval_timeout=600)
    record_pending(tmp_path, H, SUMMARY)
    cmd = [
        sys.executable,
        "-m",
        "fedpriv.server.cli",
        "node",
        "approve",
        H,
        "--state",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert await_approval(tmp_path, policy, H, poll=0.05) == "operator"
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"approved plan {H}" in out


def test_approve_logs_and_is_idempotent(tmp_path):
    policy = NodePolicy(require_approval=True)
    assert not is_approved(tmp_path, policy, H)
    entry = approve(tmp_path, H)
    assert entry["kind"] == "approval" and entry["plan_hash"] == H and entry["by"] == "operator"
    assert approve(tmp_path, H) is None  # already approved: nothing more logged
    assert approval_source(tmp_path, policy, H) == "operator"
    assert verify_audit_log(tmp_path).count == 1
    assert json.loads(approved_path(tmp_path, H).read_text())["by"] == "operator"
    with pytest.raises(ValueError, match="by must be one of"):
        approve(tmp_path, "1" * 64, by="coordinator")


@pytest.mark.parametrize("bad", ["abc", H.upper(), H + "0", "../" + H[3:], "g" * 64, 7])
def test_malformed_hashes_are_refused(tmp_path, bad):
    policy = NodePolicy(require_approval=True, approved=(H,))
    with pytest.raises(ValueError, match="a plan hash is 64 lowercase hex digits"):
        approve(tmp_path, bad)
    with pytest.raises(ValueError, match="a plan hash is 64 lowercase hex digits"):
        record_pending(tmp_path, bad, SUMMARY)
    assert not is_approved(tmp_path, policy, bad)
    clock = FakeClock()
    with pytest.raises(NodeRefusal, match=r"^not approved$"):
        await_approval(tmp_path, policy, bad, clock=clock, sleep=clock.sleep)
    assert not (tmp_path / "approved").exists() and not AuditLog(tmp_path).entries()


def test_pending_lists_what_waits_until_approved(tmp_path):
    record_pending(tmp_path, H, SUMMARY)
    other = plan_hash({**PLAN, "epsilon": math.inf})
    record_pending(tmp_path, other, {**SUMMARY, "epsilon": math.inf, "run": "r2"})
    (tmp_path / "pending" / f"{'e' * 64}.json").write_text("{torn")
    listed = {p["plan_hash"]: p for p in list_pending(tmp_path)}
    assert set(listed) == {H, other, "e" * 64}
    assert listed[H]["method"] == "dp_gam" and listed[H]["columns"] == ["age", "admission"]
    assert listed[other]["epsilon"] == "inf" and "unreadable" in listed["e" * 64]
    approve(tmp_path, H)
    assert H not in {p["plan_hash"] for p in list_pending(tmp_path)}


def test_an_approval_file_the_audit_log_does_not_show_approves_nothing(tmp_path):
    """A file dropped into approved/ by hand: not approved, and the wait expires.
    Twin: the same file with its logged approval (``approve``) passes."""
    policy = NodePolicy(require_approval=True, approval_timeout=5)
    (tmp_path / "approved").mkdir()
    approved_path(tmp_path, H).write_text("{}")
    assert not is_approved(tmp_path, policy, H)
    clock = FakeClock()
    with pytest.raises(NodeRefusal, match=r"^not approved$"):
        await_approval(tmp_path, policy, H, clock=clock, sleep=clock.sleep)
    assert approve(tmp_path, H)["by"] == "operator"  # logged now, though the file was there
    assert await_approval(tmp_path, policy, H, clock=clock, sleep=clock.sleep) == "operator"


def test_plan_summary_shows_the_nodes_own_epsilon():
    plan = {**PLAN, "method": "dp_gam", "columns": ["age"]}
    s = plan_summary("r7", plan, epsilon=0.75)
    assert s == {"run": "r7", "stage": "train", "method": "dp_gam", "rounds": 3, "stages": [],
                 "epsilon": 0.75, "delta": 1e-5, "columns": ["age"]}  # fmt: skip
    assert plan_summary("r7", PLAN)["method"] is None and plan_summary("r7", PLAN)["epsilon"] == 1.0
