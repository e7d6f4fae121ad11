"""``fedpriv run`` in process: an estimator's fit with a round progress bar, its results.

:func:`run_in_process` resolves the run with the launchers' resolver
(:func:`resolve_in_process`, :func:`fedpriv.server.resolve.resolve`: the same
defaults, preset, K and record bound as ``fedpriv run --flower``; a Flower-only key
is refused naming the keys that apply), builds the method's estimator from those
settings, fits it on a bundled corpus, a CSV with its public schema, or a whole
train file scored on a test file (:func:`choose_data`), prints the test AUC, ε
spent, the run's status and the Brier score
(:func:`fedpriv.server.cli_split.held_out_scores`), and with ``--out`` writes the
model file and the privacy report (:func:`_write_results`), whose ``run`` names the
run that happened: its source, preset and complete run config.

``--out`` is checked before any row is read (:func:`check_out_dir`): a file, a
folder under a file or one that cannot be written is refused, and so is a
folder holding an earlier run's files unless ``--force`` (its privacy record
would be lost). The files are written together or not at all
(:func:`fedpriv.atomic.staged`): a full disk leaves no partial or temporary
file and an earlier run's files as they were. Errors are not caught here:
:mod:`fedpriv.server.cli_errors` turns each into one line and an exit code.

On a terminal a progress bar follows the rounds (:class:`fedpriv.server.progress.RoundProgress`,
as the Flower launchers' bar does), fed by the estimator's public progress callback
(``fit(on_round=...)``): about every tenth round, and at the end, it shows an upper
bound on ε spent so far. Without one (CI, a pipe) the same rounds
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


def check_in_process_keys(overrides: dict[str, Any]) -> None:
    """Refuse a Flower-only run key among the user's ``overrides``, naming the keys that
    apply in process."""
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


def _file_setting(path: Path) -> str:
    """A file the run names, absolute when it exists (as every result file records it)."""
    return str(path.resolve()) if path.is_file() else str(path)


def resolve_in_process(
    *,
    method: str | None,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    overrides: dict[str, Any],
    preset: str | None = None,
    out: Path | None = None,
    train: Path | None = None,
    test: Path | None = None,
    whole: bool = False,
):
    """The in-process run's settings (:func:`fedpriv.server.resolve.resolve`, the
    resolver every entry point calls): the user's ``overrides`` (a Flower-only key is
    refused) over ``preset``, the command's options as the run keys they are, checked
    before any row is read. ``whole``: every row in training (``fedpriv cv``)."""
    from fedpriv.server.resolve import resolve

    check_in_process_keys(overrides)
    given = dict(overrides)
    if method is not None:
        given["method"] = method
    if dataset is not None:
        given["dataset"] = dataset
    if csv is not None or train is not None:
        if schema is None:
            flag = "--train" if train is not None else "--csv"
            raise click.UsageError(f"{flag} needs --schema FILE (fedpriv schema draft writes one)")
        given["schema"] = _file_setting(schema)
    if csv is not None:
        given["csv"] = _file_setting(csv)
    if test is not None:  # the held-out file the model is scored on
        given["eval-path"] = _file_setting(test)
    if out is not None:
        given["out-dir"] = str(out.resolve())
    return resolve(given, preset=preset, flower=False, whole=whole)


def _fit_config(resolved: dict[str, Any], est: Any) -> dict[str, Any]:
    """The run config as the fit ran it: ``resolved`` with the method's settings from
    ``est.config_`` (DP-SGD's automatic schedule resolved), where the fit got that far."""
    config = getattr(est, "config_", None)
    if config is None:
        return resolved
    ran = {f.name.replace("_", "-"): getattr(config, f.name) for f in dataclasses.fields(config)}
    return {**resolved, **{k: getattr(v, "value", v) for k, v in ran.items()}}


def rounds_text(settings: Any) -> str:
    """``T rounds``, or that they follow the fit's public record bound (DP-SGD's automatic
    schedule, resolved when the fit knows its n)."""
    if getattr(settings.config, "automatic", False) and settings.config.rounds == 0:
        return "automatic rounds (from the public record bound)"
    return f"{settings.rounds} rounds"


def choose_data(
    run: Any,
    *,
    client_column: str | None,
    train: Path | None = None,
    test: Path | None = None,
    whole: bool = False,
) -> tuple[Any, str, Any]:
    """The fit's data, its name for the log, and ``run`` (a
    :class:`~fedpriv.server.resolve.ResolvedRun`) with K of the rows as loaded.

    ``train``: that file trained on whole, ``test`` scored (both checked against the
    schema first, :func:`fedpriv.data.load_train_test`); the run's ``csv``: its
    training split, or with ``whole`` every row in training (``fedpriv cv`` cuts the
    folds); else the run's bundled corpus, split for its K (``whole``: every row in
    training). A file's K is its client column's (``client_column``, else the
    schema's; :meth:`~fedpriv.server.resolve.ResolvedRun.with_clients`).
    """
    import numpy as np

    from fedpriv.data import load_csv, load_csv_whole, load_for_run, load_train_test
    from fedpriv.data.split import Split

    s = run.settings
    opts = {"client_column": client_column, "split_seed": s.split_seed}
    if train is not None or s.csv:
        if train is not None:
            data = load_train_test(train, test, Path(s.schema), **opts)
            source = f"{train} (test {test})"
        else:
            data = (load_csv_whole if whole else load_csv)(Path(s.csv), Path(s.schema), **opts)
            source = s.csv
        run = run.with_clients(data.client_names, where=f"{source}'s client column")
        return data, source, run
    data = load_for_run(s.dataset, num_clients=s.num_clients, split_seed=s.split_seed)
    if whole:
        none = np.zeros(0, dtype=np.int64)
        every = np.arange(data.y.size)
        split = Split(train=every, val=none, test=none, seed=s.split_seed, rule="every row")
        data = dataclasses.replace(data, split=split)
    return data, s.dataset, run


def run_in_process(
    *,
    method: str | None,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    client_column: str | None,
    overrides: dict[str, Any],
    out: Path | None,
    force: bool = False,
    train: Path | None = None,
    test: Path | None = None,
    preset: str | None = None,
) -> int:
    """Fit the run's estimator in process; print AUC, ε and the status; returns the exit code.

    The run is resolved as every entry point resolves one (:func:`resolve_in_process`:
    ``method`` ``None`` is the preset's, else the default), its rows then read
    (:func:`choose_data`; ``train`` and ``test``: fit on the whole train file, score
    the test file) and the method's estimator built from the same settings
    (:meth:`~fedpriv.server.method_estimator.MethodEstimator.from_settings`). Raises
    what the settings, the data or the fit raise (:mod:`fedpriv.server.cli_errors`
    maps each to one line); a failed fit's privacy report is written to ``out`` first."""
    from fedpriv.server.cli_split import brier_text, fmt_score, held_out_scores
    from fedpriv.server.method_estimator import MethodEstimator
    from fedpriv.server.progress import FitRounds, RoundProgress

    from fedpriv.federation.status import RunFailedError
    from fedpriv.privacy.card import spent_text

    run = resolve_in_process(
        method=method, dataset=dataset, csv=csv, schema=schema, overrides=overrides,
        preset=preset, out=out, train=train, test=test,
    )  # fmt: skip
    if out is not None:
        check_out_dir(out, force=force)
    data, source, run = choose_data(run, client_column=client_column, train=train, test=test)
    settings = run.settings
    est = MethodEstimator.from_settings(settings)
    bar = RoundProgress(thin=True)  # no terminal: a plain line about every tenth round
    # The fit's own rounds (est.config_, once the fit resolved its automatic settings;
    # before, the settings' own: 0 when they follow a count the fit releases).
    rounds = FitRounds(bar, lambda: getattr(est, "config_", settings.config).rounds)
    log.info(
        "%s in process on %s: %s, ε=%s, δ=%g",
        settings.method, source, rounds_text(settings), _fmt(settings.epsilon), settings.delta,
    )  # fmt: skip
    # What loading did to the rows (values clipped to the schema's bounds, values outside
    # a domain): already logged at the load; repeated with the result and kept in its files.
    warnings = data.report.warnings()
    # The run as it happened: its source, K and bound, the preset, every setting.
    summary = {
        "source": source, "preset": run.preset, "config": run.run_config, "warnings": warnings,
    }  # fmt: skip
    try:
        with bar:
            rounds.start()
            est.fit(data, on_round=rounds.on_round)  # the estimator's public progress callback
            report = est.privacy_report_
            rounds.finish(None if report is None else float(report.epsilon))
    except RunFailedError as exc:
        summary["config"] = _fit_config(run.run_config, est)
        if out is not None:  # what the failed fit spent stays recorded
            failed = {**summary, "status": str(exc.outcome.status), "reason": exc.outcome.reason}
            _write_results(out, None, failed, report=exc.privacy_report)
        raise
    summary["config"] = _fit_config(run.run_config, est)
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
