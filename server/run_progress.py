"""``progress.jsonl``: one line per round, written by the ServerApp as the run goes.

The ServerApp's results folder (``<out-dir>/<run id>/``) holds ``config.json``
from the start and ``privacy.json`` (the ledger's journal, rewritten at every
release), but ``rounds.json``, ``communication.json`` and ``status.json`` only
once the run ends. So that a run can be followed from its folder
(``fedpriv follow``, ``fedpriv report`` on a running run), the Flower strategy
(:class:`fedpriv.server.flower_strategy.FlowerStrategy`) appends one JSON line per
round here:

``{"round": r, "rounds": T, "asked": [...], "replied": [...], "aborted": bool,
"epsilon_upper_bound": x | null}``

``asked`` and ``replied`` are partition ids (who was asked, whose upload was
taken): the facts ``communication.json`` and the round log lines already state.
No wall time is written: a round's duration tracks the clients' work on their
rows (the run's ``timings`` caveat). ``epsilon_upper_bound`` is the ledger's cheap
bound on ε spent, about every tenth round (the round log line's), else ``null``.

Each line is written with one ``write`` and flushed; a reader skips a last line
that is not (yet) complete JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The file's name in a run's results folder.
PROGRESS_FILE = "progress.jsonl"


def append_progress(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` (created if absent)."""
    line = json.dumps(record, sort_keys=True, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()


def read_progress(path: Path) -> list[dict[str, Any]]:
    """Every complete line of ``path`` (``[]`` if absent), in order."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if isinstance(record, dict) and isinstance(record.get("round"), int):
            out.append(record)
    return out
