"""``fedpriv report``: what a run folder shows a person, gathered from released values
and public rows only (the page: :mod:`fedpriv.server.report_html`).

:func:`gather` reads the folder (:func:`fedpriv.server.run_files.read_run`: any
state, a running Flower run included) and derives

* ε spent round by round, re-accounted from the ledger's journal
  (:func:`~fedpriv.server.run_files.epsilon_by_round`);
* each round's asked and replying nodes (``progress.jsonl``, else ``rounds.json``'s
  counts) and each node's rounds asked, replied and dropped;
* the released model's scores on the run's *public* evaluation rows (the run
  config's ``eval-path``, else the bundled corpus's published test split, else the
  test split of a simulation's one CSV: :func:`fedpriv.server.app.evaluation_data`,
  the rows the ServerApp scores), for the ROC curve and the reliability diagram;
* the model per column (:meth:`fedpriv.artefact.Artefact.explain`): a GAM's shape
  functions in raw units with each bin's noise bound, and term importances
  averaged over those public rows (and the shapes' spread, which reads no row);
  a tree model's split usage.

No private row is read: a node's ``data-path`` file is never opened, and when a
run has no public evaluation rows the page says so instead of scoring any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from fedpriv.server.run_files import (
    RunFiles,
    as_float,
    epsilon_by_round,
    journal_events,
    read_run,
)

from fedpriv import logs

log = logs.get_logger(__name__)

#: Bins of the reliability diagram (equal width on the predicted probability).
CALIBRATION_BINS = 10
#: Points kept of the ROC curve (evenly spaced along it, ends included).
ROC_POINTS = 200


@dataclass
class Scored:
    """The released model's scores on public rows and the curves drawn from them."""

    source: str
    n: int
    roc: tuple[np.ndarray, np.ndarray]  # fpr, tpr
    auc: float
    calibration: list[tuple[float, float, int]]  # mean predicted, observed rate, rows


@dataclass
class Report:
    """Everything the page shows (module docstring)."""

    run: RunFiles
    title: str
    epsilon_curve: list[tuple[int, float]] = field(default_factory=list)
    per_round: list[dict[str, Any]] = field(default_factory=list)
    per_node: dict[int, dict[str, int]] = field(default_factory=dict)
    artefact: Any = None
    explanation: Any = None
    importance: dict[str, float] = field(default_factory=dict)
    scored: Scored | None = None
    notes: list[str] = field(default_factory=list)
    #: A GAM's term index -> its schema column (the terms follow the public schema's order).
    term_names: dict[int, str] = field(default_factory=dict)


def participation(run: RunFiles) -> tuple[list[dict[str, Any]], dict[int, dict[str, int]]]:
    """Per round: asked, replies, aborted (and who, from ``progress.jsonl``); per node
    (only where ``progress.jsonl`` names them): rounds asked, replied and dropped."""
    rounds: list[dict[str, Any]] = []
    nodes: dict[int, dict[str, int]] = {}
    if run.progress:
        for rec in run.progress:
            asked, replied = list(rec.get("asked", [])), list(rec.get("replied", []))
            rounds.append(
                {
                    "round": rec["round"],
                    "asked": len(asked),
                    "replies": len(replied),
                    "aborted": bool(rec.get("aborted")),
                    "dropped": sorted(set(asked) - set(replied)),
                }
            )
            for p in asked:
                n = nodes.setdefault(int(p), {"asked": 0, "replied": 0, "dropped": 0})
                n["asked"] += 1
                n["replied" if p in replied else "dropped"] += 1
    elif run.rounds:
        for key in sorted(run.rounds, key=lambda k: int(k) if str(k).isdigit() else 0):
            m = run.rounds[key]
            if str(key).isdigit() and isinstance(m, dict):
                rounds.append(
                    {
                        "round": int(key),
                        "asked": int(m.get("asked", 0)),
                        "replies": int(m.get("replies", 0)),
                        "aborted": bool(m.get("aborted", 0)),
                        "dropped": None,
                    }
                )
    return rounds, nodes


def public_rows(config: dict[str, Any] | None) -> tuple[np.ndarray, np.ndarray, str] | None:
    """The run's public evaluation rows, as the ServerApp scores them, or ``None``."""
    if not config:
        return None
    from fedpriv.server.app import evaluation_data

    from fedpriv.federation.settings import RunSettings

    return evaluation_data(RunSettings.from_run_config(config))


def term_names(config: dict[str, Any] | None) -> dict[int, str]:
    """A dp_gam run's term ``k`` is its public schema's column ``k``: the names the
    release labels (``term k bin``) stand for; ``{}`` for another method or schema."""
    if not config or config.get("method") != "dp_gam":
        return {}
    from fedpriv.data.node import run_schema

    try:
        schema = run_schema(str(config.get("schema") or ""), str(config.get("dataset") or ""))
    except Exception:  # a moved schema file: the labels stay as released
        return {}
    return dict(enumerate(schema.column_names))


def score(model: Any, X: np.ndarray, y: np.ndarray, source: str) -> Scored | None:
    """ROC curve, AUC and reliability diagram of ``model`` on public rows (binary only)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    p = np.asarray(model.predict_proba(X), dtype=np.float64)
    if p.ndim != 1 or np.unique(y).size != 2:
        return None
    fpr, tpr, _ = roc_curve(y, p)
    if fpr.size > ROC_POINTS:
        keep = np.unique(np.linspace(0, fpr.size - 1, ROC_POINTS).round().astype(int))
        fpr, tpr = fpr[keep], tpr[keep]
    which = np.minimum((p * CALIBRATION_BINS).astype(int), CALIBRATION_BINS - 1)
    calibration = [
        (float(p[which == b].mean()), float(y[which == b].mean()), int((which == b).sum()))
        for b in range(CALIBRATION_BINS)
        if (which == b).any()
    ]
    return Scored(
        source=source,
        n=int(y.size),
        roc=(fpr, tpr),
        auc=float(roc_auc_score(y, p)),
        calibration=calibration,
    )


def _title(run: RunFiles) -> str:
    c = run.config or {}
    what = c.get("dataset") or Path(str(c.get("csv") or c.get("schema") or "")).name or "?"
    return f"{c.get('method', 'run')} on {what}: {run.path.resolve().name}"


def gather(path: str | Path) -> Report:
    """Read the run folder ``path`` and derive what the page shows (module docstring)."""
    run = read_run(path)
    report = Report(run=run, title=_title(run))
    report.notes.extend(run.problems)
    privacy = run.privacy or {}
    delta = as_float(privacy.get("delta"))
    events = journal_events(privacy)
    if events and delta:
        report.epsilon_curve = epsilon_by_round(events, delta)
    report.per_round, report.per_node = participation(run)
    report.term_names = term_names(run.config)
    rows = None
    try:
        rows = public_rows(run.config)
    except Exception as exc:  # a moved eval file, a changed schema: say so, show the rest
        report.notes.append(f"public evaluation rows not read: {exc}")
    if rows is None and not any("evaluation rows" in n for n in report.notes):
        report.notes.append(
            "no public evaluation rows (no eval-path, bundled test split or simulation CSV): "
            "no ROC curve, reliability diagram or importance over rows"
        )
    if run.model_path is None:
        report.notes.append("no model file yet" if run.running else "no model file")
        return report
    from fedpriv.artefact import ArtefactError, load_model

    try:
        report.artefact = art = load_model(run.model_path)
    except ArtefactError as exc:
        report.notes.append(f"model file refused: {exc}")
        return report
    if rows is not None:
        X, y, source = rows
        report.scored = score(art.model, X, y, source)
        if report.scored is None:
            report.notes.append("more than two classes: no ROC curve or reliability diagram")
    if hasattr(art.model, "explain"):
        report.explanation = art.explain()
        if rows is not None and hasattr(report.explanation, "terms"):
            from fedpriv.models.explain import term_importance

            imp = term_importance(art.model, rows[0])
            report.importance = {
                t.name: float(v) for t, v in zip(report.explanation.terms, imp, strict=True)
            }
    return report


def write_report(path: str | Path, out: str | Path | None = None) -> Path:
    """Gather ``path`` and write the page (default ``<path>/report.html``); returns it."""
    from fedpriv.server.report_html import render

    from fedpriv.atomic import write_text_atomic

    report = gather(path)
    out = Path(out) if out is not None else Path(path) / "report.html"
    write_text_atomic(out, render(report))
    log.info("report of %s (%s) written to %s", report.run.path, report.run.state, out)
    return out
