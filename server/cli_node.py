"""The node operator's commands: ``fedpriv node approve`` / ``pending`` and what
``fedpriv inspect`` shows of a folder.

``fedpriv node pending --state DIR``    the plans waiting for the data owner's approval
                                        (hash, run, method, ε, δ, columns, stages);
``fedpriv node approve HASH --state DIR``  approve one (logged in the node's audit log);
                                        a hash that is not pending is refused unless
                                        ``--force`` (approval in advance).

:func:`inspect_path` tells a model file, a run directory (its ``model.fedpriv.npz``,
or for a failed run its ``privacy.json``) and a node state directory (its ledger and
audit log) apart; anything else (an empty or mistyped folder, the parent of runs or
of node states, a file that is not a model), and a node state that fails its checks
(:mod:`fedpriv.privacy.node_inspect`), is one line and exit code 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click


class Refused(click.ClickException):
    """One line on standard error, exit code 2 (a setting or data error)."""

    exit_code = 2


# -- fedpriv inspect -------------------------------------------------------------
#: A run's privacy report (in process: ``fedpriv run --out``; Flower: the ledger's journal).
PRIVACY_FILE = "privacy.json"


def _is_run_dir(path: Path) -> bool:
    from fedpriv.artefact import ARTEFACT_NAME

    return (path / ARTEFACT_NAME).is_file() or (path / PRIVACY_FILE).is_file()


def _privacy_report(path: Path, as_json: bool) -> str:
    """A run folder without a model file (a failed run): what its privacy report says."""
    from fedpriv.federation.status import read_status

    file = path / PRIVACY_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"{file} is not a run's privacy report: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "epsilon" not in data:
        raise Refused(f"{file} is not a run's privacy report: it has no 'epsilon'")
    if as_json:
        return json.dumps(data, indent=1)
    outcome = read_status(path)
    run = data.get("run") if isinstance(data.get("run"), dict) else {}
    status = outcome.line() if outcome is not None else f"run {run.get('status', 'status unknown')}"
    if outcome is None and run.get("reason"):
        status += f": {run['reason']}"
    delta = data.get("delta", "?")
    complete = "" if data.get("complete", True) else " (journal of an unfinished run)"
    return (
        f"{path}: a run's results without a model file; {status}\n"
        f"spent: ε {_num(data['epsilon'])}, δ {_num(delta)}{complete}"
    )


def _card(path: Path, as_json: bool, terms: bool = False) -> str:
    from fedpriv.artefact import (
        load_model,  # its ArtefactError: one line (fedpriv.server.cli_errors)
    )

    art = load_model(path)
    if terms:  # the model per column: a GAM's terms in raw units, or split usage
        explained = art.explain()
        return json.dumps(explained.to_dict(), indent=1) if as_json else explained.to_text()
    card = art.card
    return json.dumps(card.to_dict(), indent=1) if as_json else card.to_markdown()


def inspect_path(path: Path, as_json: bool, *, terms: bool = False) -> str:
    """What ``fedpriv inspect PATH`` prints; raises :class:`Refused`, an ``ArtefactError``
    or an ``InspectError`` (each one line and exit code 2, :mod:`fedpriv.server.cli_errors`).
    ``terms``: the model file's :meth:`~fedpriv.artefact.Artefact.explain` instead of its card."""
    from fedpriv.artefact import ARTEFACT_NAME
    from fedpriv.privacy.node_audit import AUDIT_FILE
    from fedpriv.privacy.node_budget import LEDGER_FILE
    from fedpriv.privacy.node_inspect import is_state_dir, node_report, report_text

    if not path.exists():
        raise Refused(f"{path} does not exist")
    if path.is_file() and path.name in (LEDGER_FILE, AUDIT_FILE, PRIVACY_FILE):
        path = path.parent  # a node's or a run's file: its folder
    if path.is_file():
        return _card(path, as_json, terms)
    if terms and not (path / ARTEFACT_NAME).is_file():
        raise Refused(f"--terms reads a model file; {path} holds no {ARTEFACT_NAME}")
    if is_state_dir(path):
        report = node_report(path)
        return json.dumps(report, indent=1) if as_json else report_text(report)
    if (path / ARTEFACT_NAME).is_file():  # a run's results directory
        return _card(path / ARTEFACT_NAME, as_json, terms)
    if (path / PRIVACY_FILE).is_file():  # a failed run's: no model file
        return _privacy_report(path, as_json)
    children = sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    for what, test in (("node state", is_state_dir), ("run results", _is_run_dir)):
        found = [p.name for p in children if test(p)]
        if found:
            shown = ", ".join(found[:4]) + (", …" if len(found) > 4 else "")
            raise Refused(f"{path} holds {what} directories ({shown}): inspect one of them")
    raise Refused(
        f"{path} holds no node ledger ({LEDGER_FILE}), node audit log ({AUDIT_FILE}), "
        f"model file ({ARTEFACT_NAME}) nor run privacy report ({PRIVACY_FILE})"
    )


# -- fedpriv node ----------------------------------------------------------------
def _state(state: Path) -> Path:
    if not state.is_dir():
        raise Refused(f"--state {state}: no such directory (the node's node-config state-dir)")
    return state


@click.group()
def node() -> None:
    """A node operator's commands: the plans waiting for approval, and approving one."""


@node.command()
@click.argument("plan_hash")
@click.option("--state", type=click.Path(path_type=Path), required=True, metavar="DIR",
              help="The node's state directory (node-config state-dir).")  # fmt: skip
@click.option("--force", is_flag=True, help="Approve a plan that is not (yet) pending.")
def approve(plan_hash: str, state: Path, force: bool) -> int:
    """Approve the plan PLAN_HASH on this node (logged in its audit log)."""
    from fedpriv.privacy.node_approval import approve as approve_plan
    from fedpriv.privacy.node_approval import pending_path
    from fedpriv.privacy.node_audit import is_hash

    state = _state(state)
    h = plan_hash.strip().lower()
    if not is_hash(h):
        raise Refused(f"PLAN_HASH must be 64 hex digits (a plan's sha256); got {plan_hash!r}")
    if not force and not pending_path(state, h).is_file():
        raise Refused(
            f"plan {h} is not pending in {state} (see `fedpriv node pending --state "
            f"{state}`); --force approves it in advance"
        )
    entry = approve_plan(state, h, by="operator")  # an AuditLogError: one line, exit 2
    if entry is None:
        click.echo(f"plan {h} was already approved on this node")
    else:
        click.echo(f"approved plan {h} (audit log seq {entry['seq']})")
    return 0


def _num(x: Any) -> str:
    if isinstance(x, int | float) and not isinstance(x, bool):
        return "inf" if math.isinf(x) else f"{x:.6g}"
    return "?" if x is None else str(x)


@node.command()
@click.option("--state", type=click.Path(path_type=Path), required=True, metavar="DIR",
              help="The node's state directory (node-config state-dir).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="The pending plans as JSON.")
def pending(state: Path, as_json: bool) -> int:
    """List the plans waiting for this node's approval."""
    from fedpriv.privacy.node_approval import list_pending

    plans = list_pending(_state(state))
    if as_json:
        click.echo(json.dumps(plans, indent=1, ensure_ascii=False))
        return 0
    if not plans:
        click.echo(f"no plan waits for approval in {state}")
        return 0
    for p in plans:
        if "unreadable" in p:
            click.echo(f"{p['plan_hash']}  unreadable record: {p['unreadable']}")
            continue
        columns = p.get("columns")
        cols = "?" if columns is None else ", ".join(map(str, columns)) or "none"
        stages = p.get("stages")
        n = len(stages) if isinstance(stages, list | dict) else _num(stages)
        click.echo(
            f"{p['plan_hash']}  run {p.get('run', '?')}  method {p.get('method', '?')}  "
            f"ε {_num(p.get('epsilon'))}  δ {_num(p.get('delta'))}  columns [{cols}]  "
            f"stages {n}  requested {p.get('requested', '?')}"
        )
    click.echo(f"approve one with: fedpriv node approve HASH --state {state}")
    return 0
