"""A node's audit log: append-only, hash-chained JSON lines in its state directory.

The node ledger (:mod:`fedpriv.privacy.node_budget`) says what a node has spent; the
audit log says what it was asked and what it did, so that a privacy officer can
check from the node's own files, without trusting the coordinator, that nothing
was answered outside an admitted plan. Each line of ``fedpriv-node-audit.jsonl``
is one entry::

    {"seq": i, "time": "2026-12-02T06:00:00.000000Z", "kind": "...", ...fields...,
     "prev": <hash of entry i-1 (entry 0: 64 zeros)>, "hash": <sha256 of this entry>}

``hash`` is the SHA-256 of the entry's canonical JSON (:func:`canonical_json`)
without ``hash``. Editing a field breaks its own hash; deleting, inserting or
reordering lines breaks ``seq`` and the next entry's ``prev``. What a chain alone
cannot show is the loss of its *last* lines (the log then ends earlier, intact):
:func:`verify_audit_log` returns the head (count and last hash) for an officer to
record elsewhere, and :func:`ledger_mismatches` checks the admitted plans against
the ledger (a ledger rolled back to regain budget no longer holds them).

Appends from two processes of the same node are serialised by an exclusive
``fcntl.flock`` on the log; the previous hash is re-read under the lock, and each
line is written with one ``write`` and fsync'd before the lock is released.

The kinds a node logs and the fields each must carry are :data:`KINDS`. The log
stays on the node (it is not sent anywhere): refusal reasons are kept in full.
Non-finite floats are written as the strings ``"inf"``, ``"-inf"``, ``"nan"``
so that every line is strict JSON.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The audit log's file inside the node's state directory.
AUDIT_FILE = "fedpriv-node-audit.jsonl"
#: ``prev`` of the first entry.
GENESIS = "0" * 64
#: The kinds of entry and the payload fields each must carry (more are allowed).
KINDS: dict[str, tuple[str, ...]] = {
    "plan-admitted": ("plan_hash", "run", "stage", "method", "stages", "epsilon", "delta"),
    "plan-refused": ("plan_hash", "run", "reason"),
    "query-answered": ("run", "stage", "round", "q", "share_std"),
    "query-refused": ("run", "stage", "round", "reason"),
    "unmask": ("run", "round", "survivors", "dropped"),
    "unmask-refused": ("reason",),
    "approval": ("plan_hash", "by"),
}
#: Fields the log itself sets; a payload may not use them.
RESERVED = ("seq", "time", "kind", "prev", "hash")
_HEX = frozenset("0123456789abcdef")


class AuditLogError(RuntimeError):
    """The audit log cannot be appended to (its last line is torn or tampered with).

    A node that cannot log should fail closed: refuse what it was about to do.
    """


def canonical_json(obj: Any) -> str:
    """The one serialisation every hash here is taken over: sorted keys, no spaces,
    UTF-8 kept as is (``ensure_ascii=False``)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_hash(plan: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a declared plan's canonical JSON: the ONE plan identity the
    node, the approval CLI and the coordinator use.

    Hash the plan as the node receives it: ``json.loads`` of the wire text gives the
    same mapping back for JSON's own types (ints stay ints, floats round-trip).
    """
    if not isinstance(plan, Mapping):
        raise TypeError(f"plan_hash takes a plan mapping; got {type(plan).__name__}")
    return hashlib.sha256(canonical_json(dict(plan)).encode("utf-8")).hexdigest()


def is_hash(text: Any) -> bool:
    """Whether ``text`` is a SHA-256 hex digest as this module writes them (64 lowercase hex)."""
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


def finite_json(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (strict JSON), tuples as lists."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {str(k): finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def entry_hash(entry: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of an entry's canonical JSON without its ``hash`` field."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AuditLog:
    """A node's audit log in ``state_dir`` (created on the first append).

    ``now``: the timestamp source (ISO-8601 UTC text), injectable for tests.
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, now: Callable[[], str] = utc_now):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / AUDIT_FILE
        self._now = now

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one entry of ``kind`` with its payload ``fields``; returns it.

        Raises ``ValueError`` for an unknown kind, a missing or reserved field, or a
        payload that is not JSON; :class:`AuditLogError` if the log's last line is
        torn or does not hash to itself (nothing is appended then).
        """
        if kind not in KINDS:
            raise ValueError(f"audit kind must be one of {sorted(KINDS)}; got {kind!r}")
        missing = [f for f in KINDS[kind] if f not in fields]
        clash = [f for f in fields if f in RESERVED]
        if missing or clash:
            raise ValueError(
                f"audit entry {kind!r}: missing fields {missing}, reserved fields {clash} "
                f"(a {kind!r} entry carries {list(KINDS[kind])}; {list(RESERVED)} are the log's)"
            )
        payload = finite_json(fields)
        try:
            canonical_json(payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"audit entry {kind!r}: payload is not JSON ({exc})") from None
        created = not self.path.exists()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by close, after the fsync
            seq, prev = self._head(fd)
            entry = {"seq": seq, "time": self._now(), "kind": kind, **payload, "prev": prev}
            entry["hash"] = entry_hash(entry)
            data = (canonical_json(entry) + "\n").encode("utf-8")
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:  # the new file's directory entry, durable too
            dir_fd = os.open(self.state_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return entry

    def _head(self, fd: int) -> tuple[int, str]:
        """(next seq, hash of the last entry) read under the lock: the file's tail."""
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == 0:
            return 0, GENESIS
        tail, pos = b"", size
        while pos > 0 and tail.count(b"\n") < 2:
            step = min(4096, pos)
            pos -= step
            tail = os.pread(fd, step, pos) + tail
        if not tail.endswith(b"\n"):
            raise AuditLogError(
                f"audit log {self.path}: its last line is torn (no newline); nothing appended "
                "(run `fedpriv inspect` on the state directory)"
            )
        last = tail[:-1].rsplit(b"\n", 1)[-1]
        try:
            entry = json.loads(last.decode("utf-8"))
            ok = isinstance(entry, dict) and entry_hash(entry) == entry.get("hash")
            seq = int(entry["seq"]) + 1 if ok and isinstance(entry["seq"], int) else -1
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            ok, seq = False, -1
        if not ok or seq < 1:
            raise AuditLogError(
                f"audit log {self.path}: its last line does not hash to itself; nothing "
                "appended (run `fedpriv inspect` on the state directory)"
            )
        return seq, entry["hash"]

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, parsed (unchecked: :func:`verify_audit_log` checks)."""
        return [e for e in _read(self.path)[0] if isinstance(e, dict)]


def _read(path: Path) -> tuple[list[Any], list[bytes], bool]:
    """(parsed lines, raw lines, ends with newline) under a shared lock; an
    unparsable line is ``None`` in the first list."""
    if not path.exists():
        return [], [], True
    with open(path, "rb") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
        data = fh.read()
    raw = data.split(b"\n")
    ends = data.endswith(b"\n") or not data
    if ends:
        raw = raw[:-1]
    parsed: list[Any] = []
    for line in raw:
        try:
            parsed.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            parsed.append(None)
    return parsed, raw, ends


@dataclass(frozen=True, kw_only=True)
class AuditVerification:
    """What :func:`verify_audit_log` found.

    ``count``: entries verified intact (before any break); ``lines``: lines in the
    file; ``broken_seq``: the seq at which the chain first breaks (the position the
    bad line holds), ``reason`` why; ``head``: the hash of the last intact entry.
    """

    present: bool
    ok: bool
    count: int
    lines: int
    head: str = GENESIS
    broken_seq: int | None = None
    reason: str | None = None
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def message(self) -> str:
        if self.ok:
            return f"audit log: {self.count} entries, chain intact (head {self.head[:16]}…)"
        return f"audit log broken at seq {self.broken_seq}: {self.reason}"


def verify_audit_log(state_dir: str | os.PathLike[str]) -> AuditVerification:
    """Check the audit log in ``state_dir`` line by line; pure (raises only on I/O).

    A missing log is ``present=False, ok=True`` with no entries.
    """
    path = Path(state_dir) / AUDIT_FILE
    present = path.exists()
    parsed, raw, ends = _read(path)
    prev, kinds = GENESIS, {}
    for i, entry in enumerate(parsed):
        torn = i == len(raw) - 1 and not ends
        reason = _line_fault(i, entry, raw[i], torn, prev, parsed)
        if reason is not None:
            return AuditVerification(present=True, ok=False, count=i, lines=len(raw),
                                     head=prev, broken_seq=i, reason=reason,
                                     kinds=kinds)  # fmt: skip
        prev = entry["hash"]
        kinds[entry["kind"]] = kinds.get(entry["kind"], 0) + 1
    return AuditVerification(present=present, ok=True, count=len(raw), lines=len(raw),
                             head=prev, kinds=kinds)  # fmt: skip


def _line_fault(
    i: int, entry: Any, line: bytes, torn: bool, prev: str, parsed: list[Any]
) -> str | None:
    """Why line ``i`` (0-based) breaks the chain, or ``None``."""
    if torn:
        return "truncated last line (no newline: a torn write)"
    if entry is None:
        return f"line {i + 1} is {'an empty line' if not line.strip() else 'not JSON'}"
    if not isinstance(entry, dict) or not all(k in entry for k in RESERVED):
        return f"line {i + 1} is not an audit entry (needs {list(RESERVED)})"
    seq = entry["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        return f"line {i + 1}: seq {seq!r} is not an integer"
    if seq != i:
        later = any(isinstance(e, dict) and e.get("seq") == i for e in parsed[i + 1 :])
        how = "deleted line(s)" if seq > i and not later else "reordered or duplicated lines"
        return f"{how}: line {i + 1} holds seq {seq}, expected {i}"
    if entry_hash(entry) != entry["hash"]:
        return "edited entry: its hash does not match its contents"
    if entry["prev"] != prev:
        return "prev is not the previous entry's hash (a line removed or replaced)"
    if entry["kind"] not in KINDS:
        return f"unknown kind {entry['kind']!r}"
    return None


def ledger_mismatches(ledger: Mapping[str, Any], entries: list[Mapping[str, Any]]) -> list[str]:
    """Admitted plans the audit log records but the node ledger does not hold.

    A node saves its ledger before it logs ``plan-admitted``, so every admission
    logged is in the ledger; one missing means the ledger was rolled back or
    replaced (an old copy regains budget). Returns one line per missing stage.
    """
    runs = ledger.get("runs", {}) if isinstance(ledger, Mapping) else {}
    out = []
    for e in entries:
        if e.get("kind") != "plan-admitted":
            continue
        run = runs.get(str(e.get("run")))
        stages = run.get("stages", {}) if isinstance(run, Mapping) else {}
        if str(e.get("stage")) not in stages:
            out.append(
                f"run {e.get('run')} stage {e.get('stage')!r}, admitted at audit seq "
                f"{e.get('seq')}, is missing from the ledger (rolled back or replaced?)"
            )
    return out
