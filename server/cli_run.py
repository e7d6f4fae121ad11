"""``fedpriv run`` in process: an estimator's fit with a round progress bar, its results.

:func:`run_in_process` resolves the run keys as the launchers do (a Flower-only
key is refused naming the keys that apply), fits the method's estimator on a
bundled corpus, a CSV with its public schema, or a whole train file scored on a
test file (:func:`choose_data`), prints the test AUC, ε spent, the run's status and
the Brier score (:func:`fedpriv.server.cli_split.held_out_scores`), and with ``--out``
writes the model file and the privacy report (:func:`_write_results`).

``--out`` is checked before any row is read (:func:`check_out_dir`): a file, a
folder under a file or one that cannot be written is refused, and so is a
folder holding an earlier run's files unless ``--force`` (its privacy record
would be lost). The files are written together or not at all
(:func:`fedpriv.atomic.staged`): a full disk leaves no partial or temporary
file and an earlier run's files as they were. Errors are not caught here:
:mod:`fedpriv.server.cli_errors` turns each into one line and an exit code.

On a terminal a progress bar follows the rounds (:class:`fedpriv.server.progress.RoundProgress`,
as the Flower launchers' bar does): about every tenth round, and at the end, it
shows an upper bound on ε spent so far. Without one (CI, a pipe) the same rounds
print a plain line each, ``[fedpriv] round r/T, ε spent ≤ x``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import click

from fedpriv import logs

log = logs.get_logger(__name__)

#: Run keys an in-process fit uses besides the estimator's own parameters (``max-records``:
#: the declared public bound on records per client, the estimator's ``max_records``).
_IN_PROCESS_KEYS = {"method", "dataset", "num-clients", "split-seed", "out-dir", "max-records"}


#: The files :func:`_write_results` writes: an earlier run's are not replaced without --force.
RESULT_FILES = ("model.fedpriv.npz", "privacy.json")


def _existing_ancestor(path: Path) -> Path:
    """The nearest of ``path`` and its parents that exists."""
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(path.anchor or ".")


def _writable(key: str, path: Path, folder: Path) -> None:
    from fedpriv.federation.limits import SettingError

    if not os.access(folder, os.W_OK | os.X_OK):
        raise SettingError(
            f"{key} {path}: the folder {folder} is not writable; give a folder you can write to"
        )


def check_out_file(path: Path, *, key: str = "--out") -> None:
    """Refuse an output file whose folder does not exist or cannot be written, or that
    is a folder (before any work is done)."""
    from fedpriv.federation.limits import SettingError

    if path.is_dir():
        raise SettingError(f"{key} {path} is a directory; give a file name")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise SettingError(f"{key} {path}: the folder {folder} {what}; create it first")
    _writable(key, path, folder)


def check_out_dir(out: Path, *, force: bool, files: tuple[str, ...] = RESULT_FILES) -> None:
    """Refuse ``--out`` before any row is read: a file, a folder under a file, a folder
    that cannot be written, or one holding an earlier run's ``files`` (without ``force``)."""
    from fedpriv.federation.limits import SettingError

    found = _existing_ancestor(out)
    if not found.is_dir():
        where = "is a file" if found == out else f"is under {found}, a file"
        raise SettingError(f"--out {out} {where}; give a directory (new, or of no earlier run)")
    _writable("--out", out, found)
    earlier = [name for name in files if (out / name).exists()]
    if earlier and not force:
        raise SettingError(
            f"--out {out} holds an earlier run's {', '.join(earlier)}; not overwritten (its "
            "privacy record would be lost): give a new directory, or --force to replace them"
        )


def _write_results(
    out: Path, estimator: Any, summary: dict[str, Any], *, report: Any = None
) -> list[Path]:
    """Write a fit's results under ``out``: the portable model file (released
    parameters, public schema, privacy card: ``fedpriv predict`` / ``inspect`` read
    it) and the privacy report with the run's summary; returns the files written.

    ``estimator`` ``None``: a failed fit, its privacy ``report`` (what it spent) only.
    Both files are written, or neither (:func:`fedpriv.atomic.staged`); an
    ``OSError`` (a full disk, no permission) carries a note naming ``--out``.
    """
    from fedpriv.atomic import staged, write_json_atomic

    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with staged(out) as stage:
            names = []
            if estimator is not None:
                report = estimator.privacy_report_
                names.append(Path(estimator.save(stage / RESULT_FILES[0])).name)
            privacy = {"epsilon": "inf", "non_private": True}
            if report is not None:
                privacy = report.to_dict()
            write_json_atomic(stage / RESULT_FILES[1], {**privacy, "run": summary})
            names.append(RESULT_FILES[1])
        for name in set(RESULT_FILES) - set(names):  # (--force) no earlier model beside them
            (out / name).unlink(missing_ok=True)
    except OSError as exc:
        for p in made:  # the folders made here, if still empty
            try:
                p.rmdir()
            except OSError:
                break
        exc.filename = exc.filename2 = None  # a temporary path; the note names --out
        exc.add_note(
            f"--out {out}: needs a writable folder with room for the results; nothing was "
            "written, an earlier run's files are unchanged"
        )
        raise
    return [out / name for name in names]


def _fmt(x: Any) -> str:
    return "inf" if x is None or (isinstance(x, float) and math.isinf(x)) else f"{x:.4g}"


def _resolve(method: str, overrides: dict[str, Any]):
    """Strictly checked settings (the launchers' parser) for an in-process fit."""
    from fedpriv.server.method_estimator import RUN_PARAMS

    from fedpriv.federation.settings import RunSettings, SettingError

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
    :meth:`fedpriv.server.grid_runtime.GridRuntime.log_round`) the line carries
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


def choose_data(
    *,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    client_column: str | None,
    overrides: dict[str, Any],
    split_seed: int,
    train: Path | None = None,
    test: Path | None = None,
    whole: bool = False,
) -> tuple[Any, str, int]:
    """The fit's data, its name for the log and its client count K.

    ``train``: that file trained on whole, ``test`` scored (both checked against the
    schema first, :func:`fedpriv.data.load_train_test`); ``csv``: its training split,
    or with ``whole`` every row in training (``fedpriv cv`` cuts the folds); else a
    bundled corpus (``whole``: every row in training).
    """
    import numpy as np

    from fedpriv.data import client_counts, load_csv, load_csv_whole, load_for_run, load_train_test
    from fedpriv.data.corpora import check_client_count
    from fedpriv.data.split import Split
    from fedpriv.federation.settings import RunSettings, SettingError, check_run_values

    k = overrides.get("num-clients")
    if train is not None or csv is not None:
        if schema is None:
            flag = "--train" if train is not None else "--csv"
            raise click.UsageError(f"{flag} needs --schema FILE (fedpriv schema draft writes one)")
        if k is not None:
            check_run_values({"num_clients": k})
        opts = {"client_column": client_column, "split_seed": split_seed}
        if train is not None:
            data, source = load_train_test(train, test, schema, **opts), f"{train} (test {test})"
        else:
            data = (load_csv_whole if whole else load_csv)(csv, schema, **opts)
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
        if whole:
            none = np.zeros(0, dtype=np.int64)
            every = np.arange(data.y.size)
            split = Split(train=every, val=none, test=none, seed=split_seed, rule="every row")
            data = dataclasses.replace(data, split=split)
        source = name
    if k is None:
        k = len(data.client_names) or RunSettings.num_clients
    return data, source, int(k)


def build_estimator(settings: Any, k: int) -> Any:
    """``settings.method``'s estimator with the run's keys and ``k`` clients."""
    from fedpriv.methods import get_method

    resolved = settings.to_run_config()
    est = get_method(settings.method).estimator_class()
    # "" in a run config means "the default": the estimator's own then.
    params = {
        p: resolved[p.replace("_", "-")]
        for p in est.get_params()
        if resolved.get(p.replace("_", "-"), "") != ""
    }
    return est.set_params(**{**params, "num_clients": int(k)})


def run_in_process(
    *,
    method: str,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    client_column: str | None,
    overrides: dict[str, Any],
    out: Path | None,
    force: bool = False,
    train: Path | None = None,
    test: Path | None = None,
) -> int:
    """Fit ``method``'s estimator in process; print AUC, ε and the status; returns the exit code.

    ``train`` and ``test``: fit on the whole train file, score the test file
    (:func:`choose_data`). Raises what the settings, the data or the fit raise
    (:mod:`fedpriv.server.cli_errors` maps each to one line); a failed fit's privacy report is
    written to ``out`` first."""
    from fedpriv.server.cli_split import brier_text, fmt_score, held_out_scores
    from fedpriv.server.progress import RoundProgress

    from fedpriv.federation.status import RunFailedError
    from fedpriv.methods import get_method
    from fedpriv.privacy.card import spent_text

    settings = _resolve(method, overrides)
    if out is not None:
        check_out_dir(out, force=force)
    data, source, k = choose_data(
        dataset=dataset, csv=csv, schema=schema, client_column=client_column,
        overrides=overrides, split_seed=settings.split_seed, train=train, test=test,
    )  # fmt: skip
    resolved = settings.to_run_config()
    m = get_method(settings.method)
    est = build_estimator(settings, k)
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
    # What loading did to the rows (values clipped to the schema's bounds, values outside
    # a domain): already logged at the load; repeated with the result and kept in its files.
    warnings = data.report.warnings()
    summary = {"source": source, "config": resolved, "warnings": warnings}
    try:
        with bar:
            est.fit(data)
            report = est.privacy_report_
            rounds.finish(None if report is None else float(report.epsilon))
    except RunFailedError as exc:
        if out is not None:  # what the failed fit spent stays recorded
            failed = {**summary, "status": str(exc.outcome.status), "reason": exc.outcome.reason}
            _write_results(out, None, failed, report=exc.privacy_report)
        raise
    scores = held_out_scores(est, *data.xy("test"))  # the owner's held-out rows
    auc = fmt_score(scores["auc"])
    spent = spent_text({} if report is None else report.to_dict())  # certified first
    line = f"AUC {auc} | {spent} | {est.run_outcome_.line()} | {brier_text(scores)}"
    if warnings:
        line += f" | {len(warnings)} load warning(s) above" + (", in privacy.json" if out else "")
    if out is not None:
        summary = {
            "auc": auc, "brier": scores["brier"], "brier_base": scores["brier_base"],
            **summary, "status": str(est.run_status_),
        }  # fmt: skip
        written = _write_results(out, est, summary)
        line += f" | {', '.join(str(p) for p in written)}"
    click.echo(line)
    return 0
