"""What ``fedpriv inspect STATE_DIR`` shows of a node: spend, history, and their checks.

A node's state directory holds its ledger (:mod:`fedpriv.privacy.node_budget`,
what it spent) and its audit log (:mod:`fedpriv.privacy.node_audit`, what it was
asked and did). :func:`node_report` reads both strictly and refuses, with one
line (:class:`InspectError`), anything a privacy officer must not read as "nothing
spent": a folder that holds neither file, a ledger that is not JSON or not a
ledger's shape, a broken audit chain (naming its first bad seq), and a ledger
missing admissions the audit log records (rolled back or replaced).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpriv.privacy.node_audit import (
    AUDIT_FILE,
    AuditLog,
    ledger_mismatches,
    verify_audit_log,
)
from fedpriv.privacy.node_budget import LEDGER_FILE, POLICY_KEYS, node_summary

#: Entries of the audit log the report lists (the most recent).
LAST = 5
#: The history's counters: label, audit kind.
HISTORY = (
    ("plans_admitted", "plan-admitted"),
    ("plans_refused", "plan-refused"),
    ("rounds_answered", "query-answered"),
    ("rounds_refused", "query-refused"),
    ("unmasks", "unmask"),
    ("unmasks_refused", "unmask-refused"),
    ("approvals", "approval"),
)


class InspectError(ValueError):
    """A node state directory that cannot be reported on (one line: what and where)."""


def is_state_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a node ledger or a node audit log."""
    p = Path(path)
    return (p / LEDGER_FILE).is_file() or (p / AUDIT_FILE).is_file()


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x >= 0


def _shape_fault(data: Any) -> str | None:
    """Where a parsed ledger departs from the shape :class:`NodeLedger` writes."""
    if not isinstance(data, dict):
        return f"the top level must be an object; got {type(data).__name__}"
    runs = data.get("runs")
    if not isinstance(runs, dict):
        return f"'runs' must be an object of runs; got {runs!r:.60}"
    for rid, run in runs.items():
        at = f"runs[{rid!r}]"
        if not isinstance(run, dict):
            return f"{at} must be an object; got {run!r:.60}"
        for key in ("epsilon", "delta"):
            if not _number(run.get(key)):
                return f"{at}.{key} must be a number ≥ 0; got {run.get(key)!r:.60}"
        stages = run.get("stages")
        if not isinstance(stages, dict):
            return f"{at}.stages must be an object; got {stages!r:.60}"
        for name, stage in stages.items():
            where = f"{at}.stages[{name!r}]"
            if not isinstance(stage, dict):
                return f"{where} must be an object; got {stage!r:.60}"
            answered, rounds = stage.get("answered"), stage.get("rounds")
            if not isinstance(answered, list) or not all(type(r) is int for r in answered):
                return f"{where}.answered must be a list of rounds; got {answered!r:.60}"
            if type(rounds) is not int or rounds < 0:
                return f"{where}.rounds must be an integer ≥ 0; got {rounds!r:.60}"
    policy = data.get("policy", {})
    if not isinstance(policy, dict):
        return f"'policy' must be an object; got {policy!r:.60}"
    for key, value in policy.items():
        if key not in POLICY_KEYS or not (value is None or _number(value)):
            return f"policy {key!r} = {value!r:.60} (keys {list(POLICY_KEYS)}, numbers ≥ 0 or null)"
    return None


def read_ledger_strict(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The node ledger in ``state_dir``, checked; ``None`` if there is none.
    Raises :class:`InspectError` if it is not JSON or not a ledger's shape."""
    path = Path(state_dir) / LEDGER_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InspectError(f"node ledger {path} is not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise InspectError(
            f"node ledger {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg})"
        ) from None
    if (fault := _shape_fault(data)) is not None:
        raise InspectError(f"node ledger {path} is not a node ledger: {fault}")
    return data


def node_report(state_dir: str | os.PathLike[str], *, last: int = LAST) -> dict[str, Any]:
    """The node's summary (:func:`node_summary`) with an ``audit`` section: the chain's
    check, the history's counts and the ``last`` entries. Raises :class:`InspectError`."""
    state = Path(state_dir)
    if not is_state_dir(state):
        raise InspectError(
            f"{state} holds no node ledger ({LEDGER_FILE}) nor audit log ({AUDIT_FILE})"
        )
    ledger = read_ledger_strict(state)
    check = verify_audit_log(state)
    if not check.ok:
        raise InspectError(
            f"audit log {state / AUDIT_FILE} is broken at seq {check.broken_seq}: {check.reason}"
        )
    entries = AuditLog(state).entries() if check.present else []
    if ledger is None and check.kinds.get("plan-admitted"):
        raise InspectError(
            f"{state} has no node ledger ({LEDGER_FILE}) but its audit log records "
            f"{check.kinds['plan-admitted']} admitted plan(s): deleted?"
        )
    missing = ledger_mismatches(ledger or {}, entries)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InspectError(f"node ledger {state / LEDGER_FILE}: {missing[0]}{more}")
    summary = node_summary(state)
    history = {label: check.kinds.get(kind, 0) for label, kind in HISTORY}
    recent = [{k: v for k, v in e.items() if k not in ("prev", "hash")} for e in entries[-last:]]
    audit = {"present": check.present, "ok": True, "entries": check.count, "head": check.head,
             **history, "last": recent}  # fmt: skip
    return {**summary, "audit": audit}


def _value(v: Any) -> str:
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.6g}"
    if isinstance(v, str) and len(v) == 64:
        return v[:12] + "…"  # a hash: its prefix is enough to tell plans apart
    return json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v


def entry_line(entry: Mapping[str, Any]) -> str:
    """One audit entry as text: seq, time, kind, then its payload."""
    head = f"#{entry.get('seq')} {entry.get('time')} {entry.get('kind')}"
    payload = [f"{k}={_value(v)}" for k, v in sorted(entry.items())
               if k not in ("seq", "time", "kind", "prev", "hash")]  # fmt: skip
    return " ".join([head, *payload])


def report_text(report: Mapping[str, Any]) -> str:
    """The report as text: the ledger's summary, then the audit history."""
    lines = [summary_text(report)]
    a = report["audit"]
    if not a["present"]:
        lines.append("audit log: none (this node kept no audit log)")
        return "\n".join(lines)
    lines += [
        f"audit log: {a['entries']} entries, chain intact; head {a['head']}",
        f"history: plans {a['plans_admitted']} admitted, {a['plans_refused']} refused; rounds "
        f"{a['rounds_answered']} answered, {a['rounds_refused']} refused; unmasks "
        f"{a['unmasks']}, {a['unmasks_refused']} refused; approvals {a['approvals']}",
    ]
    if a["last"]:
        lines.append(f"last {len(a['last'])} entries:")
        lines += [f"  {entry_line(e)}" for e in a["last"]]
    return "\n".join(lines)


def summary_text(summary: Mapping[str, Any]) -> str:
    """The summary as a few lines of text."""

    def num(x: Any) -> str:
        return "none" if x is None or (isinstance(x, float) and math.isinf(x)) else f"{x:.6g}"

    p = summary["policy"]
    lines = [
        f"node ledger in {summary['state_dir']}",
        f"policy: per run ε ≤ {num(p['max-epsilon'])}, δ ≤ {num(p['max-delta'])}; lifetime "
        f"ε ≤ {num(p['max-lifetime-epsilon'])}, δ ≤ {num(p['max-lifetime-delta'])}",
        f"lifetime spend: ε {num(summary['lifetime_epsilon'])}, δ "
        f"{num(summary['lifetime_delta'])} over {len(summary['runs'])} run(s)",
        f"remaining: ε {num(summary['remaining_epsilon'])}, δ {num(summary['remaining_delta'])}",
    ]
    for rid, r in summary["runs"].items():
        lines.append(f"  run {rid}: ε {num(r['epsilon'])}, δ {num(r['delta'])}, "
                     f"{r['rounds_answered']} rounds answered")  # fmt: skip
    return "\n".join(lines)
