"""What a run's results folder holds, read as it is: finished, running or failed.

Two writers fill a results folder. The ServerApp (:mod:`fedpriv.server.app`, a
Flower simulation or deployment) writes ``config.json`` and ``privacy.json``
(the ledger's journal, ``"complete": false`` until the end) from the start,
``progress.jsonl`` one line per round (:mod:`fedpriv.server.run_progress`), and
``rounds.json``, ``metrics.json``, ``communication.json``, ``status.json`` and
``model.fedpriv.npz`` at the end. ``fedpriv run --out`` (in process) writes
``model.fedpriv.npz`` and ``privacy.json``, whose ``run`` holds the run config,
its status and held-out scores.

:func:`read_run` reads whichever of these exist (a missing or unreadable file
is noted, never fatal) and says whether the run is still going: a Flower run's
folder without ``status.json`` whose journal is not complete.
:func:`epsilon_by_round` re-accounts the journal's events round by round.
Everything read here is public or released: settings, the ledger's events and
their accounting, reply counts, scores of public rows, the released model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.server.run_progress import PROGRESS_FILE, read_progress

from fedpriv.artefact import ARTEFACT_NAME

#: Files of a run folder (besides the model file and progress.jsonl).
FILES = (
    "config.json",
    "status.json",
    "privacy.json",
    "metrics.json",
    "communication.json",
    "rounds.json",
)
_ROUND = re.compile(r"^round (\d+)\b")


@dataclass
class RunFiles:
    """A results folder as read (module docstring); ``None`` for a file not there."""

    path: Path
    kind: str  # "flower" (a ServerApp's folder) or "in-process" (fedpriv run --out)
    config: dict[str, Any] | None
    status: dict[str, Any] | None
    privacy: dict[str, Any] | None
    metrics: dict[str, Any] | None
    communication: dict[str, Any] | None
    rounds: dict[str, Any] | None
    progress: list[dict[str, Any]]
    model_path: Path | None
    problems: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """A Flower run whose end is not written yet (no status, journal incomplete)."""
        if self.kind != "flower" or self.status is not None:
            return False
        return self.privacy is None or self.privacy.get("complete") is False

    @property
    def state(self) -> str:
        """``running``, the written status (``completed``, ``degraded``, ``failed``),
        or ``unknown`` (a folder whose run stopped without saying how)."""
        if self.running:
            return "running"
        if self.status is not None:
            return str(self.status.get("status", "unknown"))
        return "unknown"

    @property
    def rounds_planned(self) -> int | None:
        for source in (self.status, self.config):
            value = (source or {}).get("rounds_planned", (source or {}).get("rounds"))
            if isinstance(value, int) and value > 0:
                return value
        last = self.progress[-1] if self.progress else {}
        return last.get("rounds") if isinstance(last.get("rounds"), int) else None


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path.name}: not readable ({exc})")
        return None


def read_run(path: str | Path) -> RunFiles:
    """The run folder ``path`` (a Flower run's ``<out-dir>/<run id>`` or ``latest``, or an
    in-process ``--out`` folder), as it is now.

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a folder holding any of a run's files.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder")
    problems: list[str] = []
    data = {name: _read_json(path / name, problems) for name in FILES}
    data = {k: (v if isinstance(v, dict) else None) for k, v in data.items()}
    model = path / ARTEFACT_NAME
    if not any(data.values()) and not model.is_file():
        raise FileNotFoundError(
            f"{path} holds none of a run's files ({', '.join(FILES)}, {ARTEFACT_NAME})"
        )
    privacy = data["privacy.json"]
    run = (privacy or {}).get("run") if isinstance((privacy or {}).get("run"), dict) else None
    kind = "in-process" if run is not None and data["config.json"] is None else "flower"
    config, status = data["config.json"], data["status.json"]
    if kind == "in-process":
        config = run.get("config") if isinstance(run.get("config"), dict) else None
        status = {"status": run.get("status", "unknown"), "reason": run.get("reason", "")}
    return RunFiles(
        path=path,
        kind=kind,
        config=config,
        status=status,
        privacy=privacy,
        metrics=data["metrics.json"],
        communication=data["communication.json"],
        rounds=data["rounds.json"],
        progress=read_progress(path / PROGRESS_FILE),
        model_path=model if model.is_file() else None,
        problems=problems,
    )


def journal_events(privacy: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """``(label, event dict)`` of every release in the journal, in release order."""
    out = []
    for entry in (privacy or {}).get("events", []) or []:
        if isinstance(entry, dict) and isinstance(entry.get("event"), dict):
            out.append((str(entry.get("label", "")), entry["event"]))
    return out


def as_float(x: Any) -> float | None:
    """A JSON number or ``"inf"`` as a float; anything else ``None``."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return float(x)
    if x == "inf":
        return math.inf
    return None


def epsilon_by_round(
    events: Iterable[tuple[str, Mapping[str, Any]]], delta: float, *, max_points: int = 80
) -> list[tuple[int, float]]:
    """ε spent after each round, re-accounted from the journal's events.

    A release labelled ``round r: ...`` (the learners' 0-based round) counts at
    round ``r + 1`` (the 1-based round of ``rounds.json`` and the log lines); an
    unlabelled one at the latest round seen. Each point is the minimum of the PLD
    figure at the journal's discretisation and the RDP figure, both upper bounds
    on ε at ``delta`` (the final figure, at the ledger's finer discretisation, is
    the card's). At most ``max_points`` rounds are accounted, evenly spaced, the
    last always among them.
    """
    from dp_accounting import dp_event

    from fedpriv.privacy import accounting
    from fedpriv.privacy.events import event_from_dict
    from fedpriv.privacy.ledger_report import JOURNAL_DISCRETIZATION
    from fedpriv.privacy.pld import flatten

    cuts: list[tuple[int, dict[dp_event.DpEvent, int]]] = []
    counts: dict[dp_event.DpEvent, int] = {}
    current = 0
    for label, spec in events:
        m = _ROUND.match(label)
        r = int(m.group(1)) + 1 if m else max(current, 1)
        if counts and r != current:  # round ``current`` is complete
            cuts.append((current, dict(counts)))
        current = r
        for leaf, n in flatten(event_from_dict(dict(spec))):
            counts[leaf] = counts.get(leaf, 0) + n
    if counts:
        cuts.append((current, dict(counts)))
    seen: dict[int, dict] = {}
    for r, c in cuts:
        seen[r] = c  # a round seen twice (labels out of order): its latest state
    keys = sorted(seen)
    if len(keys) > max_points:
        step = len(keys) / (max_points - 1)
        keys = sorted({keys[int(i * step)] for i in range(max_points - 1)} | {keys[-1]})
    out = []
    for r in keys:
        groups = list(seen[r].items())
        eps_pld, _ = accounting.pld_epsilon(
            groups, delta, discretization=JOURNAL_DISCRETIZATION, cache=False
        )
        out.append((r, min(eps_pld, accounting.rdp_epsilon(groups, delta))))
    return out
