"""Run the fedpriv Flower App as a simulation of K hospitals, safely.

``python -m server.simulate [--set key=value ...] [--out-dir DIR]`` wraps
``flwr run . <connection>`` and adds what bare ``flwr run`` lacks in Flower
1.42:

* its own SuperLink (``flower-superlink --simulation``) on a free loopback
  port, in a private ``FLWR_HOME``, with telemetry, update checks and runtime
  dependency installation off; the built-in ``local`` connection would leave
  a detached SuperLink running after the command;
* the run's real status from ``flwr ls`` (``flwr run --stream`` exits 0 even
  when the run failed); exit code 0 only for ``finished:completed``;
* shutdown of every process it started, by PID (SuperLink, SuperExec, the
  simulation and Ray), also on Ctrl-C.

Connections are written to ``$FLWR_HOME/config.toml``; ``pyproject.toml`` is
never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

from fedpriv.data import data_dir
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy.cache import cache_dir

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONNECTION = "fedpriv-sim"


def log(msg: str) -> None:
    print(f"[simulate] {msg}", file=sys.stderr, flush=True)


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
        self.snapshot()
        self._stop.set()
        self._thread.join(timeout=2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        deadline = time.monotonic() + 10  # SuperExec follows its --parent-pid
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        for p in self.alive():  # Ray agents can outlive a stopped run
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.3)
        return self.alive()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"flower-superlink not healthy after {timeout:.0f} s")


def default_config() -> dict:
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


def run_status(run_id: str, env: dict) -> tuple[str, str]:
    cp = flwr(
        ["ls", CONNECTION, "--run-id", run_id, "--format", "json"],
        env,
        capture_output=True,
        timeout=60,
    )
    data = json.loads(cp.stdout)
    if not data.get("success"):
        raise RuntimeError(f"flwr ls failed: {cp.stdout} {cp.stderr}")
    run = data["runs"][0]
    return run["status"], run.get("status-details", "")


def simulate(
    overrides: dict, *, timeout: float = 3600.0, quiet: bool = False
) -> tuple[int, Path | None]:
    """Run one simulation; returns (exit code, result directory)."""
    config = {**default_config(), **overrides}
    if not config.get("out-dir"):
        config["out-dir"] = str((Path.cwd() / "results" / "flower").resolve())
    settings = RunSettings.from_run_config(config)  # validates before anything starts
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="fedpriv-flwr-home-"))
    port = free_port()
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
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
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
    code, run_id, streamer = 2, None, None
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        wait_healthy(port, proc, timeout=60)
        log(f"SuperLink pid {proc.pid} on 127.0.0.1:{port}; {settings.num_clients} SuperNodes")
        run_config = " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())
        fed = f"num-supernodes={settings.num_clients} client-resources-num-cpus=1"
        cp = flwr(
            [
                "run",
                str(ROOT),
                CONNECTION,
                "--format",
                "json",
                "--federation-config",
                fed,
                "--run-config",
                run_config,
            ],
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
        run_id = str(submitted["run-id"])
        log(f"run {run_id} submitted")
        watchdog = threading.Timer(
            timeout,
            lambda: flwr(["stop", run_id, CONNECTION], env, capture_output=True, timeout=60),
        )
        watchdog.daemon = True
        watchdog.start()
        streamer = subprocess.Popen(
            [str(BIN / "flwr"), "log", run_id, CONNECTION, "--stream"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in streamer.stdout:
            if not quiet:
                sys.stdout.write(line)
        streamer.wait()
        watchdog.cancel()
        status, details = run_status(run_id, env)
        deadline = time.monotonic() + 60
        while not status.startswith("finished") and time.monotonic() < deadline:
            time.sleep(1)
            status, details = run_status(run_id, env)
        log(f"run {run_id}: {status} {details}".rstrip())
        code = 0 if status == "finished:completed" else 1
    except KeyboardInterrupt:
        log("interrupted; stopping")
        if run_id:
            flwr(["stop", run_id, CONNECTION], env, capture_output=True, timeout=60)
        code = 1
    except Exception as exc:  # infrastructure failure: report and clean up
        log(f"error: {exc}")
        code = 2
    finally:
        signal.signal(signal.SIGTERM, previous)
        if streamer is not None and streamer.poll() is None:
            streamer.kill()
        left = tracker.stop_all(proc)
        if left:
            log(f"processes still alive after shutdown: {left}")
            code = code or 2
        shutil.rmtree(home, ignore_errors=True)
    out = Path(settings.out_dir) / run_id if run_id else None
    return code, out


def _parse_set(items: list[str]) -> dict:
    overrides = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value; got {item!r}")
        try:
            overrides[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            overrides[key] = raw  # a bare string
    return overrides


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run-config override, e.g. --set epsilon=1 --set dataset=brfss",
    )
    ap.add_argument("--out-dir", default=None, help="results directory (default ./results/flower)")
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    overrides = _parse_set(args.set)
    if args.out_dir:
        overrides["out-dir"] = str(Path(args.out_dir).resolve())
    code, out = simulate(overrides, timeout=args.timeout)
    if code == 0 and out is not None:
        metrics = json.loads((out / "metrics.json").read_text())
        privacy = json.loads((out / "privacy.json").read_text())
        comm = json.loads((out / "communication.json").read_text())
        print(
            f"AUC {metrics['auc']:.4f} | ε spent {privacy.get('epsilon_pld', 'inf')} (PLD), "
            f"{privacy.get('epsilon_rdp', 'inf')} (RDP) | floats uploaded per client "
            f"{comm['mean_floats_uploaded_per_client']:.0f} | {out}"
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
