"""Data-owner approval: under ``require-approval`` a plan waits for its node's operator.

A node whose policy (:mod:`fedpriv.privacy.node_policy`) sets ``require-approval``
admits a declared plan only once the data owner has approved its hash
(:func:`fedpriv.privacy.node_audit.plan_hash`), or if the policy lists it in
``approved``. The node writes what it is asked to ``<state-dir>/pending/<hash>.json``
(:func:`record_pending`: method, stages, ε, δ, columns, run), then waits at most
``approval-timeout`` seconds (:func:`await_approval`), polling
``<state-dir>/approved/<hash>``, which the operator creates with
``fedpriv node approve HASH --state DIR`` (:func:`approve`, logged in the node's
audit log). On expiry the node refuses with the bare reason ``"not approved"``:
the coordinator learns nothing of the node's files or of who was asked.

The wait is bounded and depends on nothing but the operator's act and the clock:
no row is read before the plan is admitted.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedpriv.atomic import write_text_atomic
from fedpriv.privacy.node_audit import AuditLog, finite_json, is_hash, utc_now
from fedpriv.privacy.node_plan import NodeRefusal
from fedpriv.privacy.node_policy import NodePolicy

#: Sub-directories of the state directory: what waits, what the operator approved.
PENDING_DIR = "pending"
APPROVED_DIR = "approved"
#: Who may approve: the operator (``fedpriv node approve``) or the policy's list.
APPROVERS = ("operator", "policy")
#: The reason a plan that was not approved in time is refused with (nothing else).
NOT_APPROVED = "not approved"
#: The longest poll interval (s): an approval is seen within this much of being made.
MAX_POLL = 0.5
#: The fields of a pending plan's summary the operator is shown.
SUMMARY_FIELDS = ("run", "stage", "method", "rounds", "stages", "epsilon", "delta", "columns")


def _checked(plan_hash: Any) -> str:
    if not is_hash(plan_hash):
        raise ValueError(f"a plan hash is 64 lowercase hex digits; got {plan_hash!r}")
    return plan_hash


def pending_path(state_dir: str | os.PathLike[str], plan_hash: str) -> Path:
    return Path(state_dir) / PENDING_DIR / f"{_checked(plan_hash)}.json"


def approved_path(state_dir: str | os.PathLike[str], plan_hash: str) -> Path:
    return Path(state_dir) / APPROVED_DIR / _checked(plan_hash)


def plan_summary(
    run_id: str, plan: Mapping[str, Any], *, epsilon: float | None = None
) -> dict[str, Any]:
    """What the operator is shown of a declared plan (:data:`SUMMARY_FIELDS`; ``None``
    where the plan does not say). ``epsilon``: the node's own ε for it, if computed
    (:func:`fedpriv.privacy.node_budget.plan_epsilon`), else the plan's claim."""
    out = {k: plan.get(k) for k in SUMMARY_FIELDS if k != "run"}
    out["run"] = str(run_id)
    if epsilon is not None:
        out["epsilon"] = float(epsilon)
    return out


def record_pending(
    state_dir: str | os.PathLike[str], plan_hash: str, summary: Mapping[str, Any]
) -> Path:
    """Write what plan ``plan_hash`` asks (``summary``: at least :data:`SUMMARY_FIELDS`
    the node knows) to ``pending/<hash>.json`` for the operator; returns the file."""
    path = pending_path(state_dir, plan_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**finite_json(dict(summary)), "plan_hash": plan_hash, "requested": utc_now()}
    write_text_atomic(path, json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False))
    return path


def approve(
    state_dir: str | os.PathLike[str], plan_hash: str, *, by: str = "operator"
) -> dict[str, Any] | None:
    """Approve plan ``plan_hash`` on this node: log an ``approval`` entry in the audit
    log, then write ``approved/<hash>`` atomically. Returns the audit entry, or
    ``None`` if the plan was already approved (nothing written)."""
    path = approved_path(state_dir, plan_hash)
    if by not in APPROVERS:
        raise ValueError(f"by must be one of {list(APPROVERS)}; got {by!r}")
    if _logged_approval(state_dir, plan_hash) is not None:
        return None
    # Logged first: a crash between the two leaves a logged approval that never took
    # effect (the plan is still refused), never an approval the log does not show.
    entry = AuditLog(state_dir).append("approval", plan_hash=plan_hash, by=by)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"by": by, "time": entry["time"]}) + "\n")
    return entry


def _logged_approval(state_dir: str | os.PathLike[str], plan_hash: str) -> str | None:
    """Who approved ``plan_hash``: its approval file is there and the audit log's last
    ``approval`` entry for it says by whom (``None``: not approved)."""
    if not approved_path(state_dir, plan_hash).is_file():
        return None
    by = None
    for e in AuditLog(state_dir).entries():
        if e.get("kind") == "approval" and e.get("plan_hash") == plan_hash:
            by = str(e.get("by"))
    return by


def approval_source(
    state_dir: str | os.PathLike[str], policy: NodePolicy, plan_hash: str
) -> str | None:
    """``"policy"`` if the policy lists the hash, else who approved it with :func:`approve`
    (``"operator"``), else ``None`` (a malformed hash is never approved).

    An approval counts only with its ``approval`` entry in the audit log: a file
    dropped into ``approved/`` by other means approves nothing.
    """
    if not is_hash(plan_hash):
        return None
    if plan_hash in policy.approved:
        return "policy"
    return _logged_approval(state_dir, plan_hash)


def is_approved(state_dir: str | os.PathLike[str], policy: NodePolicy, plan_hash: str) -> bool:
    """Whether plan ``plan_hash`` is approved on this node (by its policy or operator)."""
    return approval_source(state_dir, policy, plan_hash) is not None


def await_approval(
    state_dir: str | os.PathLike[str],
    policy: NodePolicy,
    plan_hash: str,
    *,
    timeout: float | None = None,
    poll: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
) -> str:
    """Wait until plan ``plan_hash`` is approved, at most ``timeout`` seconds (default:
    the policy's ``approval-timeout``), checking every ``poll`` seconds.

    Returns who approved it (``"policy"``, ``"operator"``), or ``"not required"``
    at once if the policy does not require approval. Raises
    ``NodeRefusal("not approved")`` on expiry or for a malformed hash.
    """
    if not 0 < poll <= MAX_POLL:
        raise ValueError(f"poll must lie in (0, {MAX_POLL}] seconds; got {poll!r}")
    wait = policy.approval_timeout if timeout is None else timeout
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < math.inf:
        raise ValueError(f"timeout must be a number of seconds in [0, inf); got {timeout!r}")
    if not policy.require_approval:
        return "not required"
    if not is_hash(plan_hash):
        raise NodeRefusal(NOT_APPROVED, code="not_approved")
    deadline = clock() + wait
    while True:
        source = approval_source(state_dir, policy, plan_hash)
        if source is not None:
            return source
        left = deadline - clock()
        if left <= 0:
            raise NodeRefusal(NOT_APPROVED, code="not_approved")
        sleep(min(poll, left))


def consume(state_dir: str | os.PathLike[str], plan_hash: str) -> None:
    """An operator's approval is for one run: the plan it let through was admitted, so
    its approval (and its pending record) are spent. The audit log keeps both the
    approval and the admission; the same plan asked again waits for a new approval.
    (A hash in the policy's ``approved`` list stays approved: that is a standing one.)"""
    for path in (approved_path(state_dir, plan_hash), pending_path(state_dir, plan_hash)):
        path.unlink(missing_ok=True)


def list_pending(state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The plans waiting for the operator (recorded, not approved), oldest first; an
    unreadable record is ``{"plan_hash": ..., "unreadable": reason}``."""
    folder = Path(state_dir) / PENDING_DIR
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        h = path.stem
        if not is_hash(h) or (Path(state_dir) / APPROVED_DIR / h).is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            record = {"unreadable": str(exc)}
        out.append({**record, "plan_hash": h})
    return sorted(out, key=lambda r: str(r.get("requested", "")))
