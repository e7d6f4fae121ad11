"""``fedpriv cv``: k-fold cross-validation of one method, every fold's fit charged to one ledger.

The data (a CSV with its public schema, or a bundled corpus) is read whole and
each row drawn into one of k folds with a private key
(:func:`fedpriv.server.cli_split.assign_folds`: ``$FEDPRIV_SECRET_KEY`` if injected, else
fresh entropy). Fold j's fit trains, in process and federated as ``fedpriv run``
does (clients from the schema's client column, else ``num-clients`` IID), on the
other k − 1 folds and is scored on fold j.

Privacy. The user's (ε, δ) is the budget of the whole command. One
:class:`~fedpriv.privacy.PrivacyLedger` with that budget is charged with every
fold's fit (each runs in a scope of it, :meth:`~fedpriv.privacy.PrivacyLedger.scope`,
with the per-fold (ε_f, δ/k) of :func:`fedpriv.server.cli_split.fold_budget`), so the
ledger refuses a fit that would pass the total before its noise is drawn. The
public size of every fold's fit is the declared ``max-records`` (n = clients ×
bound), else one count of all rows released through the same ledger
(:func:`~fedpriv.privacy.record_count.release_count`, 1 % of ε) whose upper bound
U bounds every fold's records and every client's: one count instead of k, and
every fold's plan then known before its fit.

The held-out scores are the data owner's: the command runs where the data is
and prints per-fold AUC, Brier and base-rate Brier, the mean ± sd of the AUC
(sample sd over the folds that have one) and the one ledger's ε (PLD, RDP);
``--out DIR`` writes ``cv.json`` with the same and the ledger's privacy report.
Fold sizes are neither printed nor written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from fedpriv import logs

log = logs.get_logger(__name__)

#: The file ``--out`` gets.
CV_FILE = "cv.json"
#: Folds ``--folds`` accepts.
FOLDS = click.IntRange(2, 20)


@click.command()
@click.option(
    "--method",
    default=None,
    help="A registered method [default: the preset's, else as fedpriv run's].",
)
@click.option("--preset", default=None, help="A named job (fedpriv run --help lists them).")
@click.option("--dataset", default=None, help="A bundled corpus (all its rows).")
@click.option("--csv", type=click.Path(path_type=Path), help="Your CSV (needs --schema).")
@click.option("--schema", type=click.Path(path_type=Path), help="The CSV's public schema TOML.")
@click.option("--client-column", default=None, help="The CSV's client column (else the schema's).")
@click.option("--folds", type=FOLDS, default=5, show_default=True, help="k: folds (and fits).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Run-config override.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Writes cv.json here.")
@click.option("--force", is_flag=True, help="Let --out replace an earlier cv.json there.")
def cv(method, preset, dataset, csv, schema, client_column, folds, sets, out,
       force) -> int:  # fmt: skip
    """k-fold cross-validation in process; epsilon is the budget of all k fits together.

    Each fold's fit trains on the other k − 1 folds and is scored on its own;
    prints each fold's AUC and Brier score, the mean ± sd AUC and the ε spent
    (PLD, RDP) by all fits in one ledger.
    """
    from fedpriv.server.launch import parse_set

    overrides = parse_set(list(sets))
    given = overrides.pop("method", None)
    if method is not None and given is not None and given != method:
        raise click.UsageError(f"--method {method} and --set method={given} disagree")
    if csv is not None and (dataset is not None or "dataset" in overrides):
        raise click.UsageError("--csv and --dataset name two different data sources: give one")
    return run_cv(
        method=method or given, dataset=dataset, csv=csv, schema=schema, preset=preset,
        client_column=client_column, folds=folds, overrides=overrides, out=out, force=force,
    )  # fmt: skip


def bounded_rows(units: Any, m: int) -> int:
    """Σ_u min(k_u, m): the rows left once every unit keeps at most m."""
    import numpy as np

    return int(np.minimum(np.bincount(units), m).sum())


def _public_size(est: Any, ledger: Any, n_rows: int, k: int, key: Any, m: int = 1):
    """Every fold's public size: the declared bound, else one released count (module
    docstring; a unit of ``m`` records moves it by m) charged to ``ledger``; ``None`` for
    a non-private run (no ledger)."""
    from fedpriv.server.fit_size import PublicSize

    from fedpriv.privacy.record_count import COUNT_SHARE, release_count

    if ledger is None:
        return None
    if est.max_records is not None:
        bound = est._record_bound([])  # checked: an integer ≥ 1
        return PublicSize(n_records=k * bound, max_records=bound)
    rng = key.derive("server").generator("record-count")
    _, upper = release_count(
        ledger, n_rows, epsilon=COUNT_SHARE * est.epsilon, rng=rng, unit_records=m
    )
    return PublicSize(n_records=upper, max_records=upper)


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    import numpy as np

    if not values:
        return None, None
    return float(np.mean(values)), (float(np.std(values, ddof=1)) if len(values) > 1 else None)


def run_cv(
    *,
    method: str,
    dataset: str | None,
    csv: Path | None,
    schema: Path | None,
    client_column: str | None,
    folds: int,
    overrides: dict[str, Any],
    out: Path | None,
    force: bool = False,
    preset: str | None = None,
) -> int:
    """Cross-validate ``method`` (``None``: the preset's, else the default) over ``folds``
    folds; print and write the results; exit code. The run is resolved as ``fedpriv run``
    resolves it (:func:`fedpriv.server.cli_run.resolve_in_process`, every row in training)."""
    from fedpriv.server import cli_split as split
    from fedpriv.server.cli_run import (
        _fmt,
        check_out_dir,
        choose_data,
        resolve_in_process,
        rounds_text,
    )
    from fedpriv.server.method_estimator import MethodEstimator
    from sklearn.base import clone

    from fedpriv.atomic import write_json_atomic
    from fedpriv.federation.status import RunFailedError
    from fedpriv.privacy import PrivacyBudget, PrivacyBudgetExceededError, PrivacyLedger
    from fedpriv.privacy.randomness import key_from_environment

    run = resolve_in_process(
        method=method, dataset=dataset, csv=csv, schema=schema, overrides=overrides,
        preset=preset, whole=True,
    )  # fmt: skip
    if out is not None:  # before any row is read: an earlier cv.json is not replaced
        check_out_dir(out, force=force, files=(CV_FILE,))
    data, source, run = choose_data(run, client_column=client_column, whole=True)
    settings, k = run.settings, run.settings.num_clients
    est = MethodEstimator.from_settings(settings)
    est._check_run_params()
    key = key_from_environment().derive("cv")
    private = math.isfinite(settings.epsilon)
    budget = PrivacyBudget(epsilon=settings.epsilon, delta=settings.delta)
    ledger = PrivacyLedger(budget=budget)
    ledger.declare_unit(data.schema.privacy_unit)  # before the count: whom it protects
    rows = data.rows("train")
    units = None if data.units is None else data.units[rows]
    # Released only through the count, if at all: with units, Σ_u min(k_u, m), the rows
    # every fold's fit can use (one unit moves it by at most m).
    n_rows = int(rows.size) if units is None else bounded_rows(units, data.schema.unit_records)
    size = _public_size(est, ledger if private else None, n_rows, k, key, data.schema.unit_records)
    fold_of = split.assign_folds(int(rows.size), folds, key)
    if units is not None:  # a unit's rows share its fold: no unit trained on and scored
        fold_of = split.assign_folds(int(units.max()) + 1, folds, key)[units]
    per_fold = None
    if private:
        per_fold = split.fold_budget(
            split.fit_plan(est, data, size, k), epsilon=settings.epsilon, delta=settings.delta,
            folds=folds, fixed=ledger.planned_items(),
        )  # fmt: skip
        est.set_params(epsilon=per_fold.epsilon, delta=per_fold.delta)
    log.info(
        "%s cross-validated in process on %s: %d folds, %s, ε=%s, δ=%g in all%s",
        settings.method, source, folds, rounds_text(settings), _fmt(settings.epsilon),
        settings.delta,
        "" if per_fold is None else
        f"; each fold's fit ε={per_fold.epsilon:.6g}, δ={per_fold.delta:.3g}",
    )  # fmt: skip
    results: list[dict[str, Any]] = []
    for j in range(folds):
        fit = clone(est).set_params(ledger=ledger, secret_key=key.derive("fold", j))
        part = split.fold_data(data, fold_of, j)
        try:
            fit.fit(part, public_size=size)
        except (RunFailedError, PrivacyBudgetExceededError) as exc:
            log.error("fold %d of %d failed: %s; %s", j + 1, folds, exc, _spent(ledger))
            return 1
        scores = split.held_out_scores(fit, *part.xy("test"))
        results.append({"fold": j + 1, **scores, "status": str(fit.run_status_)})
        auc = split.fmt_score(scores["auc"])
        outcome = fit.run_outcome_.line()
        click.echo(f"fold {j + 1}/{folds}: AUC {auc} | {split.brier_text(scores)} | {outcome}")
    aucs = [r["auc"] for r in results if r["auc"] is not None]
    mean, sd = _mean_sd(aucs)
    report = ledger.report()
    line = (
        f"AUC {split.fmt_score(mean)} ± {split.fmt_score(sd)} (mean ± sd over {len(aucs)} of "
        f"{folds} folds) | {_spent(ledger, report)}, all {folds} fits in one ledger of "
        f"budget ε={_fmt(settings.epsilon)}"
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        doc = {
            "folds": results,
            "auc_mean": mean,
            "auc_sd": sd,
            "source": source,
            "preset": run.preset,
            "config": run.run_config,
            "fold_budget": None if per_fold is None else {
                "epsilon": per_fold.epsilon, "delta": per_fold.delta,
                "planned_epsilon": per_fold.planned,
            },
            "privacy": {"epsilon": "inf", "non_private": True} if not private
            else report.to_dict(),
        }  # fmt: skip
        write_json_atomic(out / CV_FILE, doc)
        line += f" | {out / CV_FILE}"
    click.echo(line)
    return 0


def _spent(ledger: Any, report: Any = None) -> str:
    """``ε spent <a> (<accountant>), <b> (<other>)`` of the one ledger so far, the
    certified figure first (:func:`fedpriv.privacy.card.spent_text`)."""
    from fedpriv.privacy.card import spent_text

    return spent_text((report or ledger.report()).to_dict())
