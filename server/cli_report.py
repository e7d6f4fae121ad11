"""``fedpriv report RUN_DIR`` (one self-contained HTML page) and ``fedpriv follow RUN_DIR``
(the rounds in the terminal as they come): a run's folder, looked at.

Both read only the folder (:mod:`fedpriv.server.run_files`), finished or
running; the page is :mod:`fedpriv.server.report` and
:mod:`fedpriv.server.report_html`, the terminal view :mod:`fedpriv.server.follow`.
A folder that holds none of a run's files is one line and exit code 2.
"""

from __future__ import annotations

from pathlib import Path

import click
from fedpriv.server.cli_node import Refused


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The HTML file [default: RUN_DIR/report.html].",
)
def report(run_dir: Path, out: Path | None) -> int:
    """Write one self-contained HTML page about the run in RUN_DIR.

    Its status and settings, the privacy card (ε by PLD and RDP, δ, every release
    grouped, the budget used, certification and its caveats), ε spent per round,
    each node's participation and dropouts, the metrics with a ROC curve and a
    reliability diagram on the run's public evaluation rows, and the model per
    column (a GAM's shape functions in raw units with their noise bounds and term
    importances; a tree model's split usage). Released values and public rows
    only. A running Flower run's folder gives a page marked "running".
    """
    from fedpriv.server.cli_run import check_out_file
    from fedpriv.server.report import write_report

    if not run_dir.is_dir():
        raise Refused(f"{run_dir} is not a folder (a run's results folder)")
    if out is not None:
        check_out_file(out)
    try:
        written = write_report(run_dir, out)
    except FileNotFoundError as exc:
        raise Refused(str(exc)) from None
    click.echo(f"wrote {written}")
    return 0


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--once", is_flag=True, help="Print what is there now and return.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between looks at the folder.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up (exit 1) on a run still going after this many seconds.",
)
def follow(run_dir: Path, once: bool, interval: float, timeout: float | None) -> int:
    """Follow the run in RUN_DIR: one line per round (replies, dropouts, ε), then its end.

    Reads the folder the ServerApp writes (progress.jsonl, privacy.json, status.json,
    metrics.json); exit code 0 for a completed or degraded run, 1 for a failed one or
    one still running at --timeout.
    """
    from fedpriv.server.follow import follow as follow_dir

    if not run_dir.is_dir():
        raise Refused(f"{run_dir} is not a folder (a run's results folder)")
    try:
        return follow_dir(run_dir, echo=click.echo, once=once, interval=interval, timeout=timeout)
    except FileNotFoundError as exc:
        raise Refused(str(exc)) from None
