"""A node's audit log: the hash chain catches edits, deletions, reordering, torn and
non-JSON lines at the right seq; concurrent appends keep it intact; ``plan_hash`` is
one canonical digest. Each attack's twin shows the check carrying the test."""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import multiprocessing
import os
import threading

import pytest

from fedpriv.privacy import node_audit
from fedpriv.privacy.node_audit import (
    AUDIT_FILE,
    GENESIS,
    AuditLog,
    AuditLogError,
    entry_hash,
    ledger_mismatches,
    plan_hash,
    verify_audit_log,
)

N = 12


def _fill(state, n=N):
    log = AuditLog(state)
    for i in range(n):
        if i % 3 == 0:
            log.append("query-answered", run="r1", stage="train", round=i, q=0.1, share_std=2.5)
        elif i % 3 == 1:
            log.append("unmask", run="r1", round=i, survivors=3, dropped=1)
        else:
            log.append("query-refused", run="r1", stage="train", round=i, reason="beyond plan")
    return log


def _lines(state):
    return (state / AUDIT_FILE).read_text(encoding="utf-8").splitlines(keepends=True)


def _write(state, lines):
    (state / AUDIT_FILE).write_text("".join(lines), encoding="utf-8")


def test_the_chain_verifies_after_appends(tmp_path):
    log = _fill(tmp_path)
    check = verify_audit_log(tmp_path)
    assert check.ok and check.present and check.count == N and check.broken_seq is None
    entries = log.entries()
    assert [e["seq"] for e in entries] == list(range(N))
    assert entries[0]["prev"] == GENESIS and check.head == entries[-1]["hash"]
    for a, b in itertools.pairwise(entries):
        assert b["prev"] == a["hash"] == entry_hash(a)
    assert check.kinds == {"query-answered": 4, "unmask": 4, "query-refused": 4}
    assert entries[0]["time"].endswith("Z") and entries[0]["time"][10] == "T"


def test_a_missing_log_is_absent_not_broken(tmp_path):
    check = verify_audit_log(tmp_path)
    assert check.ok and not check.present and check.count == 0 and check.head == GENESIS


def _edit(lines):
    e = json.loads(lines[5])
    e["round"] = 99  # the entry's own hash no longer matches
    lines[5] = json.dumps(e) + "\n"
    return lines, 5, "edited entry"


def _delete(lines):
    del lines[5]
    return lines, 5, "deleted line(s): line 6 holds seq 6, expected 5"


def _swap(lines):
    lines[4], lines[5] = lines[5], lines[4]
    return lines, 4, "reordered"


def _truncate(lines):
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # a torn write: half a line, no newline
    return lines, N - 1, "truncated last line"


def _not_json(lines):
    lines[3] = "this is not JSON\n"
    return lines, 3, "line 4 is not JSON"


def _rehashed_edit(lines):
    # The editor recomputes the edited entry's own hash: the next entry's prev breaks.
    e = json.loads(lines[5])
    e["round"] = 99
    e["hash"] = entry_hash(e)
    lines[5] = json.dumps(e) + "\n"
    return lines, 6, "prev is not the previous entry's hash"


TAMPERS = [_edit, _delete, _swap, _truncate, _not_json, _rehashed_edit]


@pytest.mark.parametrize("tamper", TAMPERS, ids=lambda f: f.__name__.strip("_"))
def test_tampering_breaks_the_chain_at_the_right_seq(tmp_path, tamper, capsys):
    from fedpriv.server.cli import main

    _fill(tmp_path)
    lines, seq, why = tamper(_lines(tmp_path))
    _write(tmp_path, lines)
    check = verify_audit_log(tmp_path)
    assert not check.ok and check.broken_seq == seq and why in check.reason, check
    assert check.count == seq  # the entries before the break are intact
    # fedpriv inspect: exit 2, one line naming the seq.
    (tmp_path / "fedpriv-node-ledger.json").write_text('{"runs": {}}')
    capsys.readouterr()
    assert main(["inspect", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert f"broken at seq {seq}" in line and why in line


def _self_hash_only(i, entry, line, torn, prev, parsed):
    """A plain log: each line hashes itself, nothing links the lines (no seq, no prev)."""
    if entry is None or entry_hash(entry) != entry.get("hash"):
        return "edited"
    return None


def _ignores_prev(i, entry, line, torn, prev, parsed):
    if entry is None or entry_hash(entry) != entry.get("hash") or entry.get("seq") != i:
        return "edited or renumbered"
    return None


def test_twin_a_plain_log_does_not_catch_the_deletion(tmp_path, monkeypatch):
    _fill(tmp_path)
    lines, seq, _ = _delete(_lines(tmp_path))
    _write(tmp_path, lines)
    assert verify_audit_log(tmp_path).broken_seq == seq
    monkeypatch.setattr(node_audit, "_line_fault", _self_hash_only)
    check = verify_audit_log(tmp_path)
    assert check.ok and check.count == N - 1  # the deletion passes unseen


def test_twin_a_verifier_ignoring_prev_misses_a_renumbered_deletion(tmp_path, monkeypatch):
    """Delete line 5, renumber and re-hash the later lines: only ``prev`` catches it."""
    _fill(tmp_path)
    lines = _lines(tmp_path)
    del lines[5]
    for i in range(5, len(lines)):
        e = json.loads(lines[i])
        e["seq"] = i
        e["hash"] = entry_hash(e)
        lines[i] = json.dumps(e) + "\n"
    _write(tmp_path, lines)
    check = verify_audit_log(tmp_path)
    assert check.broken_seq == 5 and "prev" in check.reason
    monkeypatch.setattr(node_audit, "_line_fault", _ignores_prev)
    assert verify_audit_log(tmp_path).ok


def test_append_refuses_after_a_torn_or_tampered_last_line(tmp_path):
    log = _fill(tmp_path)
    good = _lines(tmp_path)
    torn, _, _ = _truncate(list(good))
    e = json.loads(good[-1])
    e["round"] = 1000  # the last entry edited: its hash no longer matches
    edited = [*good[:-1], json.dumps(e) + "\n"]
    for lines, why in ((torn, "torn"), (edited, "does not hash to itself")):
        _write(tmp_path, lines)
        before = (tmp_path / AUDIT_FILE).read_bytes()
        with pytest.raises(AuditLogError, match=why):
            log.append("unmask-refused", reason="too few survivors")
        assert (tmp_path / AUDIT_FILE).read_bytes() == before  # nothing appended
    _write(tmp_path, good)
    assert log.append("unmask-refused", reason="too few survivors")["seq"] == N


def test_append_checks_kind_and_fields(tmp_path):
    log = AuditLog(tmp_path)
    with pytest.raises(ValueError, match="audit kind must be one of"):
        log.append("plan-approved", plan_hash="0" * 64)
    with pytest.raises(ValueError, match=r"missing fields \['by'\]"):
        log.append("approval", plan_hash="0" * 64)
    with pytest.raises(ValueError, match=r"reserved fields \['seq'\]"):
        log.append("unmask-refused", reason="x", seq=7)
    with pytest.raises(ValueError, match="not JSON"):
        log.append("unmask-refused", reason=object())
    assert not (tmp_path / AUDIT_FILE).exists()


def test_non_finite_floats_are_strict_json(tmp_path):
    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")

    AuditLog(tmp_path).append(
        "plan-refused", plan_hash="0" * 64, run="r", reason="ε", epsilon=float("inf")
    )
    (line,) = _lines(tmp_path)
    entry = json.loads(line, parse_constant=refuse)
    assert entry["epsilon"] == "inf" and entry["reason"] == "ε"  # UTF-8 kept
    assert verify_audit_log(tmp_path).ok


def test_plan_hash_is_the_canonical_digest():
    plan = {"stage": "train", "epsilon": 1.5, "rounds": 3, "events": [], "run": "ß"}
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plan_hash(plan) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert plan_hash(dict(reversed(plan.items()))) == plan_hash(plan)  # key order
    assert plan_hash(json.loads(json.dumps(plan))) == plan_hash(plan)  # the wire round trip
    assert plan_hash({**plan, "epsilon": 1.5000001}) != plan_hash(plan)
    with pytest.raises(TypeError):
        plan_hash("not a plan")


def _append_many(state, tag, n):
    log = AuditLog(state)
    for i in range(n):
        log.append("query-answered", run=tag, stage="s", round=i, q=1.0, share_std=0.0)


def test_two_processes_appending_keep_the_chain(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), t, 200)) for t in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    check = verify_audit_log(tmp_path)
    assert check.ok and check.count == 400, check
    entries = AuditLog(tmp_path).entries()
    for tag in "ab":
        assert [e["round"] for e in entries if e["run"] == tag] == list(range(200))


@pytest.mark.parametrize("locking", [True, False], ids=["flock", "twin-no-lock"])
def test_an_append_waits_for_the_lock(tmp_path, monkeypatch, locking):
    """A writer holding the log's lock holds every append back; the twin without the
    lock appends straight through it."""
    _fill(tmp_path, 2)
    if not locking:
        real = fcntl.flock
        monkeypatch.setattr(
            node_audit.fcntl, "flock", lambda fd, op: None if op == fcntl.LOCK_EX else real(fd, op)
        )
    fd = os.open(tmp_path / AUDIT_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process of the node, mid-append
    t = threading.Thread(target=_append_many, args=(tmp_path, "t", 1))
    try:
        t.start()
        t.join(timeout=0.5 if locking else 30)
        # Held back while the lock is held (locking); through at once without it.
        assert t.is_alive() is locking
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        t.join(timeout=30)
    assert not t.is_alive() and verify_audit_log(tmp_path).count == 3


def test_ledger_mismatches_name_admissions_missing_from_the_ledger():
    entries = [
        {"seq": 0, "kind": "plan-admitted", "run": "r1", "stage": "train"},
        {"seq": 1, "kind": "plan-refused", "run": "r2"},
        {"seq": 2, "kind": "plan-admitted", "run": "r3", "stage": "eval"},
    ]
    ledger = {"runs": {"r1": {"stages": {"train": {}}}}}
    (line,) = ledger_mismatches(ledger, entries)
    assert "run r3 stage 'eval', admitted at audit seq 2, is missing" in line
    ledger["runs"]["r3"] = {"stages": {"eval": {}}}
    assert ledger_mismatches(ledger, entries) == []
