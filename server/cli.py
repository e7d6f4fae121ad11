"""The ``fedpriv`` command: one entry point over the estimators, launchers and studies.

``fedpriv run``      train one method in process (a bundled corpus, your CSV + schema, or
                     ``--train`` FILE scored on ``--test`` FILE), or as a Flower
                     simulation (``--flower``, :mod:`fedpriv.server.simulate`);
``fedpriv cv``       k-fold cross-validation, all fits in one ledger (:mod:`fedpriv.server.cli_cv`);
``fedpriv deploy``   a real local federation (:mod:`fedpriv.server.deploy`; arguments forwarded);
``fedpriv schema draft``  a schema skeleton from a CSV's header, placeholders for the rest;
``fedpriv bench``, ``fedpriv ablate``  the studies (``fedpriv.experiments.benchmark``,
                     ``fedpriv.experiments.ablate``), run as subprocesses: imports point from
                     experiments to server, never back;
``fedpriv predict``, ``fedpriv inspect``  score rows with a model file, print its card
                     (or a node's ledger and audit history, :mod:`fedpriv.server.cli_node`);
``fedpriv node``     a node operator's approvals of plans (:mod:`fedpriv.server.cli_node`).

The in-process run lives in :mod:`fedpriv.server.cli_run`, the filter of Flower's output in
:mod:`fedpriv.server.cli_logs`.

Exit codes follow the launchers': 0 a completed or degraded run, 1 a failed run, 2 a
setting, schema, data or file error (one line naming the key, the value and the range).
Every command's errors meet one boundary, :class:`FedprivGroup` (the mapping is
:mod:`fedpriv.server.cli_errors`): no traceback but for a defect.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
from fedpriv.server import cli_errors
from fedpriv.server.cli_consortium import coordinator
from fedpriv.server.cli_cv import cv
from fedpriv.server.cli_logs import quiet_flower
from fedpriv.server.cli_node import inspect_path, node
from fedpriv.server.cli_report import follow, report
from fedpriv.server.cli_run import run_in_process
from fedpriv.server.tracking_options import track_options

from fedpriv import logs

log = logs.get_logger(__name__)

_PASS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


# -- help ----------------------------------------------------------------------
def run_keys_help() -> str:
    """``fedpriv.server.launch.settings_help()`` (keys and defaults), each key with its range."""
    from fedpriv.server.launch import settings_help

    from fedpriv.federation.ranges import method_range, run_range
    from fedpriv.methods import method_names

    item = re.compile(r"([\w-]+) \[([^\]]*)\]")
    out, method = [], None
    for line in settings_help().splitlines():
        header = re.match(r"  (\w+): ", line)
        if header and header.group(1) in method_names():
            method = header.group(1)
            out.append(line)
        elif line.startswith("    ") and method is not None:
            for key, default in item.findall(line):
                out.append(f"      {key} [{default}]  {method_range(method, key)}")
        elif (m := re.fullmatch(r"  ([\w-]+) \[(.*)\]", line)) and method is None:
            out.append(f"{line}  {run_range(m.group(1))}")
        else:
            out.append(line)
    return "\n".join(out)


class _RunCommand(click.Command):
    """``run --help`` ends with every key, its default and range (built only when asked)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        formatter.write(run_keys_help() + "\n")


class FedprivGroup(click.Group):
    """The ``fedpriv`` group: its :meth:`main` is the command's one error boundary."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Run the command; every error ends as one line and an exit code
        (:func:`fedpriv.server.cli_errors.report`). Returns the exit code, or with
        ``standalone_mode`` (a console script, click's ``CliRunner``) exits with it."""
        logs.configure(logging.INFO, tag="fedpriv")  # before parsing: its errors are logged too
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = cli_errors.exit_code(rv)
        except BaseException as exc:  # the boundary: a defect is re-raised
            code = cli_errors.report(exc)
        if standalone_mode:
            sys.exit(code)
        return code


# -- the commands --------------------------------------------------------------------
@click.group(name="fedpriv", cls=FedprivGroup,
             context_settings={"help_option_names": ["-h", "--help"]})  # fmt: skip
@click.option("--verbose", "-v", is_flag=True, help="Debug logging; Flower's own output shown.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """fedpriv: federated learning on sensitive tabular data under record-level DP."""
    logs.configure(logging.DEBUG if verbose else logging.INFO, tag="fedpriv")
    ctx.obj = {"verbose": verbose}


@cli.command(cls=_RunCommand)
@click.option(
    "--method", default=None,
    help="A registered method (or --set method=…) [default: the preset's, else the run key "
    "method's below].",
)  # fmt: skip
@click.option(
    "--preset", default=None,
    help="A named job whose settings --set overrides (presets below) [default: none, the "
    "defaults every entry point shares].",
)  # fmt: skip
@click.option(
    "--dataset", default=None, help="A bundled corpus [default: the preset's, else below]."
)
@click.option("--csv", type=click.Path(path_type=Path), help="Your CSV (needs --schema).")
@click.option("--schema", type=click.Path(path_type=Path), help="The CSV's public schema TOML.")
@click.option("--client-column", default=None, help="The CSV's client column (else the schema's).")
@click.option("--train", type=click.Path(path_type=Path), help="Fit on this whole CSV (+ --test).")
@click.option("--test", type=click.Path(path_type=Path), help="Score this CSV (held-out rows).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Run-config override.")
@click.option(
    "--flower", is_flag=True, help="A Flower simulation (fedpriv.server.simulate) instead."
)
@click.option(
    "--share-secret-key", is_flag=True,
    help="With --flower: pass $FEDPRIV_SECRET_KEY to the simulated nodes too (a bit-for-bit "
    "reproduction; a distributed-noise run is then not certified).",
)  # fmt: skip
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Results directory (new, or without an earlier run's files).")  # fmt: skip
@click.option("--force", is_flag=True, help="Let --out replace an earlier run's files there.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=None,
    help="With --flower: the run's time limit in s [default: 3600]; each launcher step may "
    "take max(120, TIMEOUT/30) s + 15 s per node.",
)  # fmt: skip
@click.option("--verbose", "-v", "run_verbose", is_flag=True, help="Show Flower's output.")
@track_options
@click.pass_context
def run(ctx: click.Context, method, preset, dataset, csv, schema, client_column, train, test,
        sets, flower, share_secret_key, out, force, timeout, run_verbose, track,
        track_uri) -> int:  # fmt: skip
    """Train one method: in process (default) or as a Flower simulation (--flower).

    --train FILE --test FILE: fit on the whole train file, score the test file.
    Prints the test AUC, ε spent (PLD and RDP), the run's status and Brier score; --out DIR
    writes the model file and the privacy report, and refuses a folder holding
    an earlier run's (its privacy record would be lost) unless --force.
    """
    from fedpriv.server.launch import parse_set
    from fedpriv.server.tracking import launcher_args, require, results_folder, track_folder

    require(track)  # MLflow missing: refused before any work
    verbose = run_verbose or (ctx.obj or {}).get("verbose", False)
    overrides = parse_set(list(sets))
    given = overrides.pop("method", None)
    if method is not None and given is not None and given != method:
        raise click.UsageError(f"--method {method} and --set method={given} disagree")
    method = method or given  # None: the preset's, else the default (one resolver decides)
    sets = tuple(s for s in sets if not s.replace(" ", "").startswith("method="))
    if share_secret_key and not flower:
        raise click.UsageError("--share-secret-key applies to Flower runs only (add --flower)")
    if force and flower:
        raise click.UsageError("--force applies in process only (a Flower run has its own folder)")
    if timeout is not None and not flower:
        raise click.UsageError("--timeout applies to Flower runs only (add --flower)")
    if csv is not None and (dataset is not None or "dataset" in overrides):
        raise click.UsageError("--csv and --dataset name two different data sources: give one")
    if train is not None and (csv is not None or dataset is not None or "dataset" in overrides):
        raise click.UsageError("--train and --csv/--dataset name two data sources: give one")
    if (test is None) != (train is None):
        raise click.UsageError("--train FILE and --test FILE go together: fit one, score one")
    if train is not None and flower:
        raise click.UsageError("--train/--test run in process only (drop --flower)")
    if flower:
        from fedpriv.server import simulate

        from fedpriv.federation.presets import NO_PRESET

        # The same run as in process: the same preset (none unless given), not the
        # simulation launcher's own default.
        argv = ["--preset", preset or NO_PRESET]
        argv += [] if method is None else ["--set", f"method={method}"]
        argv += ["--share-secret-key"] if share_secret_key else []
        argv += [] if timeout is None else ["--timeout", str(timeout)]
        if dataset:
            argv += ["--set", f"dataset={dataset}"]
        if csv is not None:  # simulated hospitals: run-config csv, split as in process
            if schema is None:
                raise click.UsageError("--csv needs --schema FILE (schema draft writes one)")
            if client_column is not None:
                raise click.UsageError(
                    "--client-column is in-process only: a Flower simulation splits by the "
                    "schema's client_column (else IID)"
                )
            for key, path in (("csv", csv), ("schema", schema)):
                argv += ["--set", f"{key}={json.dumps(str(path.resolve()))}"]
        for s in sets:
            argv += ["--set", s]
        argv += launcher_args(track, track_uri)
        outdir = (out or Path.cwd() / "results" / "flower").resolve()
        return quiet_flower(simulate.main, [*argv, "--out-dir", str(outdir)], outdir,
                            verbose=verbose)  # fmt: skip
    out = results_folder(track, out)  # tracked: the results need a folder
    code = run_in_process(
        method=method, dataset=dataset, csv=csv, schema=schema, client_column=client_column,
        overrides=overrides, out=out, force=force, train=train, test=test, preset=preset,
    )  # fmt: skip
    track_folder(track, track_uri, out)
    return code


@cli.command(context_settings=_PASS)
@click.pass_context
def deploy(ctx: click.Context) -> int:
    """A real local federation: `python -m fedpriv.server.deploy` (every argument forwarded)."""
    from fedpriv.server import deploy as deploy_mod

    argv = list(ctx.args)
    if "--help" in argv or "-h" in argv:
        return _forward_help(deploy_mod.main, argv)
    outdir = Path(_option(argv, "--out-dir") or Path.cwd() / "results" / "deploy").resolve()
    return quiet_flower(deploy_mod.main, argv, outdir, verbose=ctx.obj.get("verbose", False))


def _option(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _forward_help(entry: Any, argv: list[str]) -> int:
    try:
        return int(entry(argv) or 0)
    except SystemExit as exc:  # argparse's --help
        return int(exc.code or 0)


def _study(module: str, args: list[str]) -> int:
    """``python -m <module> args`` from the project root, output passed through."""
    from fedpriv.server.launch import ROOT

    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, check=False).returncode


@cli.command(context_settings=_PASS)
@click.pass_context
def bench(ctx: click.Context) -> int:
    """The matched-accounting benchmark: `python -m fedpriv.experiments.benchmark`
    (args forwarded)."""
    return _study("fedpriv.experiments.benchmark", list(ctx.args))


@cli.command(context_settings=_PASS)
@click.pass_context
def ablate(ctx: click.Context) -> int:
    """The ablation studies: `python -m fedpriv.experiments.ablate STUDY` (args forwarded)."""
    return _study("fedpriv.experiments.ablate", list(ctx.args))


@cli.command("app")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def app_command(directory: Path) -> int:
    """Write fedpriv's Flower App (a pyproject.toml, no code) into DIRECTORY, for `flwr run`.

    It names the installed ServerApp and ClientApp and every run-config key of the
    run and of every registered method (plugins included), each "" for its default.
    """
    from fedpriv.server.flower_project import write_project

    out = write_project(directory)
    click.echo(f"wrote {out / 'pyproject.toml'}: flwr run {out} <connection> --run-config ...")
    return 0


@cli.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Write the scores here (CSV) instead of standard output.")  # fmt: skip
def predict(model: Path, file: Path, out: Path | None) -> int:
    """Score the raw rows of FILE (a CSV of the model's schema) with MODEL (a model file).

    Rows are read and encoded through the schema stored in the model file, with
    its public bounds and domains; one score per row, P(positive class).
    """
    import numpy as np
    from fedpriv.server.cli_run import check_out_file

    from fedpriv.artefact import load_model
    from fedpriv.atomic import write_text_atomic
    from fedpriv.data.table import read_table

    if out is not None:
        check_out_file(out)
    art = load_model(model)
    if art.schema is None:
        raise click.UsageError(f"{model} was trained on bare arrays: it has no schema to read rows")
    frame, _ = read_table(file, art.schema)
    scores = np.asarray(art.predict_proba_frame(frame))
    scores = scores[:, -1] if scores.ndim == 2 and scores.shape[1] == 2 else scores
    text = "score\n" + "".join(f"{float(x):.6f}\n" for x in np.ravel(scores))
    if out is None:
        click.echo(text, nl=False)
    else:
        write_text_atomic(out, text)
        log.info("%d scores written to %s", scores.shape[0], out)
    return 0


@cli.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The machine-readable card or report.")
@click.option(
    "--terms", is_flag=True,
    help="The model's terms in raw units (a GAM) or its split usage (trees) instead.",
)  # fmt: skip
def inspect(model: Path, as_json: bool, terms: bool) -> int:
    """Print MODEL's privacy card (Markdown, or JSON with --json); with --terms, what the
    model says per column (Artefact.explain: released values and the public schema only).

    MODEL may be a model file, a run's results directory (its model file), or a
    node's state directory (its node-config ``state-dir``): then the node's own
    budget ledger, its lifetime spend, what its policy leaves, and its audit log's
    history, the chain verified. A folder holding none of these, a corrupt ledger
    or a broken audit chain exits with code 2 and one line.
    """
    click.echo(inspect_path(model, as_json, terms=terms))
    return 0


@cli.group()
def schema() -> None:
    """Public schemas of your CSV files."""


@schema.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where to write it [default: FILE with .schema.toml].")  # fmt: skip
@click.option("--target", default=None, help="The target column.")
@click.option("--client-column", default=None, help="The column naming each row's client.")
@click.option("--sep", default=",", show_default=True, help="Field delimiter.")
def draft(file: Path, out: Path | None, target, client_column, sep) -> int:
    """Write a schema skeleton from FILE's header and column types only.

    Every bound, category, label and binary value is a "FILL ME" placeholder the
    loader refuses until you fill it from public documentation.
    """
    from fedpriv.server.cli_run import check_out_file

    from fedpriv.atomic import write_text_atomic
    from fedpriv.data.draft import PLACEHOLDER, WHY, draft_schema

    out = out or file.with_suffix(".schema.toml")
    if out.exists():
        raise click.UsageError(f"--out {out} exists; not overwritten")
    check_out_file(out)
    text = draft_schema(file, target=target, client_column=client_column, sep=sep)
    write_text_atomic(out, text)
    n = text.count(f'"{PLACEHOLDER}"')
    click.echo(
        f"wrote {out}: column names and types only, {n} {PLACEHOLDER!r} placeholders.\n"
        f"No value, bound or level of the data was written. For each placeholder: {WHY}.\n"
        "The loader refuses the schema until every placeholder is filled."
    )
    return 0


cli.add_command(node)
cli.add_command(report)
cli.add_command(follow)
cli.add_command(coordinator)
cli.add_command(cv)


def main(argv: list[str] | None = None) -> int:
    """The console script ``fedpriv``; returns the exit code (:meth:`FedprivGroup.main`)."""
    return cli.main(args=argv, prog_name="fedpriv", standalone_mode=False)


if __name__ == "__main__":
    sys.exit(main())
