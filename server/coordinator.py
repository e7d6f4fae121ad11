"""The coordinator's side of a consortium: a SuperLink, an allow-list, runs. No data row.

A :class:`Coordinator` is one folder (``fedpriv coordinator ... --dir DIR``)::

    DIR/coordinator.json   host names and port (init)
    DIR/tls/ca.crt         the consortium's CA certificate: every node gets a copy
    DIR/tls/server.pem     the SuperLink's certificate, for every host name of init
    DIR/tls/server.key     its private key (mode 0600; never leaves DIR)
    DIR/nodes.json         the allow-list: each node's name, index, fingerprint, key
    DIR/keys/NAME.pub      the registered public keys
    DIR/cli/config.toml    the Flower connection the commands use (FLWR_HOME)
    DIR/superlink.pid      the running SuperLink (PID and start time), its log beside
    DIR/results/RUN_ID/    what each run released (model, privacy card, status)

It holds public material, its own TLS key and the released results, never a
hospital's file or key. The SuperLink's state is in memory: :meth:`start`
registers every allow-listed key again. ``fedpriv deploy`` composes these same
steps on one machine (:class:`fedpriv.server.local_federation.Federation`).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from fedpriv.server.flower_commands import superlink_command
from fedpriv.server.hospital import read_public_key
from fedpriv.server.launch import (
    BIN,
    flwr,
    flwr_env,
    step_timeout,
    wait_healthy,
    write_connection,
)
from fedpriv.server.processes import ProcessTracker, _start_time
from fedpriv.server.tls import TlsFiles, fingerprint, write_tls

from fedpriv import logs
from fedpriv.atomic import write_json_atomic
from fedpriv.federation.settings import SettingError

log = logs.get_logger(__name__)

#: The Flower connection name of a coordinator's commands.
CONNECTION = "fedpriv"
#: SuperExecs pick up ServerApp tasks this often (Flower's default is 1 s).
SUPEREXEC_POLL = "0.1"


@dataclass(frozen=True, kw_only=True)
class Registered:
    """One allow-listed node: its name, index (partition id) and key."""

    name: str
    index: int
    fingerprint: str
    public_key: str


class Coordinator:
    """A coordinator's folder and the SuperLink it runs (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    # -- files ------------------------------------------------------------------
    @property
    def tls(self) -> TlsFiles:
        t = self.root / "tls"
        return TlsFiles(
            ca_cert=t / "ca.crt", server_cert=t / "server.pem", server_key=t / "server.key"
        )

    @property
    def home(self) -> Path:
        """The Flower CLI's home (its connection to this SuperLink)."""
        return self.root / "cli"

    @property
    def env(self) -> dict:
        return flwr_env(self.home)

    @property
    def results(self) -> Path:
        return self.root / "results"

    def settings(self) -> dict:
        """``coordinator.json``: host names and port; refused if :meth:`init` never ran."""
        path = self.root / "coordinator.json"
        if not path.is_file():
            raise SettingError(
                f"--dir {self.root}: not a coordinator folder (run `fedpriv coordinator init`)"
            )
        return json.loads(path.read_text())

    @property
    def port(self) -> int:
        return int(self.settings()["port"])

    @property
    def address(self) -> str:
        """HOST:PORT the nodes dial (the first host name of init)."""
        s = self.settings()
        return f"{s['hosts'][0]}:{s['port']}"

    @property
    def insecure(self) -> bool:
        """No TLS, no node authentication (the loopback launcher's ``--insecure``)."""
        return bool(self.settings().get("insecure", False))

    @classmethod
    def init(
        cls, root: Path, *, hosts: tuple[str, ...], port: int, days: int = 365,
        insecure: bool = False,
    ) -> Coordinator:  # fmt: skip
        """A new coordinator folder: CA, SuperLink certificate for ``hosts`` (and loopback),
        an empty allow-list, the CLI's connection. An existing folder is refused.
        ``insecure``: neither TLS nor node authentication (debugging only)."""
        self = cls(root)
        if (self.root / "coordinator.json").exists():
            raise SettingError(f"--dir {self.root}: a coordinator folder already; not overwritten")
        if not hosts:
            raise SettingError("--host must name the SuperLink's host (as the nodes dial it)")
        if not 0 < port < 65536:
            raise SettingError(f"--port must lie in [1, 65535]; got {port}")
        self.root.mkdir(parents=True, exist_ok=True)
        if not insecure:
            write_tls(self.root / "tls", extra_hosts=tuple(hosts), days=days)
        ca = None if insecure else self.tls.ca_cert
        write_connection(self.home, CONNECTION, f"127.0.0.1:{port}", ca_cert=ca)
        write_json_atomic(self.root / "nodes.json", [])
        write_json_atomic(
            self.root / "coordinator.json",
            {"hosts": list(hosts), "port": port, "insecure": insecure},
        )
        return self

    # -- the allow-list -------------------------------------------------------------
    def nodes(self) -> list[Registered]:
        self.settings()
        return [Registered(**n) for n in json.loads((self.root / "nodes.json").read_text())]

    def register(
        self, public_key: Path, *, name: str | None = None, rotate: bool = False
    ) -> Registered:
        """Add a node's public key to the allow-list (the next index, or with ``rotate``
        the named node's own, replacing its key); registered with a running SuperLink at
        once. A key or name already listed is refused."""
        line = read_public_key(public_key)
        fp = fingerprint(line)
        nodes = self.nodes()
        name = name or Path(public_key).stem
        if not name.replace("-", "").replace("_", "").isalnum():
            raise SettingError(f"--name must be letters, digits, - and _; got {name!r}")
        if any(n.fingerprint == fp for n in nodes):
            raise SettingError(f"{public_key}: key {fp} is registered already")
        same = [n for n in nodes if n.name == name]
        if same and not rotate:
            raise SettingError(f"--name {name} is registered already (--rotate replaces its key)")
        if rotate and not same:
            raise SettingError(f"--rotate: no node named {name!r} is registered")
        index = same[0].index if same else len(nodes)
        node = Registered(name=name, index=index, fingerprint=fp, public_key=line)
        keys = self.root / "keys"
        keys.mkdir(exist_ok=True)
        (keys / f"{name}.pub").write_text(line + "\n")
        rest = [n for n in nodes if n.name != name]
        listed = sorted([*rest, node], key=lambda n: n.index)
        write_json_atomic(self.root / "nodes.json", [vars(n) for n in listed])
        if self.running() or self.answers():
            self._flwr_register([node])
        return node

    def step(self) -> float:
        """Each step's time (s) without ``--timeout``: :func:`~fedpriv.server.launch.
        step_timeout` of a default run and the registered nodes (it grows with K)."""
        return step_timeout(1800.0, max(1, len(self.nodes())))

    def _flwr_register(self, nodes: list[Registered], *, wait: float | None = None) -> None:
        """``flwr supernode register`` for each node, all at once (one deadline, default
        :meth:`step`)."""
        wait = self.step() if wait is None else wait
        calls = {
            n.name: subprocess.Popen(
                [
                    str(BIN / "flwr"),
                    "supernode",
                    "register",
                    str(self.root / "keys" / f"{n.name}.pub"),
                    CONNECTION,
                    "--format",
                    "json",
                ],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in nodes
        }
        deadline = time.monotonic() + wait
        failed = []
        try:
            for name, call in calls.items():
                try:
                    out, err = call.communicate(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise TimeoutError(
                        f"registering {len(calls)} node keys took over {wait:.0f} s"
                    ) from None
                try:
                    ok = call.returncode == 0 and json.loads(out or "{}").get("success")
                except json.JSONDecodeError:
                    ok = False
                if not ok:
                    failed.append(f"{name}: {out.strip()} {err.strip()}")
        finally:
            for call in calls.values():
                if call.poll() is None:
                    call.kill()
                    call.wait()
        if failed:
            raise RuntimeError("registering " + "; ".join(failed))

    # -- the SuperLink ------------------------------------------------------------
    def superlink_command(self, *, bind: str) -> list[str]:
        args = superlink_command(host=bind, port=self.port, tls=None if self.insecure else self.tls)
        args[0] = str(BIN / args[0])
        return args

    def launch(
        self, *, bind: str = "0.0.0.0", wait: float | None = None, popen=None
    ) -> subprocess.Popen:
        """Start the SuperLink (its PID file written), wait for its health, register
        every allow-listed key; returns its process. Refused if one runs already.
        ``popen(args, home, name)``: how to start it (default: here, its log beside).
        ``wait``: each step's time (default :meth:`step`, growing with K)."""
        wait = self.step() if wait is None else wait
        if self.running():
            raise SettingError(f"a SuperLink of {self.root} runs already (pid {self._pid()[0]})")
        args = self.superlink_command(bind=bind)
        if popen is not None:
            proc = popen(args, self.root / "superlink", "superlink")
        else:
            home = self.root / "superlink"
            home.mkdir(parents=True, exist_ok=True)
            env = {**flwr_env(home), "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": SUPEREXEC_POLL}
            with open(self.root / "superlink.log", "w") as out:
                proc = subprocess.Popen(
                    args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
        write_json_atomic(
            self.root / "superlink.pid", {"pid": proc.pid, "start": _start_time(proc.pid)}
        )
        try:
            wait_healthy(self.port, proc, wait, ca_cert=None if self.insecure else self.tls.ca_cert)
            nodes = [] if self.insecure else self.nodes()
            if nodes:
                self._flwr_register(nodes, wait=wait)
        except BaseException:
            self.stop_process(proc, ProcessTracker(proc.pid))
            raise
        log.info("SuperLink pid %d on %s (port %d), %d node(s) registered",
                 proc.pid, bind, self.port, len(self.nodes()))  # fmt: skip
        return proc

    def _pid(self) -> tuple[int, str | None]:
        try:
            data = json.loads((self.root / "superlink.pid").read_text())
        except (OSError, json.JSONDecodeError):
            return 0, None
        return int(data.get("pid", 0)), data.get("start")

    def running(self) -> bool:
        """Whether this folder's SuperLink runs (its PID, with the same start time)."""
        pid, start = self._pid()
        return bool(pid) and start is not None and _start_time(pid) == start

    def answers(self, *, timeout: float = 2.0) -> bool:
        """Whether a SuperLink answers ``/health`` on this folder's port on 127.0.0.1 (one
        started here, or by another process on this host or in this container: its PID
        file need not be ours)."""
        import ssl
        import urllib.request

        scheme, context = "http", None
        if not self.insecure:
            scheme, context = "https", ssl.create_default_context(cafile=str(self.tls.ca_cert))
        try:
            url = f"{scheme}://127.0.0.1:{self.port}/health"
            with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
                return r.status == 200
        except OSError:
            return False

    def stop_process(
        self, proc: subprocess.Popen | None, tracker: ProcessTracker | None
    ) -> list[int]:
        """Stop a SuperLink started here (and its SuperExec, ServerApps); PIDs left."""
        from fedpriv.server.processes import stop_trees

        left = stop_trees([(tracker, proc)]) if proc is not None and tracker is not None else []
        (self.root / "superlink.pid").unlink(missing_ok=True)
        return left

    def stop(self, *, grace: float = 15.0) -> bool:
        """``fedpriv coordinator stop``: stop a detached SuperLink by its PID file (its
        process group: SuperExec and ServerApps too); whether one was running."""
        import os
        import signal

        if not self.running():
            (self.root / "superlink.pid").unlink(missing_ok=True)
            return False
        pid, _ = self._pid()
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.running():
            os.killpg(pid, signal.SIGKILL)
        (self.root / "superlink.pid").unlink(missing_ok=True)
        return True

    def online(self, *, wait: float | None = None) -> int:
        """How many SuperNodes the SuperLink reports online (``flwr supernode ls``)."""
        from fedpriv.server.local_federation import _count_online

        wait = self.step() if wait is None else wait
        cp = flwr(["supernode", "ls", CONNECTION, "--format", "json"], self.env,
                  capture_output=True, timeout=wait)  # fmt: skip
        try:
            return _count_online(json.loads(cp.stdout))
        except json.JSONDecodeError:
            return 0
