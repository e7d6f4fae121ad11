"""Run the fedpriv Flower App as a simulation of K hospitals, safely.

``python -m fedpriv.server.simulate [--set key=value ...] [--out-dir DIR]`` wraps
``flwr run . <connection>`` and adds what bare ``flwr run`` lacks in Flower
1.42:

* its own SuperLink (``flower-superlink --simulation``) on a free loopback
  port, in a private ``FLWR_HOME``, with telemetry, update checks and runtime
  dependency installation off; the built-in ``local`` connection would leave
  a detached SuperLink running after the command;
* the run's real status from ``flwr ls`` (``flwr run --stream`` exits 0 even
  when the run failed) and from the run's ``status.json`` (a run whose rounds
  released nothing still finishes): exit code 0 only for a run Flower
  finished ``completed`` whose own status is completed or degraded;
* shutdown of every process it started, by PID (SuperLink, SuperExec, the
  simulation and Ray), also on Ctrl-C;
* a Ray that failed to start (Flower says only "An error was encountered.
  Ending simulation.") named in one line with its likely causes
  (:func:`ray_start_failure`), exit 1.

Connections are written to ``$FLWR_HOME/config.toml``; ``pyproject.toml`` is
never touched.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from fedpriv.server import node_budgets, node_keys, tracking
from fedpriv.server.launch import (
    BIN,
    ROOT,
    default_config,
    exit_code,
    flwr,
    flwr_env,
    follow,
    parse_set,
    result_line,
    settings_help,
    step_error,
    step_timeout,
    submit,
    wait_healthy,
    write_connection,
)
from fedpriv.server.processes import ProcessTracker, free_port
from fedpriv.server.progress import RoundProgress
from fedpriv.server.resolve import ResolvedRun, resolve

from fedpriv import logs
from fedpriv.atomic import point_latest
from fedpriv.federation.presets import MAIN_JOB
from fedpriv.federation.settings import SettingError

CONNECTION = "fedpriv-sim"
#: The job ``python -m fedpriv.server.simulate`` runs without ``--preset``: the main job,
#: DP histogram boosting (``dp_gam``) at its tuned settings on Diabetes 130-US
#: (:data:`fedpriv.federation.presets.MAIN_JOB`). ``fedpriv run --flower`` passes its
#: own ``--preset`` (none by default: the defaults every entry point shares).
DEFAULT_PRESET = MAIN_JOB


def resolve_simulation(overrides: dict, preset: str | None = DEFAULT_PRESET) -> ResolvedRun:
    """The simulation's run (:func:`fedpriv.server.resolve.resolve`), validated before
    anything starts; ``out-dir`` defaults to ``./results/flower``."""
    if not overrides.get("out-dir"):
        overrides = {**overrides, "out-dir": str((Path.cwd() / "results" / "flower").resolve())}
    return resolve(overrides, preset=preset)


__all__ = ["ROOT", "default_config", "main", "ray_start_failure", "resolve_simulation", "simulate"]
log = logs.get_logger(__name__)

#: A traceback frame of Flower's Ray backend starting (``ray.init``, the actor pool):
#: where a Ray that cannot start fails. A ClientApp's error passes through its
#: ``process_message`` instead.
_RAY_START = re.compile(r"raybackend\.py\", line \d+, in (init_ray|build|__init__)\b")
#: Flower's Simulation Runtime logs the exception it crashed on ("occured": its spelling).
_CRASH = re.compile(r"An exception occurr?ed!! (.+)")
RAY_ADVICE = (
    "likely too little shared memory (/dev/shm, Ray's object store; in a container add "
    "--shm-size=2g) or free memory, a stale Ray session (`ray stop`), or $RAY_ADDRESS "
    "naming a cluster that is not there; free memory and retry, and see Flower's own log "
    "(fedpriv run --verbose, or python -m fedpriv.server.simulate)"
)


def ray_start_failure(lines: Iterable[str]) -> str | None:
    """Ray's own reason when a simulation's followed log shows Ray failing to start
    (a traceback through the Ray backend's start-up), ``""`` when it gives none;
    ``None`` when Ray did not fail to start."""
    failed, cause = False, ""
    for line in lines:
        failed = failed or bool(_RAY_START.search(line))
        if not cause and (m := _CRASH.search(line)) and "Simulation Runtime crashed" not in line:
            cause = m.group(1).strip()
    return cause if failed else None


def ray_failure_line(cause: str) -> str:
    """The launcher's one line for a Ray that failed to start."""
    said = f" ({cause})" if cause else ""
    return f"error: Ray, the simulation's engine, failed to start{said}: {RAY_ADVICE}"


class _RayWatch:
    """Keeps the followed lines :func:`ray_start_failure` reads (the others are not kept)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_line(self, line: str) -> None:
        if _RAY_START.search(line) or _CRASH.search(line):
            self.lines.append(line)


def simulate(
    overrides: dict,
    *,
    preset: str | None = DEFAULT_PRESET,
    timeout: float = 3600.0,
    quiet: bool = False,
    node_env: dict[str, str] | None = None,
    share_secret_key: bool = False,
) -> tuple[int, Path | None]:
    """Run one simulation of ``overrides`` over ``preset``; returns (exit code, result
    directory). ``node_env``: extra environment of the Flower processes (e.g. the nodes'
    budget policy).
    ``share_secret_key``: pass ``$FEDPRIV_SECRET_KEY`` on (a bit-for-bit reproduction);
    the virtual nodes share the server's environment, so without it neither gets the
    key, and with it the nodes' ``allow-reproduction-key`` is set
    (:mod:`fedpriv.server.node_keys`)."""
    run = resolve_simulation(overrides, preset)  # validated before anything starts
    settings, config = run.settings, run.run_config
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="fedpriv-flwr-home-"))
    port = free_port()
    env = node_keys.simulation_environment(
        {**flwr_env(home), **(node_env or {})}, share=share_secret_key
    )
    write_connection(home, CONNECTION, f"127.0.0.1:{port}", ca_cert=None)
    proc = subprocess.Popen(
        [
            str(BIN / "flower-superlink"),
            "--insecure",
            "--simulation",
            "--isolation",
            "subprocess",
            "--disable-runtime-dependency-installation",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-file",
            str(home / "superlink.log"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    tracker = ProcessTracker(proc.pid)
    wait = step_timeout(timeout, settings.num_clients)
    code, run_id = 2, None
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        wait_healthy(port, proc, timeout=wait)
        log.info(f"SuperLink pid {proc.pid} on 127.0.0.1:{port}; {settings.num_clients} SuperNodes")
        fed = f"num-supernodes={settings.num_clients} client-resources-num-cpus=1"
        run_id = submit(CONNECTION, env, config, wait=wait, extra=["--federation-config", fed])
        log.info("run %s submitted", run_id)
        ray = _RayWatch()
        with RoundProgress(bar=False if quiet else None) as progress:

            def on_line(line: str) -> None:
                ray.on_line(line)
                if not quiet:
                    progress.on_line(line)

            status, details = follow(
                run_id,
                CONNECTION,
                env,
                timeout=timeout,
                wait=wait,
                on_line=on_line,
                healthy=lambda: proc.poll() is None,
            )
        log.info(f"run {run_id}: {status} {details}".rstrip())
        code = exit_code(status, Path(settings.out_dir) / run_id)
        if code and (cause := ray_start_failure(ray.lines)) is not None:
            log.error("%s", ray_failure_line(cause))  # the last line: the run's real cause
            code = 1
    except KeyboardInterrupt:
        log.warning("interrupted; stopping")
        if run_id:
            flwr(["stop", run_id, CONNECTION], env, capture_output=True, timeout=wait)
        code = 1
    except Exception as exc:  # infrastructure failure: report and clean up
        log.error("error: %s", step_error(exc, timeout))
        code = 2
    finally:
        signal.signal(signal.SIGTERM, previous)
        left = tracker.stop_all(proc)
        if left:
            log.error("processes still alive after shutdown: %s", left)
            code = code or 2
        shutil.rmtree(home, ignore_errors=True)
    out = Path(settings.out_dir) / run_id if run_id else None
    if out is not None and out.is_dir():
        point_latest(settings.out_dir, run_id)  # <out-dir>/latest: this run's folder
    return code, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=settings_help(DEFAULT_PRESET),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run-config override, e.g. --set epsilon=1 --set dataset=brfss",
    )
    ap.add_argument("--out-dir", default=None, help="results directory (default ./results/flower)")
    ap.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        help="a named job whose settings --set overrides (default %(default)s; 'none': the "
        "defaults every entry point shares); listed below",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="the run's time limit in s (default %(default)g); each launcher step (start-up, "
        "a flwr CLI call) may take max(120, TIMEOUT/30) s + 15 s per node",
    )
    node_budgets.add_arguments(ap)
    node_keys.add_argument(ap)
    tracking.add_arguments(ap)
    args = ap.parse_args(argv)
    logs.configure(tag="simulate")
    overrides = parse_set(args.set)
    if args.out_dir:
        overrides["out-dir"] = str(Path(args.out_dir).resolve())
    try:  # the run config is resolved and checked first, before any process starts
        tracking.require(args.track)
        policy = node_budgets.policy_of(args)
        env = node_budgets.policy_environment(policy, args.node_state)
        code, out = simulate(
            overrides,
            preset=args.preset,
            timeout=args.timeout,
            node_env=env,
            share_secret_key=args.share_secret_key,
        )
    except SettingError as exc:  # one line, exit 2
        log.error("error: %s", exc)
        return 2
    tracking.track_folder(args.track, args.track_uri, out)
    if code == 0 and out is not None:
        print(result_line(out, "floats uploaded per client {mean_floats_uploaded_per_client:.0f}"))
    if args.node_state:  # what each hospital's own ledger says it has left
        k = resolve_simulation(overrides, args.preset).settings.num_clients
        for line in node_budgets.budget_lines(k, policy, args.node_state):
            print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
