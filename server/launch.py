"""Process and CLI plumbing shared by the simulation and deployment launchers.

Flower 1.42's CLI talks to a SuperLink through a *connection* written to
``$FLWR_HOME/config.toml`` (never ``pyproject.toml``). Helpers here (with
:mod:`fedpriv.server.processes`, which starts and stops process trees by PID, and
:mod:`fedpriv.server.preflight`, the checks before anything starts) wait for health
endpoints instead of sleeping, submit a run,
follow its log and read its real status with ``flwr ls`` (``flwr run
--stream`` exits 0 even when a run failed), and the run's own status
(``status.json``: a run whose rounds released nothing still "finishes").

Every wait of a launcher (a process coming up, a ``flwr`` CLI call, the run's
final status) is :func:`step_timeout` of its ``--timeout`` and K: none is a
fixed number of seconds a loaded machine or a large federation may outlast.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fedpriv.server.flower_project import default_config  # noqa: F401 (the launchers')

from fedpriv import logs
from fedpriv.federation.limits import parse_overrides
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.federation.status import RunStatus, read_status

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
log = logs.get_logger(__name__)


#: :func:`step_timeout`'s terms: at least this long (s), or this share of ``--timeout``,
#: plus this long per node (each node adds processes, CLI calls and load).
STEP_BASE, STEP_SHARE, STEP_PER_NODE = 120.0, 1 / 30, 15.0


def step_timeout(timeout: float, num_clients: int) -> float:
    """How long a launcher waits for one step (s): ``max(120, timeout / 30) + 15 K``,
    at most ``timeout``.

    A step is the SuperLink answering ``/health``, registering K node keys (K
    ``flwr supernode register`` at once), K SuperNodes online, one ``flwr`` CLI
    call (``ls``, ``stop``, ``supernode ls``), the submission, or the run's final
    status once its log ended. A larger ``--timeout`` (a loaded machine) lengthens
    them all; each node adds 15 s (K = 8 under a 1800 s limit: 240 s).
    """
    return min(float(timeout), max(STEP_BASE, timeout * STEP_SHARE) + STEP_PER_NODE * num_clients)


class StepTimeout(RuntimeError):
    """A launcher step outlived :func:`step_timeout` (a process not up, a CLI call)."""


def step_error(exc: BaseException, timeout: float) -> str:
    """A launcher's one line for the step that failed: a step that timed out says
    so, how long it had, and that ``--timeout`` lengthens every step."""
    if isinstance(exc, subprocess.TimeoutExpired):
        cmd = [Path(str(exc.cmd[0])).name, *map(str, exc.cmd[1:3])]
        exc = StepTimeout(f"`{' '.join(cmd)}` did not finish within {exc.timeout:.0f} s")
    if isinstance(exc, StepTimeout):
        return (
            f"{exc} (each launcher step may take max({STEP_BASE:.0f} s, timeout/30) + "
            f"{STEP_PER_NODE:.0f} s per node, here with --timeout {timeout:g}): on a loaded "
            "machine, or for many nodes, raise --timeout"
        )
    return str(exc)


def wait_healthy(
    port: int, proc: subprocess.Popen, timeout: float, *, ca_cert: Path | None = None
) -> None:
    """Poll the SuperLink's ``/health`` (HTTPS with ``ca_cert``) until it answers 200."""
    scheme, context = "http", None
    if ca_cert is not None:
        scheme, context = "https", ssl.create_default_context(cafile=str(ca_cert))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {proc.returncode}")
        try:
            url = f"{scheme}://127.0.0.1:{port}/health"
            with urllib.request.urlopen(url, timeout=0.5, context=context) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise StepTimeout(f"flower-superlink not healthy after {timeout:.0f} s")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    return repr(v)


def flwr(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "flwr"), *args], env=env, text=True, **kw)


def flower_run_state(run_id: str, connection: str, env: dict, *, wait: float) -> tuple[str, str]:
    """(status, details) of a run, e.g. ``("finished:completed", "")``, from ``flwr ls``
    (given ``wait`` s, :func:`step_timeout`)."""
    cp = flwr(
        ["ls", connection, "--run-id", run_id, "--format", "json"],
        env,
        capture_output=True,
        timeout=wait,
    )
    data = json.loads(cp.stdout)
    if not data.get("success"):
        raise RuntimeError(f"flwr ls failed: {cp.stdout} {cp.stderr}")
    run = data["runs"][0]
    return run["status"], run.get("status-details", "")


def exit_code(status: str, out: Path | None) -> int:
    """The launcher's exit code from Flower's ``status`` and the run's ``status.json`` in ``out``.

    0: Flower finished the run ``completed`` and the run says completed or
    degraded (its one line is logged, a warning when degraded); 1: either says
    failed, or the run wrote no status (it never got that far); 2: the
    SuperLink was lost (``status == "lost"``).
    """
    if status == "lost":
        return 2
    outcome = read_status(out) if out is not None else None
    if outcome is None:
        log.error("run %s: no %s/status.json: the ServerApp ended before writing it", status, out)
        return 1
    if outcome.status is RunStatus.COMPLETED:
        log.info("%s", outcome.line())
    else:
        (log.error if outcome.failed else log.warning)("%s", outcome.line())
    return 0 if status == "finished:completed" and not outcome.failed else 1


def flwr_env(home: Path) -> dict:
    """The environment every Flower process and CLI call gets: private home, nothing phoned."""
    from fedpriv.data import data_dir
    from fedpriv.privacy.cache import cache_dir

    env = dict(os.environ)
    env.update(
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_HOME=str(home),
        PATH=f"{BIN}:{env.get('PATH', '')}",
        # The app runs from an installed copy: point it at the data and cache.
        FEDPRIV_DATA_DIR=str(data_dir()),
        FEDPRIV_CACHE_DIR=str(cache_dir() or (home / "cache")),
    )
    return env


def write_connection(home: Path, name: str, address: str, *, ca_cert: Path | None) -> None:
    """``$FLWR_HOME/config.toml`` with one connection (TLS with ``ca_cert``, else insecure)."""
    home.mkdir(parents=True, exist_ok=True)
    auth = f'root-certificates = "{ca_cert.resolve()}"' if ca_cert else "insecure = true"
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = "{address}"\n{auth}\n'
    )


def submit(
    connection: str, env: dict, run_config: dict, *, wait: float, extra: list[str] = ()
) -> str:
    """``flwr run APP <connection>`` (given ``wait`` s), APP the generated Flower App
    (:func:`fedpriv.server.flower_project.app_dir`); returns the run id or raises with
    Flower's output."""
    from fedpriv.server.flower_project import app_dir

    rc = " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())
    cp = flwr(
        ["run", str(app_dir()), connection, "--format", "json", *extra, "--run-config", rc],
        env,
        capture_output=True,
        timeout=wait,
    )
    try:
        submitted = json.loads(cp.stdout)
    except json.JSONDecodeError:
        submitted = {}
    if cp.returncode != 0 or not submitted.get("success"):
        raise RuntimeError(f"submission failed: {cp.stdout.strip()} {cp.stderr.strip()}")
    return str(submitted["run-id"])


def follow(
    run_id: str,
    connection: str,
    env: dict,
    *,
    timeout: float,
    wait: float,
    on_line: Callable[[str], None],
    healthy: Callable[[], bool] = lambda: True,
) -> tuple[str, str]:
    """Stream the run's log to ``on_line`` until it ends; return its final (status, details).

    The run is stopped if it outlives ``timeout``; if ``healthy()`` turns false
    (e.g. the SuperLink died) following stops within about a second and
    ``("lost", ...)`` is returned. ``wait``: each CLI call's, and the final
    status's, time (:func:`step_timeout`).
    """
    stop = threading.Event()

    def watchdog() -> None:
        deadline = time.monotonic() + timeout
        while not stop.wait(1.0):
            if not healthy():
                streamer.kill()
                return
            if time.monotonic() > deadline:
                flwr(["stop", run_id, connection], env, capture_output=True, timeout=wait)
                return

    streamer = subprocess.Popen(
        [str(BIN / "flwr"), "log", run_id, connection, "--stream"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    guard = threading.Thread(target=watchdog, daemon=True)
    guard.start()
    try:
        for line in streamer.stdout:
            on_line(line)
        streamer.wait(timeout=wait)
    finally:
        stop.set()
        if streamer.poll() is None:
            streamer.kill()
    if not healthy():
        return "lost", "the SuperLink stopped"
    status, details = flower_run_state(run_id, connection, env, wait=wait)
    deadline = time.monotonic() + wait
    while not status.startswith("finished") and time.monotonic() < deadline:
        time.sleep(1)
        if not healthy():
            return "lost", "the SuperLink stopped"
        status, details = flower_run_state(run_id, connection, env, wait=wait)
    return status, details


def settings_help(preset: str | None = None) -> str:
    """``--help``'s list of run-config keys and defaults, from the method registry, and
    the presets (:mod:`fedpriv.federation.presets`); ``preset``: the launcher's default
    preset, whose values are shown for its method."""
    from dataclasses import fields as dc_fields

    from fedpriv.federation.presets import get_preset, presets
    from fedpriv.federation.settings import method_defaults
    from fedpriv.methods import methods

    run = RunSettings()
    chosen = get_preset(preset)
    own = {} if chosen is None else dict(chosen.values)
    lines = ["run-config keys (--set key=value; defaults in brackets):"]
    for f in dc_fields(RunSettings):
        if f.name != "config":
            key = f.name.replace("_", "-")
            default = getattr(run, f.name) if f.name != "delta" else "the method's"
            lines.append(f"  {key} [{own.get(key, default)}]")
    lines.append("methods (method=NAME) and their own keys:")
    for m in methods():
        lines.append(f"  {m.name}: {m.summary}; delta [{m.delta:g}]")
        mine = chosen.applied(m.name) if chosen is not None and chosen.method == m.name else {}
        keys = ", ".join(
            f"{k.replace('_', '-')} [{mine.get(k.replace('_', '-'), v)}]"
            for k, v in method_defaults(m).items()
        )
        lines.append(f"    {keys}")
    lines.append("presets (--preset NAME; 'none': no preset, each key at its own default):")
    for p in presets():
        values = ", ".join(f"{k} {v}" for k, v in p.values.items())
        lines.append(f"  {p.name}: {p.summary} ({values})")
    return "\n".join(lines)


def parse_set(items: list[str]) -> dict:
    """``--set`` items as run-config overrides
    (:func:`fedpriv.federation.limits.parse_overrides`); a malformed or empty one ends the
    launcher with its one-line message (exit 2)."""
    try:
        return parse_overrides(items)
    except SettingError as exc:
        log.error("error: %s", exc)
        raise SystemExit(2) from None


def result_line(out: Path, detail: str) -> str:
    """The launchers' last line: AUC, ε by both accountants (the certified figure
    first), the status and rounds released, ``detail``, the results folder.

    ``detail`` is formatted with the run's ``communication.json`` fields, e.g.
    ``"mean round {mean_round_seconds:.2f} s"``.
    """
    metrics = json.loads((out / "metrics.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    comm = json.loads((out / "communication.json").read_text())
    outcome = read_status(out)
    rounds = (
        ""
        if outcome is None
        else (
            f" | {outcome.status}: {outcome.rounds_released} of {outcome.rounds_planned} "
            "rounds released"
        )
    )
    auc = f"AUC {metrics['auc']:.4f}" if metrics.get("evaluated", True) else "AUC n/a"
    dp = metrics.get("dp_federated") or {}
    if dp.get("evaluated"):  # the nodes' held-out rows, through the ledger
        auc += f" | DP AUC {dp['auc']:.4f} ± {dp['auc_error']:.4f} (ε {dp['epsilon']:g})"
    from fedpriv.privacy.card import spent_text

    # The certified figure first (the smaller sound bound), as in process.
    return f"{auc} | {spent_text(privacy)}{rounds} | {detail.format(**comm)} | {out}"
