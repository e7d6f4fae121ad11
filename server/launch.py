"""Process and CLI plumbing shared by the simulation and deployment launchers.

Flower 1.42's CLI talks to a SuperLink through a *connection* written to
``$FLWR_HOME/config.toml`` (never ``pyproject.toml``). Helpers here start
processes in their own sessions and remember their trees so they can be
stopped by PID, wait for health endpoints instead of sleeping, submit a run,
follow its log and read its real status with ``flwr ls`` (``flwr run
--stream`` exits 0 even when a run failed), and the run's own status
(``status.json``: a run whose rounds released nothing still "finishes").
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fedpriv import logs
from fedpriv.data.node import DataSource, declared_max_records
from fedpriv.federation.limits import parse_overrides
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.federation.status import RunStatus, read_status

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
log = logs.get_logger(__name__)


def _descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                for k in map(int, kids):
                    if k not in out:
                        out.append(k)
                        stack.append(k)
        except OSError:
            pass
    return out


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class ProcessTracker:
    """Remembers (pid, start time) of a process tree so it can be stopped by PID later."""

    def __init__(self, root: int) -> None:
        self.root, self.known = root, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def snapshot(self) -> None:
        for p in [self.root, *_descendants(self.root)]:
            st = _start_time(p)
            if st is not None:
                self.known.setdefault(p, st)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.snapshot()
            self._stop.wait(0.5)

    def alive(self) -> list[int]:
        out = []
        for p, st in self.known.items():
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[19] == st and fields[0] != "Z":
                out.append(p)
        return out

    def stop_all(self, proc: subprocess.Popen) -> list[int]:
        """Stop ``proc`` and its tree; returns PIDs still alive (none)."""
        return stop_trees([(self, proc)])


def stop_trees(
    trees: list[tuple[ProcessTracker, subprocess.Popen]],
    *,
    grace: float = 15.0,
    follow: float = 10.0,
) -> list[int]:
    """Stop several process trees at once, by PID; returns PIDs still alive (none).

    Every root gets SIGTERM together and all share one ``grace`` deadline (then
    SIGKILL); then their descendants still alive (SuperExecs, ClientApps) get
    SIGTERM and share one ``follow`` deadline, then SIGKILL. Stopping the
    trees together costs the slowest one's shutdown, not the sum.
    """
    for tracker, _ in trees:
        tracker.snapshot()
        tracker._stop.set()
    for tracker, _ in trees:
        tracker._thread.join(timeout=2)
        tracker.snapshot()  # children started meanwhile
    for _, proc in trees:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _, proc in trees:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def alive() -> list[int]:
        return [p for tracker, _ in trees for p in tracker.alive()]

    # The roots are gone; their SuperExecs would notice within seconds (after
    # retrying their parent's API): ask them by PID now, with the same signal.
    for p in alive():
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + follow
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in alive():  # Ray agents can outlive a stopped run
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 2.0  # SIGKILL is asynchronous: wait until they are gone
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    raise RuntimeError(f"flower-superlink not healthy after {timeout:.0f} s")


def default_config() -> dict:
    """``[tool.flwr.app.config]``: every run-config key, ``""`` for its default."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"]["config"])


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    return repr(v)


def flwr(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "flwr"), *args], env=env, text=True, **kw)


def run_status(run_id: str, connection: str, env: dict) -> tuple[str, str]:
    """(status, details) of a run, e.g. ``("finished:completed", "")``, from ``flwr ls``."""
    cp = flwr(
        ["ls", connection, "--run-id", run_id, "--format", "json"],
        env,
        capture_output=True,
        timeout=60,
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


def submit(connection: str, env: dict, run_config: dict, *, extra: list[str] = ()) -> str:
    """``flwr run . <connection>``; returns the run id or raises with Flower's output."""
    rc = " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())
    cp = flwr(
        ["run", str(ROOT), connection, "--format", "json", *extra, "--run-config", rc],
        env,
        capture_output=True,
        timeout=300,
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
    on_line: Callable[[str], None],
    healthy: Callable[[], bool] = lambda: True,
) -> tuple[str, str]:
    """Stream the run's log to ``on_line`` until it ends; return its final (status, details).

    The run is stopped if it outlives ``timeout``; if ``healthy()`` turns false
    (e.g. the SuperLink died) following stops within about a second and
    ``("lost", ...)`` is returned.
    """
    stop = threading.Event()

    def watchdog() -> None:
        deadline = time.monotonic() + timeout
        while not stop.wait(1.0):
            if not healthy():
                streamer.kill()
                return
            if time.monotonic() > deadline:
                flwr(["stop", run_id, connection], env, capture_output=True, timeout=60)
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
        streamer.wait(timeout=30)
    finally:
        stop.set()
        if streamer.poll() is None:
            streamer.kill()
    if not healthy():
        return "lost", "the SuperLink stopped"
    status, details = run_status(run_id, connection, env)
    deadline = time.monotonic() + 60
    while not status.startswith("finished") and time.monotonic() < deadline:
        time.sleep(1)
        if not healthy():
            return "lost", "the SuperLink stopped"
        status, details = run_status(run_id, connection, env)
    return status, details


def resolve_run(defaults: dict, overrides: dict) -> tuple[RunSettings, dict]:
    """The run's settings and its complete run config, validated before anything starts.

    ``defaults`` are the launcher's own (e.g. a small job), applied only where
    the key belongs to the run's method; ``overrides`` are the user's, applied
    as given. Raises :class:`~fedpriv.federation.settings.SettingError` (one
    line naming the key, the value and the allowed range).
    """
    from fedpriv.methods import get_method

    method = overrides.get("method") or defaults.get("method") or RunSettings.method
    try:
        mine = set(get_method(str(method)).config_fields)
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    run_keys = set(RunSettings.run_keys())
    own = {k: v for k, v in defaults.items() if k.replace("-", "_") in run_keys | mine}
    settings = RunSettings.from_run_config({**default_config(), **own, **overrides})
    check_plan(settings)
    source = DataSource.of(settings)
    if settings.max_records is None and source.bundled:
        # The run config carries the public bound: the bundled corpus's largest client.
        bound = declared_max_records(settings.dataset, settings.num_clients, settings.split_seed)
        settings = dataclasses.replace(settings, max_records=bound)
    return settings, settings.to_run_config()


#: The calibration's names of a run's keys, for its errors in run-config terms.
_CALIBRATION_KEYS = {
    "target_epsilon": "epsilon",
    "target_delta": "delta",
    "sampling_probability": "sampling-rate",
}


def check_plan(settings: RunSettings) -> None:
    """Calibrate a Gaussian-rounds method's noise now, so that a plan no noise can
    certify (ε too large for the PLD's bounded size, q or δ too small) is refused
    before any process starts, not after the federation came up. Calibrations are
    cached: the ServerApp's own is then free. Other methods calibrate at start."""
    if not settings.private or settings.method_record.family != "gaussian-rounds":
        return
    from fedpriv.privacy.participation import calibrate_participation_noise_multiplier

    cfg = settings.config
    # A plugin's config may leave the accounting mode out: the calibration's default.
    mode = getattr(cfg, "participation_accounting", None)
    try:
        calibrate_participation_noise_multiplier(
            target_epsilon=settings.epsilon,
            target_delta=settings.delta,
            sampling_probability=cfg.sampling_rate,
            participation=settings.participation,
            steps=cfg.rounds,
            **({} if mode is None else {"accounting": mode}),
        )
    except ValueError as exc:
        text = str(exc)
        for theirs, ours in _CALIBRATION_KEYS.items():
            text = text.replace(theirs, ours)
        raise SettingError(text) from None


def settings_help(launcher_defaults: dict | None = None) -> str:
    """``--help``'s list of run-config keys and defaults, from the method registry;
    ``launcher_defaults`` (kebab-case keys): a launcher's own defaults, shown instead."""
    from dataclasses import fields as dc_fields

    from fedpriv.federation.settings import method_defaults
    from fedpriv.methods import methods

    run = RunSettings()
    own = launcher_defaults or {}
    lines = ["run-config keys (--set key=value; defaults in brackets):"]
    for f in dc_fields(RunSettings):
        if f.name != "config":
            key = f.name.replace("_", "-")
            default = getattr(run, f.name) if f.name != "delta" else "the method's"
            lines.append(f"  {key} [{own.get(key, default)}]")
    lines.append("methods (method=NAME) and their own keys:")
    for m in methods():
        lines.append(f"  {m.name}: {m.summary}; delta [{m.delta:g}]")
        keys = ", ".join(f"{k.replace('_', '-')} [{v}]" for k, v in method_defaults(m).items())
        lines.append(f"    {keys}")
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
    """The launchers' last line: AUC, ε by PLD and by RDP, the status and rounds released,
    ``detail``, the results folder.

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
    return (
        f"{auc} | ε spent {privacy.get('epsilon_pld', 'inf')} (PLD), "
        f"{privacy.get('epsilon_rdp', 'inf')} (RDP){rounds} | {detail.format(**comm)} | {out}"
    )
