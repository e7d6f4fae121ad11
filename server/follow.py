"""``fedpriv follow RUN_DIR``: a run's progress in the terminal, from its folder alone.

It reads what the ServerApp writes as it goes (:mod:`fedpriv.server.run_files`):
one line per round from ``progress.jsonl`` (who was asked, who replied, who
dropped, the ledger's bound on ε about every tenth round), ε spent so far from
the privacy journal, and at the end the status, the test AUC and the final ε.
It needs no connection to the SuperLink: any process that can read the folder
(a shared disk, the coordinator's machine) can follow the run. ``--once``
prints what is there and returns; otherwise it polls until ``status.json``
appears or ``timeout`` passes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedpriv.server.run_files import RunFiles, as_float, read_run

#: Exit codes: 0 completed or degraded, 1 failed (or still running at the timeout).
DONE = {"completed": 0, "degraded": 0}


def round_line(rec: dict[str, Any]) -> str:
    """One round as a line: ``round 7/71: 5/5 replied, ε spent ≤ 0.596``."""
    asked, replied = rec.get("asked", []), rec.get("replied", [])
    line = f"round {rec['round']}/{rec.get('rounds', '?')}: {len(replied)}/{len(asked)} replied"
    dropped = sorted(set(asked) - set(replied))
    if dropped:
        line += f", dropped node{'s' if len(dropped) > 1 else ''} {', '.join(map(str, dropped))}"
    if rec.get("aborted"):
        line += ", aborted (nothing released)"
    if rec.get("epsilon_upper_bound") is not None:
        line += f", ε spent ≤ {float(rec['epsilon_upper_bound']):.3f}"
    return line


def journal_line(run: RunFiles) -> str | None:
    """ε spent so far by the privacy journal (an upper bound while the run goes)."""
    p = run.privacy or {}
    eps = as_float(p.get("epsilon"))
    if eps is None:
        return None
    if math.isinf(eps):
        return "ε = ∞: a non-private run (no privacy guarantee)"
    budget = as_float((p.get("budget") or {}).get("epsilon"))
    of = "" if budget is None else f" of {budget:g}"
    state = "so far" if p.get("complete") is False else "(final)"
    releases = p.get("n_releases", 0)
    return f"ε spent {state}: {eps:.4f}{of} at δ={p.get('delta', '?')}, {releases} releases"


def end_lines(run: RunFiles) -> list[str]:
    """The run's end: its status and reason, the public-rows AUC, the final ε."""
    status = run.status or {}
    lines = [f"run {status.get('status', 'unknown')}: {status.get('reason', '')}".rstrip(": ")]
    m = run.metrics or {}
    if m.get("evaluated"):
        lines.append(f"test AUC {m.get('auc', float('nan')):.4f} ({m.get('eval_source', '')})")
    elif run.kind == "in-process" and (run.privacy or {}).get("run", {}).get("auc"):
        lines.append(f"test AUC {run.privacy['run']['auc']}")
    if (j := journal_line(run)) is not None:
        lines.append(j)
    return lines


def follow(
    path: str | Path,
    *,
    echo: Callable[[str], Any],
    once: bool = False,
    interval: float = 1.0,
    timeout: float | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Print the run's rounds as they come, then its end; returns the exit code.

    Parameters
    ----------
    path : path
        The run folder (``latest`` is resolved once, at the start).
    echo : callable
        Takes each line.
    once : bool
        Print what is there now and return (0 when the run ended well or is running).
    interval, timeout : float
        Seconds between polls, and before giving up on a run that has not ended (``None``:
        never).
    """
    path = Path(path).resolve()
    shown, start, said = 0, clock(), None  # said: rounds shown when ε was last printed
    while True:
        run = read_run(path)  # FileNotFoundError: not a run folder (the caller's one line)
        if shown == 0 and not run.progress and not run.running:
            echo(f"{path}: no progress.jsonl (an in-process run, or one written before it existed)")
        for rec in run.progress[shown:]:
            echo(round_line(rec))
        shown = len(run.progress)
        # The journal's ε about every tenth of the rounds (as the round lines' bound), and
        # on a one-off look.
        every = max(1, (run.rounds_planned or 10) // 10)
        if run.running and (once or said is None or shown - said >= every) and shown != said:
            line = journal_line(run)
            if line is not None:
                echo(line)
                said = shown
        if not run.running:
            for line in end_lines(run):
                echo(line)
            return DONE.get(run.state, 1)
        if once:
            echo(f"running: {shown} of {run.rounds_planned or '?'} rounds so far")
            return 0
        if timeout is not None and clock() - start > timeout:
            echo(f"still running after {timeout:g} s: {shown} rounds so far")
            return 1
        sleep(interval)
