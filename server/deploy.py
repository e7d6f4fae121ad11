"""Run the fedpriv Flower App on a real federation: a SuperLink and K SuperNodes on loopback.

``python -m fedpriv.server.deploy [--num-clients K] [--set key=value ...]`` starts
Flower's deployment engine as separate processes, a consortium on one machine
composed of the consortium's own steps (``fedpriv coordinator``, ``fedpriv node``;
``docker-compose.yml`` runs the same commands in containers):

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
* the job: a preset (``--preset``, :mod:`fedpriv.federation.presets`), resolved as
  every entry point resolves one (:func:`fedpriv.server.resolve.resolve`): without
  ``--data`` the small demo ``deploy-demo`` (:data:`SMALL_JOB`) on a bundled corpus;
  with ``--data`` the method's own defaults, the job ``fedpriv run`` fits in process
  (``deploy-files``, :data:`FILES_JOB`), so a deployment on the files releases a
  model of the in-process fit's quality;
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

from fedpriv.server import node_budgets, node_keys, tracking
from fedpriv.server.coordinator_runs import (
    RUN_LIMIT_BASE,
    check_file_job,
    run_limit,
    schema_setting,
)
from fedpriv.server.flower_commands import superlink_command, supernode_command
from fedpriv.server.launch import (
    parse_set,
    result_line,
    settings_help,
    step_error,
    step_timeout,
)
from fedpriv.server.local_federation import Federation
from fedpriv.server.preflight import check_data_file
from fedpriv.server.resolve import resolve

from fedpriv import logs
from fedpriv.atomic import point_latest
from fedpriv.federation.presets import DEPLOY_DEMO, DEPLOY_FILES, get_preset
from fedpriv.federation.settings import SettingError

__all__ = ["FILES_JOB", "SMALL_JOB", "Federation", "deploy", "main", "node_files",
           "superlink_command", "supernode_command"]  # fmt: skip

#: The small DP-boosting demo ``python -m fedpriv.server.deploy`` runs on a bundled corpus
#: (preset ``deploy-demo``: BRFSS, K = 3, T = 5 of depth 4, ε = 2).
SMALL_JOB = dict(get_preset(DEPLOY_DEMO).values)
#: The job on the nodes' own files (``--data``; preset ``deploy-files``): the method's
#: defaults, as ``fedpriv run`` fits them in process, the deployed round timeout added.
FILES_JOB = dict(get_preset(DEPLOY_FILES).values)
log = logs.get_logger(__name__)


def node_files(data: list[str | Path], overrides: Mapping, *, key: str = "--data") -> list[Path]:
    """The nodes' own files (absolute), checked before anything starts: K = their
    number agrees with any ``num-clients``, the job is one a node's own file can run
    (:func:`check_file_job`); every file is there, readable and text (or Parquet by
    suffix; ``key`` names them in the error)."""
    files = [Path(d).resolve() for d in data]
    k = overrides.get("num-clients")
    if k not in (None, "", len(files)):
        raise SettingError(
            f"num-clients must equal the number of --data files ({len(files)}); got {k!r}"
        )
    schema = check_file_job(overrides, what="a run on --data files")
    return [check_data_file(f, key, encoding=schema.encoding) for f in files]


def job(data: list | None) -> str:
    """The launcher's default preset: ``deploy-files`` on the nodes' own files, else the
    demo ``deploy-demo`` (:mod:`fedpriv.federation.presets`)."""
    return DEPLOY_FILES if data else DEPLOY_DEMO


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
    preset: str | None = None,
) -> tuple[int, Path | None]:
    """Run one job on a fresh loopback federation; returns (exit code, result directory).

    ``preset``: the job's preset (:mod:`fedpriv.federation.presets`; ``None``: the
    launcher's, :func:`job`), ``overrides`` the user's settings over it.

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
    run = resolve(overrides, preset=job(data) if preset is None else preset)  # checked first
    settings, config = run.settings, run.run_config
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
            fed.start_superlink()  # every node's key registered
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
        epilog=settings_help(DEPLOY_DEMO),
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
    tracking.add_arguments(ap)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--preset",
        default=None,
        help=f"a named job whose settings --set overrides (default {DEPLOY_DEMO}, or "
        f"{DEPLOY_FILES} with --data; 'none': the defaults every entry point shares)",
    )
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
        tracking.require(args.track)
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
            preset=args.preset,
            **launch,
        )
    except SettingError as exc:  # one line, exit 2
        log.error("error: %s", exc)
        return 2
    tracking.track_folder(args.track, args.track_uri, out)
    if code == 0 and out is not None:
        timed = bool(overrides.get("timings"))  # round times only when asked (uncertified)
        print(
            result_line(
                out,
                "mean round {mean_round_seconds:.2f} s" if timed else "round trips {round_trips}",
            )
        )
    if args.node_state:  # what each hospital's own ledger says it has left
        preset = job(args.data) if args.preset is None else args.preset
        K = len(args.data) or resolve(overrides, preset=preset).settings.num_clients
        for line in node_budgets.budget_lines(K, policy, args.node_state):
            print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
