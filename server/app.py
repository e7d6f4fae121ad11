"""The Flower ServerApp: ``flwr run`` drives a fedpriv strategy over a Grid.

Reads the run config (``[tool.flwr.app.config]`` of the generated App,
:mod:`fedpriv.server.flower_project`) and uses public facts only:
the schema (feature width, label set), the declared bound on records per
client (``max-records``; :func:`fedpriv.data.node.record_bound`) and, for
metrics, a public evaluation file (``eval-path``, or a bundled corpus's
published test split; simulating hospitals from one CSV, run-config ``csv``, that
file's test split, as the in-process fit scores it). It never opens a node's rows
(a node's ``data-path`` file). It then
runs the strategy as a Flower strategy (:class:`fedpriv.server.flower_strategy.FlowerStrategy`,
``strategy.start(grid=...)``), and writes
the resolved config, the privacy report, the metrics, the communication
figures and the released model under ``<out-dir>/<run id>/``.

The folder is made before round 1. ``privacy.json`` is the ledger's journal,
rewritten atomically at every release (``"complete": false`` until the run
ends), and ``status.json`` (:mod:`fedpriv.federation.status`) says how the
run ended: completed, degraded (some rounds released nothing) or failed (too
many did, or the run raised; then it is written before the error propagates).
The launchers read it: ``flwr`` reports a run that released nothing as
finished.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fedpriv.server.dp_evaluation import not_run, run_dp_evaluation, scoped_ledgers
from fedpriv.server.flower_strategy import FlowerStrategy
from fedpriv.server.grid_runtime import GridRuntime, PollingGrid
from fedpriv.server.run_progress import PROGRESS_FILE
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from fedpriv import logs
from fedpriv.artefact import write_artefact
from fedpriv.atomic import write_json_atomic
from fedpriv.data.node import (
    DataSource,
    csv_test_split,
    public_test_split,
    read_file,
    record_bound,
    run_schema,
)
from fedpriv.evaluation import binary_metrics, multiclass_metrics
from fedpriv.federation.protocol import Strategy
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.federation.status import (
    RunFailedError,
    RunStatus,
    outcome_of,
    strategy_notes,
    with_notes,
    write_status,
)
from fedpriv.methods import StrategyContext
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.card import spent_text

app = ServerApp()
log = logs.get_logger(__name__)


def build_strategy(s: RunSettings, schema, *, n_records: int, n_features: int) -> Strategy:
    """The run's method, from the registry, on the public schema."""
    context = StrategyContext(
        schema=schema,
        n_features=n_features,
        n_records=n_records,
        n_classes=len(schema.target.classes),
        participation=s.participation,
    )
    return s.method_record.build_strategy(s.config, context)


#: Why a run that writes its round times is not covered by its guarantee.
TIMING_CAVEAT = (
    "timings: per-round wall times were written; they track the clients' work on their "
    "rows, a release no mechanism accounts for"
)


def communication_report(report, *, timings: bool, planned: int | None = None) -> dict:
    """communication.json: what crossed the network, from public and released values.

    Floats and bytes follow from the queries' reply lengths (public, or functions of
    released outputs) and from who was asked (participation coins: independent of the
    data). Round wall times include the clients' work on their rows, so they are
    written only when ``timings`` is set (the run is then marked uncertified); the
    empty ping rounds touch no data and are always written.
    """
    comm = report.communication.to_dict()
    comm["client_errors"] = report.client_errors
    # How much of the planned training was released (the run's status: status.json).
    comm["rounds_planned"] = planned
    empty = report.empty_round_seconds
    comm["mean_empty_round_seconds"] = float(np.mean(empty)) if empty else None
    comm["empty_round_seconds"] = [round(x, 4) for x in empty]
    if timings:
        rounds = report.round_seconds
        comm["mean_round_seconds"] = float(np.mean(rounds)) if rounds else 0.0
        comm["median_round_seconds"] = float(np.median(rounds)) if rounds else 0.0
        comm["round_seconds"] = [round(x, 4) for x in rounds]
    return comm


@app.main()
def main(grid: Grid, context: Context) -> None:
    logs.configure(tag="fedpriv", stream="stdout")  # the lines the launchers follow
    t0 = time.perf_counter()
    s = RunSettings.from_run_config(context.run_config)
    grid = PollingGrid(grid, interval=s.poll_interval)
    if not s.out_dir or not Path(s.out_dir).is_absolute():
        raise ValueError(f"run config out-dir must be an absolute path; got {s.out_dir!r}")
    # The results folder exists before round 1: the privacy journal and the status
    # are written there as the run goes, so a crash still leaves them.
    out = Path(s.out_dir) / str(context.run_id)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "config.json", s.to_run_config())
    ledger = None
    if s.private:
        ledger = PrivacyLedger(
            budget=PrivacyBudget(epsilon=s.epsilon, delta=s.delta), journal=out / "privacy.json"
        )
        if s.timings:
            ledger.mark_uncertified(TIMING_CAVEAT)
        # Whom the run protects: a record, or the schema's unit (fedpriv.privacy.units).
        ledger.declare_unit(run_schema(s.schema, s.dataset).privacy_unit)
    else:
        write_json_atomic(out / "privacy.json", {"epsilon": "inf", "complete": False})
    progress = Progress()
    try:
        metrics, comm_out = train(grid, s, out, ledger, progress)
    except BaseException as exc:
        # Failed whatever the counts; the journal keeps the releases made ("complete": false).
        s = progress.settings or s
        comm = progress.runtime.report.communication if progress.runtime else None
        # The resolved rounds; a run that failed before its public n resolved DP-SGD's
        # automatic rounds planned none yet (the config's 0).
        planned = (progress.settings or s).config.rounds
        outcome = outcome_of(
            comm, rounds_planned=planned, max_aborted_share=s.max_aborted_share, error=exc
        )
        write_status(out, outcome)
        log.error("%s", outcome.line())
        raise
    s = progress.settings  # resolved (DP-SGD's automatic schedule)
    outcome = progress.outcome  # training's rounds (the evaluation's is reported apart)
    s = progress.settings  # as run: automatic settings resolved
    report = {"epsilon": "inf", "complete": True}
    if ledger is not None:
        report = ledger.close()
    else:
        write_json_atomic(out / "privacy.json", report)
    write_status(out, outcome)
    # The portable model: released parameters, public schema and the privacy card.
    artefact = write_artefact(
        out,
        model=progress.model,
        method=s.method,
        schema=progress.schema,
        settings_dict=s.to_run_config(),
        ledger_report=report,
        run_status=outcome.status,
        record_bound=progress.max_records,
    )
    log.info(
        "done: %s, schema %s, K=%d, T=%d", s.method, s.schema or s.dataset, s.num_clients, s.rounds
    )
    if metrics["evaluated"]:
        log.info(
            "test AUC %.4f  AUPRC %.4f  Brier %.4f (%s)",
            metrics["auc"],
            metrics["auprc"],
            metrics["brier"],
            metrics["eval_source"],
        )
    else:
        log.info("not evaluated: %s", metrics["reason"])
    dp = metrics["dp_federated"]
    if dp["evaluated"]:
        log.info(
            "DP federated evaluation (ε %g): AUC %.4f ± %.4f, Brier %.4f ± %.4f, "
            "accuracy %.4f ± %.4f",
            dp["epsilon"], dp["auc"], dp["auc_error"], dp["brier"], dp["brier_error"],
            dp["accuracy"], dp["accuracy_error"],
        )  # fmt: skip
    log.info("%s at δ=%s", spent_text(report), f"{s.delta:g}")  # the certified figure first
    log.info(
        "floats uploaded per client %.0f, round trips %s%s",
        comm_out["mean_floats_uploaded_per_client"],
        comm_out["round_trips"],
        f", {time.perf_counter() - t0:.1f} s" if s.timings else "",
    )
    log.info("results in %s (model file %s)", out, artefact.name)
    if outcome.status is RunStatus.COMPLETED:
        log.info("%s", outcome.line())
    else:
        log.warning("%s", outcome.line())
    if outcome.failed:
        # Every file is written; failing the run also marks it failed in ``flwr ls``.
        raise RunFailedError(outcome)


@dataclass
class Progress:
    """How far a run got, for its status if it raises: the runtime once connected
    (its tally counts the rounds run, released and aborted)."""

    runtime: GridRuntime | None = None
    #: The released model, the public schema and the declared record bound, once trained.
    model: Any = None
    schema: Any = None
    max_records: int | None = None
    #: How training ended (its rounds only), once it has.
    outcome: Any = None
    #: The settings with the method's automatic schedule resolved, once they are.
    settings: RunSettings | None = None


def train(
    grid: Grid, s: RunSettings, out: Path, ledger: PrivacyLedger | None, progress: Progress
) -> tuple[dict, dict]:
    """Run the strategy on public facts only, write metrics, traffic and model to
    ``out``; returns the metrics and the communication report. ``progress`` follows
    the run, so that a failure still reports its counts.
    """
    source = DataSource.of(s)
    schema = run_schema(s.schema, s.dataset)
    try:
        max_records = record_bound(source)  # declared (public), never counted
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    n_features = schema.n_features  # the encoded schema's width: every node's X has it
    # n: the public bound on the total, K × max-records (DP-SGD's normaliser, the range
    # checks, Lumberjack's caps); the nodes' true counts never leave them.
    n_records = s.num_clients * max_records
    # The method's automatic settings (DP-SGD's schedule, Lumberjack's trees and depth)
    # resolved once, from this public n and training's budget (the launchers have
    # already written them into the run config; `flwr run` on the defaults has not):
    # the rounds Flower runs, the status, the nodes' plans and config.json all read ``s``.
    s = progress.settings = s.for_records(n_records)
    write_json_atomic(out / "config.json", s.to_run_config())
    train_ledger, eval_ledger = scoped_ledgers(ledger, s)
    core = build_strategy(s, schema, n_records=n_records, n_features=n_features)
    strategy = FlowerStrategy(
        core, settings=s, n_features=n_features, max_records=max_records, ledger=train_ledger,
        progress_file=out / PROGRESS_FILE,
    )  # fmt: skip
    runtime = progress.runtime = strategy.connect(grid)
    runtime.ping(s.ping_rounds)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(),
        num_rounds=s.rounds,
        timeout=s.round_timeout,
    )
    model = progress.model = strategy.core.model()
    progress.schema, progress.max_records = schema, max_records
    outcome = outcome_of(
        runtime.report.communication,
        rounds_planned=s.rounds,
        max_aborted_share=s.max_aborted_share,
    )
    progress.outcome = with_notes(outcome, strategy_notes(strategy.core))
    metrics = evaluate(model, s)
    if eval_ledger is None:
        metrics["dp_federated"] = not_run("eval-epsilon is 0 (no share of ε for it)")
    else:
        metrics["dp_federated"] = run_dp_evaluation(
            runtime, model, s, eval_ledger, n_features=n_features, n_records=n_records,
            secret_key=strategy.secret_key,
        )  # fmt: skip
    comm = communication_report(runtime.report, timings=s.timings, planned=s.rounds)
    comm["dp_evaluation_rounds"] = 0 if eval_ledger is None else 1
    comm["nodes_remaining_budget"] = {
        str(p): {"epsilon": _finite(e), "delta": _finite(d)}
        for p, (e, d) in sorted(runtime.transport.remaining.items())
    }
    for p, (e, d) in sorted(runtime.transport.remaining.items()):
        if math.isfinite(e) or math.isfinite(d):  # the node has a lifetime policy
            log.info("node %d: remaining lifetime budget ε %.4g, δ %.3g (its own ledger)", p, e, d)
    write_json_atomic(out / "metrics.json", metrics)
    write_json_atomic(out / "communication.json", comm)
    per_round = {str(r): dict(m) for r, m in result.train_metrics_clientapp.items()}
    write_json_atomic(out / "rounds.json", per_round)
    return metrics, comm


def _finite(x: float) -> float | str:
    # JSON has no infinity: a node without a lifetime limit reports "inf".
    return x if math.isfinite(x) else "inf"


def evaluation_data(s: RunSettings) -> tuple[np.ndarray, np.ndarray, str] | None:
    """The rows the server may score on: ``eval-path``, else a bundled corpus's
    published test split, else the test split of the one CSV a simulation cuts its
    hospitals from (``csv``: the curator's file, scored as in process), else ``None``
    (no evaluation data: the nodes' own files stay theirs)."""
    if s.eval_path:
        X, y = read_file(s.eval_path, run_schema(s.schema, s.dataset))
        return X, y, s.eval_path
    source = DataSource.of(s)
    if source.bundled:
        X, y = public_test_split(source)
        return X, y, f"{s.dataset} public test split (split-seed {s.split_seed})"
    if source.csv:
        X, y = csv_test_split(source)
        return X, y, f"{s.csv} test split (split-seed {s.split_seed}), as in process"
    return None


def evaluate(model, s: RunSettings) -> dict:
    """metrics.json: the released model scored on public data, or why it was not.

    Only public rows are scored here (:func:`evaluation_data`). The nodes' own
    held-out rows are scored only by the DP federated evaluation
    (:mod:`fedpriv.server.dp_evaluation`, ``eval-epsilon``), whose section
    ``dp_federated`` the caller adds.
    """
    data = evaluation_data(s)
    if data is None:
        return {
            "evaluated": False,
            "reason": "no public evaluation data (set eval-path, or eval-epsilon for a DP "
            "federated evaluation on the nodes' held-out rows)",
        }
    X, y, where = data
    scores = model.class_scores(X) if hasattr(model, "class_scores") else model.predict_proba(X)
    if scores.ndim == 2 and scores.shape[1] > 2:  # macro AUC, Brier over the classes
        return {"evaluated": True, "eval_source": where, **multiclass_metrics(y, scores)}
    return {"evaluated": True, "eval_source": where, **binary_metrics(y, model.predict_proba(X))}
