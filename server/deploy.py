"""Run the fedpriv Flower App on a real federation: a SuperLink and K SuperNodes on loopback.

``python -m server.deploy [--num-clients K] [--set key=value ...]`` starts
Flower's deployment engine as separate processes, the same topology as
``docker-compose.yml``:

* **TLS** with a throwaway CA and server certificate (:mod:`server.tls`),
  **SuperNode authentication** with one EC key per node, registered in the
  SuperLink's allow-list with ``flwr supernode register``; ``--insecure``
  (plain HTTP, no authentication) exists only for debugging;
* one SuperNode per hospital with ``--node-config "partition-id=i
  num-partitions=K"``, its own ClientAppIo port and its own ``FLWR_HOME``;
  with ``--data FILE`` (once per node: K = the number of files) each node
  also gets ``data-path="FILE"`` and reads that file only, against the run's
  public ``schema``; the ServerApp gets no data path, and ``max-records`` (the
  public bound on records per node) must then be declared;
* readiness by polling the SuperLink's ``/health`` and ``flwr supernode ls``
  (never a fixed sleep); every wait has a timeout;
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
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fedpriv import logs
from fedpriv.atomic import point_latest
from fedpriv.data import DataError, SchemaError
from fedpriv.data.node import run_schema
from fedpriv.federation.settings import RunSettings, SettingError
from server.launch import (
    BIN,
    ProcessTracker,
    _descendants,
    exit_code,
    flwr,
    flwr_env,
    follow,
    free_port,
    parse_set,
    resolve_run,
    result_line,
    settings_help,
    stop_trees,
    submit,
    wait_healthy,
    write_connection,
)
from server.progress import RoundProgress
from server.tls import NodeKey, TlsFiles, write_node_key, write_tls

CONNECTION = "fedpriv-deploy"
#: The small DP-boosting job ``python -m server.deploy`` runs by default. A deployed
#: round starts a ClientApp process per message: ~26 s on 2 loaded cores (BRFSS, K = 3),
#: against ~0.4 s simulated, so the round timeout is the simulation's 30 s × 4.
SMALL_JOB = {
    "dataset": "brfss",
    "num-clients": 3,
    "rounds": 5,
    "depth": 4,
    "epsilon": 2.0,
    "round-timeout": 120.0,
}
#: SuperExecs pick up ClientApp/ServerApp tasks this often (Flower's default is 1 s).
SUPEREXEC_POLL = "0.1"


log = logs.get_logger(__name__)


def superlink_command(*, host: str, port: int, tls: TlsFiles | None) -> list[str]:
    """The SuperLink's command line (the loopback launcher's and ``docker-compose.yml``'s).

    With ``tls`` it serves HTTPS and admits only registered SuperNodes;
    without, plain HTTP and anyone (debugging only).
    """
    args = ["flower-superlink", "--host", host, "--port", str(port)]
    if tls is None:
        return [*args, "--insecure"]
    return [
        *args,
        "--ssl-ca-certfile",
        str(tls.ca_cert),
        "--ssl-certfile",
        str(tls.server_cert),
        "--ssl-keyfile",
        str(tls.server_key),
        "--enable-supernode-auth",
    ]


def supernode_command(
    *,
    index: int,
    num_clients: int,
    superlink: str,
    host: str,
    port: int,
    ca_cert: Path | None,
    auth_key: Path | None,
    data_path: str | Path | None = None,
    eval_data_path: str | Path | None = None,
) -> list[str]:
    """SuperNode ``index``'s command line (loopback launcher and ``docker-compose.yml``).

    ``ca_cert=None`` and ``auth_key=None`` together mean ``--insecure``; one of
    them alone is a misconfiguration the tests use on purpose. ``data_path``:
    the node's own file (node-config ``data-path``, a quoted TOML string);
    ``eval_data_path`` its held-out file (``eval-data-path``).
    """
    node_config = f"partition-id={index} num-partitions={num_clients}"
    if data_path is not None:
        node_config += f" data-path={json.dumps(str(data_path))}"
    if eval_data_path is not None:
        node_config += f" eval-data-path={json.dumps(str(eval_data_path))}"
    args = [
        "flower-supernode",
        "--superlink",
        superlink,
        "--node-config",
        node_config,
        "--host",
        host,
        "--port",
        str(port),
        # A refused node gives up within seconds instead of retrying forever.
        "--max-retries",
        "3",
        "--max-wait-time",
        "20",
    ]
    if ca_cert is None and auth_key is None:
        return [*args, "--insecure"]
    if ca_cert is not None:
        args += ["--root-certificates", str(ca_cert)]
    if auth_key is not None:
        args += ["--auth-supernode-private-key", str(auth_key)]
    return args


@dataclass
class Node:
    """One SuperNode process started by :class:`Federation`."""

    index: int
    proc: subprocess.Popen
    tracker: ProcessTracker


class Federation:
    """A SuperLink and SuperNodes on 127.0.0.1, owned by this process.

    Use as a context manager: leaving it stops every process it started, by
    PID, SuperNodes first. Tests drive faults through :meth:`start_node`,
    :meth:`stop_node` and :attr:`superlink`.
    """

    def __init__(
        self,
        *,
        workdir: Path,
        num_clients: int,
        insecure: bool = False,
        data: list[Path] | None = None,
        eval_data: list[Path] | None = None,
    ) -> None:
        self.workdir, self.num_clients, self.insecure = workdir, num_clients, insecure
        #: Each node's own file (``data-path``), or ``None``: a bundled corpus's slice.
        self.data = data
        #: Each node's own held-out file (``eval-data-path``), or ``None``.
        self.eval_data = eval_data
        self.home = workdir / "cli"
        self.env = flwr_env(self.home)
        self.port = free_port()
        self.tls: TlsFiles | None = None if insecure else write_tls(workdir / "tls")
        self.keys: list[NodeKey] = (
            []
            if insecure
            else [write_node_key(workdir / "keys", f"node-{i}") for i in range(num_clients)]
        )
        write_connection(
            self.home,
            CONNECTION,
            f"127.0.0.1:{self.port}",
            ca_cert=None if self.tls is None else self.tls.ca_cert,
        )
        self.superlink: subprocess.Popen | None = None
        self._link_tracker: ProcessTracker | None = None
        self.nodes: dict[int, Node] = {}
        #: The last run submitted (:meth:`run`).
        self.run_id: str | None = None

    # -- processes ------------------------------------------------------------
    def _popen(
        self, args: list[str], home: Path, name: str, extra_env: Mapping[str, str] | None = None
    ) -> subprocess.Popen:
        home.mkdir(parents=True, exist_ok=True)
        env = {
            **flwr_env(home),
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": SUPEREXEC_POLL,
            **(extra_env or {}),
        }
        with open(self.workdir / f"{name}.log", "w") as logfile:  # the child keeps its copy
            return subprocess.Popen(
                args, env=env, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_superlink(self, *, timeout: float = 60.0) -> None:
        """Start the SuperLink and wait until its API answers ``/health``."""
        args = superlink_command(host="127.0.0.1", port=self.port, tls=self.tls)
        args[0] = str(BIN / args[0])
        self.superlink = self._popen(args, self.workdir / "superlink", "superlink")
        self._link_tracker = ProcessTracker(self.superlink.pid)
        wait_healthy(
            self.port,
            self.superlink,
            timeout,
            ca_cert=None if self.tls is None else self.tls.ca_cert,
        )
        log.info(f"SuperLink pid {self.superlink.pid} on 127.0.0.1:{self.port}")

    def register(self, *indices: int, timeout: float = 60.0) -> None:
        """Add the public keys of nodes ``indices`` to the SuperLink's allow-list.

        One ``flwr supernode register`` per node, all started together (each
        CLI call spends seconds starting Python): K nodes cost about one call.
        """
        calls = {
            i: subprocess.Popen(
                [
                    str(BIN / "flwr"),
                    "supernode",
                    "register",
                    str(self.keys[i].public),
                    CONNECTION,
                    "--format",
                    "json",
                ],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in indices
        }
        deadline = time.monotonic() + timeout
        failed = []
        try:
            for i, call in calls.items():
                out, err = call.communicate(timeout=max(0.0, deadline - time.monotonic()))
                try:
                    ok = call.returncode == 0 and json.loads(out or "{}").get("success")
                except json.JSONDecodeError:
                    ok = False
                if not ok:
                    failed.append(f"node {i}: {out.strip()} {err.strip()}")
        finally:
            for call in calls.values():  # on a timeout: no CLI call outlives the launcher
                if call.poll() is None:
                    call.kill()
                    call.wait()
        if failed:
            raise RuntimeError("registering " + "; ".join(failed))

    def start_node(
        self,
        index: int,
        *,
        key: Path | None = None,
        trust_ca: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Node:
        """Start SuperNode ``index`` (partition ``index`` of K).

        ``key`` overrides its authentication key (tests use an unregistered
        one); ``trust_ca=False`` starts it without the CA (tests); ``env``
        adds to its environment (e.g. its own ``FEDPRIV_DATA_DIR``).
        """
        port = free_port()
        args = supernode_command(
            index=index,
            num_clients=self.num_clients,
            superlink=f"127.0.0.1:{self.port}",
            host="127.0.0.1",
            port=port,
            ca_cert=None if self.tls is None or not trust_ca else self.tls.ca_cert,
            auth_key=None if self.tls is None else (key or self.keys[index].private),
            data_path=None if self.data is None else self.data[index],
            eval_data_path=None if self.eval_data is None else self.eval_data[index],
        )
        args[0] = str(BIN / args[0])
        proc = self._popen(args, self.workdir / f"node-{index}", f"node-{index}", env)
        node = Node(index=index, proc=proc, tracker=ProcessTracker(proc.pid))
        self.nodes[index] = node
        return node

    def online(self) -> int:
        """How many SuperNodes the SuperLink reports online."""
        cp = flwr(
            ["supernode", "ls", CONNECTION, "--format", "json"],
            self.env,
            capture_output=True,
            timeout=60,
        )
        try:
            data = json.loads(cp.stdout)
        except json.JSONDecodeError:
            return 0
        return _count_online(data)

    def _connected(self) -> int:
        """How many started SuperNodes logged their node id (Flower logs it once the
        SuperLink accepted the node): a hint when to ask, never the answer."""
        n = 0
        for index in self.nodes:
            try:
                n += "SuperNode ID:" in (self.workdir / f"node-{index}.log").read_text()
            except OSError:
                pass
        return n

    def wait_online(self, n: int, *, timeout: float = 120.0, every: float = 3.0) -> None:
        """Return once the SuperLink reports ``n`` SuperNodes online (``flwr supernode ls``).

        ``ls`` is asked as soon as ``n`` nodes logged their node id, and at the
        latest every ``every`` s (a CLI call takes seconds, so it is not asked
        in a tight loop); every wait has a deadline.
        """
        deadline = time.monotonic() + timeout
        asked = -float("inf")
        while True:
            if self.superlink is None or self.superlink.poll() is not None:
                raise RuntimeError("the SuperLink stopped while nodes were connecting")
            if self._connected() >= n or time.monotonic() - asked >= every:
                asked = time.monotonic()
                if (k := self.online()) >= n:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{k} of {n} SuperNodes online after {timeout:.0f} s")
            time.sleep(0.1)
        log.info(f"{n} SuperNodes online")

    def serverapp_running(self) -> bool:
        """Whether a ServerApp process (``flwr-serverapp``, started by the SuperLink's
        SuperExec when a run is submitted) runs under the SuperLink."""
        if self.superlink is None:
            return False
        for pid in _descendants(self.superlink.pid):
            try:
                if b"flwr-serverapp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass  # gone meanwhile
        return False

    def run(
        self,
        settings: RunSettings,
        config: dict,
        *,
        timeout: float = 1800.0,
        quiet: bool = False,
        hook: Callable[[Federation, str], None] | None = None,
        on_submit: Callable[[Federation], None] | None = None,
    ) -> int:
        """Submit one run (its resolved ``settings`` and ``config``) and follow it to its
        end; returns the launcher's exit code (module docstring). ``run_id`` is set once
        it is submitted; ``hook`` and ``on_submit`` as in :func:`deploy`. The federation
        keeps running: several runs may follow one another on it."""
        self.run_id = submit(CONNECTION, self.env, config)
        where = settings.dataset if self.data is None else "the nodes' own files"
        log.info(
            f"run {self.run_id} submitted: {settings.method} on {where}, "
            f"K={settings.num_clients}, T={settings.rounds}, TLS and node authentication "
            f"{'off' if self.insecure else 'on'}"
        )
        if on_submit is not None:
            on_submit(self)
        progress = RoundProgress(bar=False if quiet else None)

        def on_line(line: str) -> None:
            if not quiet and ("[fedpriv]" in line or "ERROR" in line):
                progress.on_line(line)
            if hook is not None:
                hook(self, line)

        with progress:
            status, details = follow(
                self.run_id,
                CONNECTION,
                self.env,
                timeout=timeout,
                on_line=on_line,
                healthy=lambda: self.superlink is not None and self.superlink.poll() is None,
            )
        log.info(f"run {self.run_id}: {status} {details}".rstrip())
        return exit_code(status, Path(settings.out_dir) / self.run_id)

    def stop_node(self, index: int, *, kill: bool = False) -> None:
        """Stop one SuperNode and its ClientApps (``kill``: SIGKILL at once, a crash)."""
        node = self.nodes.pop(index)
        if kill:
            node.tracker.snapshot()
            node.proc.kill()
        node.tracker.stop_all(node.proc)

    def stop(self) -> list[int]:
        """Stop every process started: all SuperNodes together, then the SuperLink.

        Returns PIDs still alive (none)."""
        left = stop_trees([(node.tracker, node.proc) for node in self.nodes.values()])
        self.nodes.clear()
        if self.superlink is not None and self._link_tracker is not None:
            left += stop_trees([(self._link_tracker, self.superlink)])
        return left

    def __enter__(self) -> Federation:
        return self

    def __exit__(self, *exc) -> None:
        left = self.stop()
        if left:
            log.error(f"processes still alive after shutdown: {left}")


def _count_online(data) -> int:
    # ``flwr supernode ls --format json`` lists nodes with a "status" field.
    if isinstance(data, dict):
        own = 1 if data.get("status") == "online" else 0
        return own + sum(_count_online(v) for v in data.values())
    if isinstance(data, list):
        return sum(_count_online(v) for v in data)
    return 0


def node_files(data: list[str | Path], overrides: Mapping) -> list[Path]:
    """The nodes' own files (absolute), checked before anything starts: K = their
    number agrees with any ``num-clients``, ``max-records`` is declared (a bound the
    server may not count from the files) and so is the files' schema (``schema``, or
    the ``dataset`` whose schema they follow), never the default corpus's by accident;
    the schema loads (a draft with placeholders left is refused here)."""
    files = [Path(d).resolve() for d in data]
    k = overrides.get("num-clients")
    if k not in (None, "", len(files)):
        raise SettingError(
            f"num-clients must equal the number of --data files ({len(files)}); got {k!r}"
        )
    if overrides.get("max-records") in (None, ""):
        raise SettingError(
            "max-records must be declared (--set max-records=N, an integer in [1, inf): "
            "the public bound on records per node) for a run on --data files; got unset"
        )
    if overrides.get("schema") in (None, "") and overrides.get("dataset") in (None, ""):
        raise SettingError(
            "schema must be set for a run on --data files (--set schema=FILE.toml: the files' "
            "public schema; or --set dataset=NAME for a bundled corpus's export); got unset"
        )
    try:  # loaded now: a schema the nodes would refuse (e.g. a draft) starts no federation
        run_schema(schema_setting(overrides), str(overrides.get("dataset") or ""))
    except (SchemaError, DataError) as exc:
        raise SettingError(str(exc)) from None
    return files


def schema_setting(overrides: Mapping) -> str:
    """The run's ``schema`` value, a schema file's path made absolute (every process
    of the run, and its ``config.json``, names the same file)."""
    schema = str(overrides.get("schema") or "")
    return str(Path(schema).resolve()) if schema and Path(schema).is_file() else schema


def deploy(
    overrides: dict,
    *,
    insecure: bool = False,
    timeout: float = 1800.0,
    quiet: bool = False,
    workdir: Path | None = None,
    late_nodes: int = 0,
    late_delay: float = 0.0,
    node_env: Mapping[int, Mapping[str, str]] | None = None,
    hook: Callable[[Federation, str], None] | None = None,
    on_submit: Callable[[Federation], None] | None = None,
    data: list[str | Path] | None = None,
    eval_data: list[str | Path] | None = None,
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
    evaluation, ``eval-epsilon``).
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
        eval_files = [Path(d).resolve() for d in eval_data]
        if files is None or len(eval_files) != len(files):
            raise SettingError(
                f"--eval-data must name one held-out file per --data file "
                f"({0 if files is None else len(files)}); got {len(eval_files)}"
            )
    settings, config = resolve_run(SMALL_JOB, overrides)  # before anything starts
    K = settings.num_clients
    node_env = node_env or {}
    if not 0 <= late_nodes < K:
        raise ValueError(f"late_nodes must lie in [0, {K - 1}]; got {late_nodes}")
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    own = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="fedpriv-deploy-"))
    code = 2
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    fed = Federation(
        workdir=workdir, num_clients=K, insecure=insecure, data=files, eval_data=eval_files
    )
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
                if late_nodes:
                    late.start()
                if on_submit is not None:
                    on_submit(fed)

            code = fed.run(
                settings, config, timeout=timeout, quiet=quiet, hook=hook, on_submit=submitted
            )
            no_late.set()
            if late_nodes:
                late.join(timeout=60)  # a node still starting is stopped with the rest
    except KeyboardInterrupt:
        log.warning("interrupted; stopping")
        code = 1
    except Exception as exc:  # a process could not be started or answered: report, clean up
        log.error(f"error: {exc}")
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


def main(argv: list[str] | None = None) -> int:
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
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out-dir", default=None, help="results directory (default ./results/deploy)")
    ap.add_argument("--timeout", type=float, default=1800.0)
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
        code, out = deploy(
            overrides,
            insecure=args.insecure,
            timeout=args.timeout,
            data=args.data or None,
            eval_data=args.eval_data or None,
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
    return code


if __name__ == "__main__":
    sys.exit(main())
