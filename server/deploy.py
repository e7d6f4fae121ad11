"""Run the fedpriv Flower App on a real federation: a SuperLink and K SuperNodes on loopback.

``python -m fedpriv.server.deploy [--num-clients K] [--set key=value ...]`` starts
Flower's deployment engine as separate processes, the same topology as
``docker-compose.yml``:

* **TLS** with a throwaway CA and server certificate (:mod:`fedpriv.server.tls`),
  **SuperNode authentication** with one EC key per node, registered in the
  SuperLink's allow-list with ``flwr supernode register``; ``--insecure``
  (plain HTTP, no authentication) exists only for debugging;
* one SuperNode per hospital with ``--node-config "partition-id=i
  num-partitions=K"``, its own ClientAppIo port and its own ``FLWR_HOME``;
  with ``--data FILE`` (once per node: K = the number of files) each node
  also gets ``data-path="FILE"`` and reads that file only, against the run's
  public ``schema``; the ServerApp gets no data path, and ``max-records`` (the
  public bound on records per node) must then be declared; every file is
  checked (there, readable, text or Parquet) before any process starts;
* the job: without ``--data`` the small demo :data:`SMALL_JOB` on a bundled
  corpus; with ``--data`` the method's own defaults, the job ``fedpriv run``
  fits in process (:data:`FILES_JOB`), so a deployment on the files releases
  a model of the in-process fit's quality;
* readiness by polling the SuperLink's ``/health`` and ``flwr supernode ls``
  (never a fixed sleep); every wait has a timeout, ``--timeout``'s and K's
  (:func:`fedpriv.server.launch.step_timeout`);
* ``flwr run . <connection>``, the run's log followed (nodes connected, round
  r of T, ε spent so far), its real status read with ``flwr ls``;
* shutdown of every process started, by PID: all SuperNodes together (one
  deadline, then SIGKILL), then the SuperLink (with their SuperExecs and
  ClientApps).

Exit code 0 if the run finished ``completed`` or ``degraded`` (its
``status.json``), 1 if it failed (raised, or too many rounds released
nothing), 2 if the federation could not be started or the SuperLink was lost.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedpriv.server import node_budgets, node_keys
from fedpriv.server.launch import (
    parse_set,
    resolve_run,
    result_line,
    settings_help,
    step_error,
    step_timeout,
)
from fedpriv.server.local_federation import Federation, superlink_command, supernode_command
from fedpriv.server.preflight import check_data_file

from fedpriv import logs
from fedpriv.atomic import point_latest
from fedpriv.data import DataError, SchemaError
from fedpriv.data.node import run_schema
from fedpriv.federation.settings import SettingError, run_size_range

__all__ = ["FILES_JOB", "SMALL_JOB", "Federation", "deploy", "main", "node_files",
           "superlink_command", "supernode_command"]  # fmt: skip

#: A deployed round starts a ClientApp process per message: ~26 s on 2 loaded cores
#: (BRFSS, K = 3), against ~0.4 s simulated, so the round timeout is the simulation's
#: 30 s × 4.
DEPLOYED_ROUND_TIMEOUT = 120.0
#: The small DP-boosting demo ``python -m fedpriv.server.deploy`` runs on a bundled corpus.
SMALL_JOB = {
    "dataset": "brfss",
    "num-clients": 3,
    "rounds": 5,
    "depth": 4,
    "epsilon": 2.0,
    "round-timeout": DEPLOYED_ROUND_TIMEOUT,
}
#: The job on the nodes' own files (``--data``): the method's defaults, as ``fedpriv
#: run`` fits them in process (boosting: T = 75, depth 5, ε = 2), only the deployed
#: round timeout added. The demo's T = 5, depth 4 released a model far below the
#: in-process fit of the same files (the README's three hospital files, scored on
#: fresh rows: AUC 0.70 ± 0.05 against 0.767 ± 0.010 over 10 fits; deployed at these
#: defaults, 0.772).
FILES_JOB = {"method": "boosting", "round-timeout": DEPLOYED_ROUND_TIMEOUT}
#: The run's time limit without ``--timeout``: this much for start-up and the rest,
#: plus each round's timeout (the demo: 2400 s; the files' job of T = 75: 3 h).
RUN_LIMIT_BASE = 1800.0


def run_limit(settings) -> float:
    """The default ``--timeout`` of a deployment (s): :data:`RUN_LIMIT_BASE` plus T ×
    ``round-timeout``, so a run progressing at its rounds' pace is never stopped."""
    return RUN_LIMIT_BASE + settings.rounds * settings.round_timeout


log = logs.get_logger(__name__)


def node_files(data: list[str | Path], overrides: Mapping, *, key: str = "--data") -> list[Path]:
    """The nodes' own files (absolute), checked before anything starts: K = their
    number agrees with any ``num-clients``, ``max-records`` is declared (a bound the
    server may not count from the files) and so is the files' schema (``schema``, or
    the ``dataset`` whose schema they follow), never the default corpus's by accident;
    the schema loads (a draft with placeholders left is refused here); every file is
    there, readable and text (or Parquet by suffix; ``key`` names them in the error)."""
    files = [Path(d).resolve() for d in data]
    k = overrides.get("num-clients")
    if k not in (None, "", len(files)):
        raise SettingError(
            f"num-clients must equal the number of --data files ({len(files)}); got {k!r}"
        )
    if overrides.get("max-records") in (None, ""):
        raise SettingError(
            "max-records must be declared (--set max-records=N, an integer in "
            f"{run_size_range('max_records')}: the public bound on records per node) for a run "
            "on --data files; got unset"
        )
    if overrides.get("schema") in (None, "") and overrides.get("dataset") in (None, ""):
        raise SettingError(
            "schema must be set for a run on --data files (--set schema=FILE.toml: the files' "
            "public schema; or --set dataset=NAME for a bundled corpus's export); got unset"
        )
    try:  # loaded now: a schema the nodes would refuse (e.g. a draft) starts no federation
        schema = run_schema(schema_setting(overrides), str(overrides.get("dataset") or ""))
    except (SchemaError, DataError) as exc:
        raise SettingError(str(exc)) from None
    return [check_data_file(f, key, encoding=schema.encoding) for f in files]


def job(data: list | None) -> dict:
    """The launcher's defaults: :data:`FILES_JOB` on the nodes' own files, else the demo."""
    return FILES_JOB if data else SMALL_JOB


def schema_setting(overrides: Mapping) -> str:
    """The run's ``schema`` value, a schema file's path made absolute (every process
    of the run, and its ``config.json``, names the same file)."""
    schema = str(overrides.get("schema") or "")
    return str(Path(schema).resolve()) if schema and Path(schema).is_file() else schema


def deploy(
    overrides: dict,
    *,
    insecure: bool = False,
    timeout: float | None = None,
    quiet: bool = False,
    workdir: Path | None = None,
    late_nodes: int = 0,
    late_delay: float = 0.0,
    node_env: Mapping[int, Mapping[str, str]] | None = None,
    hook: Callable[[Federation, str], None] | None = None,
    on_submit: Callable[[Federation], None] | None = None,
    data: list[str | Path] | None = None,
    eval_data: list[str | Path] | None = None,
    node_policy: Mapping[str, float] | None = None,
    node_state: str | Path | None = None,
    share_secret_key: bool = False,
) -> tuple[int, Path | None]:
    """Run one job on a fresh loopback federation; returns (exit code, result directory).

    ``late_nodes``: the last that many SuperNodes start only once the run's
    ServerApp process runs, plus ``late_delay`` s (the ServerApp waits up to
    ``node-wait-timeout`` for them). ``node_env``: extra environment per node
    index. ``hook`` sees every line of the run's log with the federation;
    ``on_submit`` gets the federation once the run is submitted, before any
    line is streamed (tests inject faults). ``data``: one file per node (K = their
    number), each node reading only its own; ``max-records`` must then be set.
    ``eval_data``: each node's held-out file, in the same order (DP federated
    evaluation, ``eval-epsilon``). ``node_policy``: every node's budget policy
    (node-config ``max-epsilon``, ``max-delta``, ``max-lifetime-epsilon``,
    ``max-lifetime-delta``; :mod:`fedpriv.privacy.node_budget`); ``node_state``: the
    folder under which node i keeps its ledger, ``node-i`` (node-config ``state-dir``).
    ``timeout``: the run's limit (default :func:`run_limit`); every launcher step
    waits :func:`fedpriv.server.launch.step_timeout` of it and K.
    ``share_secret_key``: the SuperNodes get ``$FEDPRIV_SECRET_KEY`` and
    ``allow-reproduction-key`` too (a bit-for-bit reproduction; :mod:`fedpriv.server.node_keys`);
    otherwise no node process sees it.
    """
    if not overrides.get("out-dir"):
        overrides = {**overrides, "out-dir": str((Path.cwd() / "results" / "deploy").resolve())}
    files = eval_files = None
    if data:
        files = node_files(data, overrides)
        overrides = {**overrides, "num-clients": len(files)}
        if overrides.get("schema"):
            overrides["schema"] = schema_setting(overrides)
    if eval_data:
        if files is None or len(eval_data) != len(files):
            raise SettingError(
                f"--eval-data must name one held-out file per --data file "
                f"({0 if files is None else len(files)}); got {len(eval_data)}"
            )
        eval_files = node_files(eval_data, overrides, key="--eval-data")
    settings, config = resolve_run(job(data), overrides)  # before anything starts
    K = settings.num_clients
    timeout = run_limit(settings) if timeout is None else timeout
    node_env = node_env or {}
    if not 0 <= late_nodes < K:
        raise ValueError(f"late_nodes must lie in [0, {K - 1}]; got {late_nodes}")
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    own = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="fedpriv-deploy-"))
    code = 2
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    fed = Federation(
        workdir=workdir, num_clients=K, insecure=insecure, data=files, eval_data=eval_files,
        node_config=node_budgets.node_configs(K, node_policy, node_state),
        share_secret_key=share_secret_key, wait=step_timeout(timeout, K),
    )  # fmt: skip
    no_late = threading.Event()

    def start_late_nodes() -> None:
        # After the ServerApp started (it then waits for them), however slow the
        # machine: not a fixed time after the submission.
        while not (no_late.is_set() or fed.serverapp_running()):
            no_late.wait(0.1)
        if not no_late.wait(late_delay):
            for i in range(K - late_nodes, K):
                fed.start_node(i, env=node_env.get(i, {}))

    late = threading.Thread(target=start_late_nodes, daemon=True)
    try:
        with fed:
            fed.start_superlink()
            if not insecure:
                fed.register(*range(K))
            for i in range(K - late_nodes):
                fed.start_node(i, env=node_env.get(i, {}))
            fed.wait_online(K - late_nodes)

            def submitted(fed: Federation) -> None:
                # The caller sees the federation as submitted before any late node
                # can start: on a loaded machine the ServerApp may already run.
                if on_submit is not None:
                    on_submit(fed)
                if late_nodes:
                    late.start()

            code = fed.run(
                settings, config, timeout=timeout, quiet=quiet, hook=hook, on_submit=submitted
            )
            no_late.set()
            if late_nodes:
                late.join(timeout=fed.wait)  # a node still starting is stopped with the rest
    except KeyboardInterrupt:
        log.warning("interrupted; stopping")
        code = 1
    except Exception as exc:  # a process could not be started or answered: report, clean up
        log.error("error: %s", step_error(exc, timeout))
        code = 2
    finally:
        no_late.set()
        signal.signal(signal.SIGTERM, previous)
        if own and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        elif code:
            log.info(f"logs kept in {workdir}")
    out = Path(settings.out_dir) / fed.run_id if fed.run_id else None
    if out is not None and out.is_dir():
        point_latest(settings.out_dir, fed.run_id)  # <out-dir>/latest: this run's folder
    return code, out


def main(argv: list[str] | None = None, **launch: Any) -> int:
    """The command line; ``launch``: further keyword arguments of :func:`deploy`
    (e.g. ``late_nodes``, ``on_submit``), for a caller that runs this command."""
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--num-clients", type=int, default=None, help="K SuperNodes (default 3)")
    ap.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="FILE",
        help="one node's own CSV/Parquet file (repeat: one SuperNode per file); needs "
        "--set max-records=N",
    )
    ap.add_argument(
        "--eval-data",
        action="append",
        default=[],
        metavar="FILE",
        help="one node's held-out file, in --data's order (repeat), for the DP federated "
        "evaluation (--set eval-epsilon=E)",
    )
    node_budgets.add_arguments(ap)
    node_keys.add_argument(ap)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out-dir", default=None, help="results directory (default ./results/deploy)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"the run's time limit in s (default {RUN_LIMIT_BASE:g} + rounds × round-timeout); "
        "each launcher step (start-up, a flwr CLI call) may take max(120, TIMEOUT/30) s "
        "+ 15 s per node",
    )
    ap.add_argument(
        "--insecure", action="store_true", help="debugging only: no TLS, no node authentication"
    )
    args = ap.parse_args(argv)
    logs.configure(tag="deploy")
    overrides = parse_set(args.set)
    if args.num_clients is not None:
        overrides["num-clients"] = args.num_clients
    if args.out_dir:
        overrides["out-dir"] = str(Path(args.out_dir).resolve())
    try:  # the run config is resolved and checked first, before any process starts
        policy = node_budgets.policy_of(args)
        code, out = deploy(
            overrides,
            insecure=args.insecure,
            timeout=args.timeout,
            data=args.data or None,
            eval_data=args.eval_data or None,
            node_policy=policy or None,
            node_state=args.node_state,
            share_secret_key=args.share_secret_key,
            **launch,
        )
    except SettingError as exc:  # one line, exit 2
        log.error("error: %s", exc)
        return 2
    if code == 0 and out is not None:
        timed = bool(overrides.get("timings"))  # round times only when asked (uncertified)
        print(
            result_line(
                out,
                "mean round {mean_round_seconds:.2f} s" if timed else "round trips {round_trips}",
            )
        )
    if args.node_state:  # what each hospital's own ledger says it has left
        K = len(args.data) or resolve_run(job(args.data), overrides)[0].num_clients
        for line in node_budgets.budget_lines(K, policy, args.node_state):
            print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
