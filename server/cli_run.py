"""``fedpriv run`` in process: an estimator's fit with a round progress bar, its results.

:func:`run_in_process` resolves the run keys as the launchers do (a Flower-only
key is refused naming the keys that apply), fits the method's estimator on a
bundled corpus or a CSV with its public schema, prints the test AUC, ε spent and
the run's status, and with ``--out`` writes the model file and the privacy
report (:func:`_write_results`).

On a terminal a progress bar follows the rounds (:class:`server.progress.RoundProgress`,
as the Flower launchers' bar does): about every tenth round, and at the end, it
shows an upper bound on ε spent so far. Without one (CI, a pipe) the same rounds
print a plain line each, ``[fedpriv] round r/T, ε spent ≤ x``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from fedpriv import logs

log = logs.get_logger(__name__)

#: Run keys an in-process fit uses besides the estimator's own parameters (``max-records``:
#: the declared public bound on records per client, the estimator's ``max_records``).
_IN_PROCESS_KEYS = {"method", "dataset", "num-clients", "split-seed", "out-dir", "max-records"}


def _write_results(out: Path, estimator: Any, summary: dict[str, Any]) -> list[Path]:
    """Write a fit's results under ``out``: the portable model file (released
    parameters, public schema, privacy card: ``fedpriv predict`` / ``inspect`` read
    it) and the privacy report with the run's summary; returns the files written."""
    from fedpriv.atomic import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    model = estimator.save(out / "model.fedpriv.npz")
    report = estimator.privacy_report_
    privacy = {"epsilon": "inf", "non_private": True} if report is None else report.to_dict()
    write_json_atomic(out / "privacy.json", {**privacy, "run": summary})
    return [Path(model), out / "privacy.json"]


def _fmt(x: Any) -> str:
    return "inf" if x is None or (isinstance(x, float) and math.isinf(x)) else f"{x:.4g}"


def _resolve(method: str, overrides: dict[str, Any]):
    """Strictly checked settings (the launchers' parser) for an in-process fit."""
    from fedpriv.federation.settings import RunSettings, SettingError
    from server.method_estimator import RUN_PARAMS

    allowed = _IN_PROCESS_KEYS | {k.replace("_", "-") for k in RUN_PARAMS}
    flower_only = {k.replace("_", "-") for k in RunSettings.run_keys()} - allowed
    for key in overrides:
        if key.replace("_", "-") in flower_only:
            raise SettingError(
                f"run-config key {key!r} applies to Flower runs only (add --flower); "
                f"in process the run's keys are {sorted(allowed)}"
            )
    checked = {k: v for k, v in overrides.items() if k not in ("dataset", "num-clients")}
    return RunSettings.from_run_config({**checked, "method": method})


def _bound(eps: float) -> str:
    """An upper bound on ε as shown: rounded up to three decimals."""
    return "inf" if math.isinf(eps) else f"{math.ceil(eps * 1e3) / 1e3:.3f}"


class _Rounds:
    """The bar's view of an in-process fit: rounds done and an upper bound on ε spent.

    The first query of round ``r`` (a public index, from 0) means ``r`` rounds
    are done. About every tenth round (as the ServerApp's round lines,
    :meth:`server.grid_runtime.GridRuntime.log_round`) the line carries
    ``PrivacyLedger.epsilon_upper_bound()`` of the fit's ledger: one coarse
    PLD each (shown by the bar, or as a plain line without a terminal).
    :meth:`finish` shows the fit's accounted ε.
    """

    def __init__(self, progress: Any, total: int) -> None:
        self._progress, self._total, self._every = progress, total, max(1, total // 10)
        self.seen, self.ledger = -1, None

    def watch(self, ledger: Any) -> Any:
        """Keep the fit's ledger (``None``: a non-private fit); returns it."""
        self.ledger = ledger
        return ledger

    def _line(self, done: int, eps: float | None) -> None:
        extra = "" if eps is None else f", ε spent ≤ {_bound(eps)}"
        self._progress.on_line(f"[fedpriv] round {done}/{self._total}{extra}\n")

    def on_query(self, r: int) -> None:
        if r <= self.seen:
            return
        self.seen = r
        eps = None
        if self.ledger is not None and r > 0 and r % self._every == 0:
            eps = float(self.ledger.epsilon_upper_bound())
        self._line(r, eps)

    def finish(self, epsilon: float | None) -> None:
        """The fit's end: every round seen done, ``epsilon`` its accounted ε (if private)."""
        self._line(self.seen + 1, epsilon)


class _Ticker:
    """Proxy of a client handler: each query's (public) round index moves the bar."""

    def __init__(self, inner: Any, rounds: _Rounds) -> None:
        self._inner, self._rounds = inner, rounds

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("answer", "answer_many"):
            return attr

        def call(query: Any, *args: Any, **kwargs: Any) -> Any:
            self._rounds.on_query(int(getattr(query, "round", self._rounds.seen)))
            return attr(query, *args, **kwargs)

        return call


def run_in_process(
    *,
    method: str,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    client_column: str | None,
    overrides: dict[str, Any],
    out: Path | None,
) -> int:
    """Fit ``method``'s estimator in process; print AUC, ε and the status; returns the exit code."""
    from sklearn.metrics import roc_auc_score

    from fedpriv.data import client_counts, load_csv, load_for_run
    from fedpriv.data.corpora import check_client_count
    from fedpriv.federation.settings import RunSettings, SettingError, check_run_values
    from fedpriv.federation.status import RunFailedError
    from fedpriv.methods import get_method
    from server.progress import RoundProgress

    settings = _resolve(method, overrides)
    split_seed = settings.split_seed
    k = overrides.get("num-clients")
    if csv is not None:
        if schema is None:
            raise click.UsageError("--csv needs --schema FILE (fedpriv schema draft writes one)")
        if k is not None:
            check_run_values({"num_clients": k})
        data = load_csv(csv, schema, client_column=client_column, split_seed=split_seed)
        source = str(csv)
    else:
        name = dataset or overrides.get("dataset") or RunSettings.dataset
        lo, hi = client_counts(name)
        if k is None:  # the launchers' default, moved into the corpus's own range
            k = min(max(RunSettings.num_clients, lo), hi or RunSettings.num_clients)
        check_run_values({"num_clients": k})
        try:
            check_client_count(name, k)
        except ValueError as exc:
            raise SettingError(str(exc)) from None
        data = load_for_run(name, num_clients=k, split_seed=split_seed)
        source = name
    if k is None:
        k = len(data.client_names) or RunSettings.num_clients
    resolved = settings.to_run_config()
    m = get_method(settings.method)
    est = m.estimator_class()
    # "" in a run config means "the default": the estimator's own then.
    params = {
        p: resolved[p.replace("_", "-")]
        for p in est.get_params()
        if resolved.get(p.replace("_", "-"), "") != ""
    }
    est.set_params(**{**params, "num_clients": int(k)})
    bar = RoundProgress(thin=True)  # no terminal: a plain line about every tenth round
    rounds = _Rounds(bar, settings.rounds)
    # The clients' queries tick the bar; the fit's own ledger (Estimator._fit_ledger,
    # fresh per fit) gives its ε bound: the report's scope and figures are unchanged.
    inner_handler, fit_ledger = est._handler, est._fit_ledger
    est._handler = lambda: _Ticker(inner_handler(), rounds)
    est._fit_ledger = lambda: rounds.watch(fit_ledger())
    log.info(
        "%s in process on %s: %d rounds, ε=%s, δ=%g",
        m.name, source, settings.rounds, _fmt(settings.epsilon), settings.delta,
    )  # fmt: skip
    try:
        with bar:
            est.fit(data)
            report = est.privacy_report_
            rounds.finish(None if report is None else float(report.epsilon))
    except RunFailedError as exc:
        log.error("run failed: %s", exc)
        return 1
    X, y = data.xy("test")
    try:
        proba = est.predict_proba(X)
        score = proba[:, 1] if proba.shape[1] == 2 else proba  # macro one-vs-rest beyond two
        auc = f"{roc_auc_score(y, score, multi_class='ovr'):.4f}"
    except ValueError:  # a test split of one class
        auc = "n/a"
    eps = (None, None) if report is None else (report.to_dict()["epsilon_pld"],
                                                report.to_dict()["epsilon_rdp"])  # fmt: skip
    line = (
        f"AUC {auc} | ε spent {eps[0] if eps[0] is not None else 'inf'} (PLD), "
        f"{eps[1] if eps[1] is not None else 'inf'} (RDP) | {est.run_outcome_.line()}"
    )
    if out is not None:
        summary = {"auc": auc, "source": source, "config": resolved, "status": str(est.run_status_)}
        written = _write_results(out, est, summary)
        line += f" | {', '.join(str(p) for p in written)}"
    click.echo(line)
    return 0
