"""A coordinator's runs: submit one, follow it to its end, read the real status.

``fedpriv coordinator submit`` resolves the job as every entry point does
(:func:`fedpriv.server.resolve.resolve`; preset ``deploy-files`` by default: the
method's own defaults, as ``fedpriv run`` fits them), on the nodes' own files:
``max-records`` and the schema must be declared (:func:`fedpriv.server.deploy.
check_file_job`), K defaults to the registered nodes, results go to the
coordinator's ``results/`` and a schema file's SHA-256 rides along
(``schema-sha256``: nodes holding their own copy refuse another). Each
submission is remembered in ``runs/RUN_ID.json`` (what :func:`follow_run` needs:
the run's time limit and results folder).

``follow`` streams the run's progress and reads its real status (``flwr run``
exits 0 even when a run fails); ``status`` lists the SuperLink, the nodes and
the runs as Flower reports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from fedpriv.server.coordinator import CONNECTION, Coordinator
from fedpriv.server.hospital import file_digest
from fedpriv.server.launch import exit_code, flwr, follow, result_line, step_timeout, submit
from fedpriv.server.progress import RoundProgress
from fedpriv.server.resolve import resolve

from fedpriv import logs
from fedpriv.atomic import point_latest, write_json_atomic
from fedpriv.data import DataError, SchemaError
from fedpriv.data.node import run_schema
from fedpriv.federation.presets import DEPLOY_FILES, get_preset
from fedpriv.federation.settings import SettingError, run_size_range

log = logs.get_logger(__name__)

#: A run's time limit without ``--timeout``: this much plus T × ``round-timeout``.
RUN_LIMIT_BASE = 1800.0


def run_limit(settings) -> float:
    """The default time limit of a run (s): :data:`RUN_LIMIT_BASE` plus T ×
    ``round-timeout``, so a run progressing at its rounds' pace is never stopped."""
    return RUN_LIMIT_BASE + settings.rounds * settings.round_timeout


def check_file_job(overrides: Mapping, *, what: str):
    """The public schema of a job on the nodes' own files, checked: ``max-records`` is
    declared (a bound the server may not count from the files) and so is the files'
    schema (``schema``, or the ``dataset`` whose schema they follow), never the default
    corpus's by accident; the schema loads (a draft with placeholders left is refused)."""
    if overrides.get("max-records") in (None, ""):
        raise SettingError(
            "max-records must be declared (--set max-records=N, an integer in "
            f"{run_size_range('max_records')}: the public bound on records per node) for "
            f"{what}; got unset"
        )
    if overrides.get("schema") in (None, "") and overrides.get("dataset") in (None, ""):
        raise SettingError(
            f"schema must be set for {what} (--set schema=FILE.toml: the files' public "
            "schema; or --set dataset=NAME for a bundled corpus's export); got unset"
        )
    try:  # loaded now: a schema the nodes would refuse (e.g. a draft) starts nothing
        return run_schema(schema_setting(overrides), str(overrides.get("dataset") or ""))
    except (SchemaError, DataError) as exc:
        raise SettingError(str(exc)) from None


def schema_setting(overrides: Mapping) -> str:
    """The run's ``schema`` value, a schema file's path made absolute (every process
    of the run, and its ``config.json``, names the same file)."""
    schema = str(overrides.get("schema") or "")
    return str(Path(schema).resolve()) if schema and Path(schema).is_file() else schema


def job_overrides(
    coord: Coordinator, overrides: Mapping, *, files: bool = True, preset: str | None = None
) -> dict:
    """The user's settings completed for this coordinator: K = the registered nodes
    unless set, results in its folder, a schema file made absolute with its digest.
    ``files``: the nodes hold their own files (the job is checked for that, with the
    values of ``preset`` under the user's: a preset may name the dataset)."""
    out = dict(overrides)
    out.setdefault("num-clients", len(coord.nodes()))
    out.setdefault("out-dir", str(coord.results))
    if files:
        chosen = get_preset(DEPLOY_FILES if preset is None else preset)
        given = {**(dict(chosen.values) if chosen is not None else {}), **out}
        check_file_job(given, what="a consortium's run (the nodes' own files)")
    schema = schema_setting(out)
    if schema and Path(schema).is_file():
        out["schema"] = schema
        out["schema-sha256"] = file_digest(Path(schema))
    return out


def submit_run(
    coord: Coordinator, overrides: Mapping, *, preset: str | None = None, files: bool = True
) -> tuple[str, object]:
    """Submit one run; returns (run id, its resolved settings)."""
    if not (coord.running() or coord.answers()):
        raise SettingError(f"no SuperLink of {coord.root} answers (fedpriv coordinator start)")
    registered = len(coord.nodes())
    job = job_overrides(coord, overrides, files=files, preset=preset)
    run = resolve(job, preset=DEPLOY_FILES if preset is None else preset)
    s = run.settings
    if s.num_clients > registered:
        raise SettingError(
            f"num-clients must be at most the {registered} registered node(s); got {s.num_clients}"
        )
    return submit_resolved(coord, s, run.run_config), s


def submit_resolved(coord: Coordinator, s, config: Mapping, *, limit: float | None = None) -> str:
    """Submit a resolved run (``s`` its settings, ``config`` its run config); returns its
    id, remembered with its time limit (``limit``, default :func:`run_limit`)."""
    limit = run_limit(s) if limit is None else limit
    wait = step_timeout(limit, s.num_clients)
    run_id = submit(CONNECTION, coord.env, dict(config), wait=wait)
    runs = coord.root / "runs"
    runs.mkdir(exist_ok=True)
    write_json_atomic(
        runs / f"{run_id}.json",
        {"out": str(Path(s.out_dir) / run_id), "limit": limit, "wait": wait,
         "method": s.method, "num-clients": s.num_clients, "rounds": s.rounds},
    )  # fmt: skip
    log.debug("run %s submitted: %s, K=%d, T=%s", run_id, s.method, s.num_clients, s.rounds)
    return run_id


def follow_run(
    coord: Coordinator,
    run_id: str,
    *,
    timeout: float | None = None,
    quiet: bool = False,
    hook: Callable[[str], None] | None = None,
    healthy: Callable[[], bool] | None = None,
) -> tuple[int, Path]:
    """Follow run ``run_id`` to its end; returns (exit code, results folder): 0 it
    completed (or degraded), 1 it failed, 2 the SuperLink was lost."""
    try:
        known = json.loads((coord.root / "runs" / f"{run_id}.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise SettingError(f"run {run_id!r} was not submitted from {coord.root}") from None
    limit = known["limit"] if timeout is None else timeout
    wait = known["wait"] if timeout is None else step_timeout(timeout, known["num-clients"])
    progress = RoundProgress(bar=False if quiet else None)

    def on_line(line: str) -> None:
        if not quiet and ("[fedpriv]" in line or "ERROR" in line):
            progress.on_line(line)
        if hook is not None:
            hook(line)

    with progress:
        status, details = follow(
            run_id, CONNECTION, coord.env, timeout=limit, wait=wait, on_line=on_line,
            healthy=healthy or (lambda: coord.running() or coord.answers()),
        )  # fmt: skip
    log.info(f"run {run_id}: {status} {details}".rstrip())
    out = Path(known["out"])
    code = exit_code(status, out)
    if out.is_dir():
        point_latest(out.parent, run_id)
    return code, out


def result(out: Path) -> str:
    """The run's result line (AUC, ε, rounds released), or why there is none."""
    try:
        return result_line(out, "round trips {round_trips}")
    except (OSError, KeyError, json.JSONDecodeError):
        return f"{out}: no complete results (see the run's status above)"


def status_lines(
    coord: Coordinator, run_id: str | None = None, *, wait: float | None = None
) -> list[str]:
    """``fedpriv coordinator status``: the SuperLink, the allow-list and who is online,
    and the runs (or one run) with the status Flower reports."""
    nodes = coord.nodes()
    wait = coord.step() if wait is None else wait
    lines = [f"coordinator {coord.root}: SuperLink at {coord.address}"]
    up = coord.running() or coord.answers()
    if not up:
        lines[0] += " (not running)"
    lines += [f"  node {n.index}: {n.name} {n.fingerprint}" for n in nodes]
    if not up:
        return lines
    lines.append(f"{coord.online(wait=wait)} of {len(nodes)} registered node(s) online")
    args = ["ls", CONNECTION, "--format", "json"] + (["--run-id", run_id] if run_id else [])
    cp = flwr(args, coord.env, capture_output=True, timeout=wait)
    try:
        runs = json.loads(cp.stdout).get("runs", [])
    except json.JSONDecodeError:
        runs = []
    for r in runs:
        details = f" ({r['status-details']})" if r.get("status-details") else ""
        lines.append(f"run {r.get('run-id')}: {r.get('status')}{details}")
    return lines
