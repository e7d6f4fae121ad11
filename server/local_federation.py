"""The processes of a local Flower federation: a SuperLink and K SuperNodes on loopback.

:class:`Federation` is a consortium on one machine, composed of the consortium's
own steps: a coordinator folder (:class:`fedpriv.server.coordinator.Coordinator`:
CA, allow-list, the SuperLink and its registrations), one key per node
(:func:`fedpriv.server.hospital.keygen`), each SuperNode started from a
:class:`fedpriv.server.hospital.NodeSetup`, runs submitted and followed by
:mod:`fedpriv.server.coordinator_runs`. It watches and stops every process it
started (by PID). The launcher on top is :mod:`fedpriv.server.deploy`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fedpriv.server import node_keys
from fedpriv.server.coordinator import CONNECTION, SUPEREXEC_POLL, Coordinator
from fedpriv.server.coordinator_runs import follow_run, submit_resolved
from fedpriv.server.hospital import NodeSetup, early_failure, keygen
from fedpriv.server.launch import (
    BIN,
    StepTimeout,
    flwr,
    flwr_env,
    step_timeout,
)
from fedpriv.server.processes import ProcessTracker, _descendants, free_port, stop_trees
from fedpriv.server.tls import NodeKey, TlsFiles

from fedpriv import logs
from fedpriv.federation.settings import RunSettings

log = logs.get_logger(__name__)


class NodeFailed(RuntimeError):
    """A SuperNode stopped while the federation was coming up: its one line."""


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
    :meth:`stop_node` and :attr:`superlink`. ``wait``: how long each step may take
    (the SuperLink's health, registration, nodes online, each CLI call); default
    :func:`fedpriv.server.launch.step_timeout` of a 1800 s run and K.
    """

    def __init__(
        self,
        *,
        workdir: Path,
        num_clients: int,
        insecure: bool = False,
        data: list[Path] | None = None,
        eval_data: list[Path] | None = None,
        node_config: Mapping[int, Mapping[str, object]] | None = None,
        share_secret_key: bool = False,
        wait: float | None = None,
    ) -> None:
        self.workdir, self.num_clients, self.insecure = workdir, num_clients, insecure
        #: Each step's time (s): processes coming up, one CLI call, the final status.
        self.wait = step_timeout(1800.0, num_clients) if wait is None else wait
        #: Extra node-config per node index (its budget policy, its state-dir).
        self.node_config = dict(node_config or {})
        #: Whether the nodes get ``$FEDPRIV_SECRET_KEY`` (and ``allow-reproduction-key``):
        #: without, node processes never see the server's reproduction key.
        self.share_secret_key = share_secret_key
        #: Each node's own file (``data-path``), or ``None``: a bundled corpus's slice.
        self.data = data
        #: Each node's own held-out file (``eval-data-path``), or ``None``.
        self.eval_data = eval_data
        #: The coordinator's folder: CA, allow-list, SuperLink, results' pointers.
        self.coordinator = Coordinator.init(
            workdir / "coordinator", hosts=("127.0.0.1",), port=free_port(), days=30,
            insecure=insecure,
        )  # fmt: skip
        self.home, self.port = self.coordinator.home, self.coordinator.port
        self.env = self.coordinator.env
        self.tls: TlsFiles | None = None if insecure else self.coordinator.tls
        self.keys: list[NodeKey] = []
        if not insecure:  # each node's key, its public half on the allow-list
            for i in range(num_clients):
                key, _ = keygen(workdir / "keys" / f"node-{i}", f"node-{i}")
                self.coordinator.register(key.public, name=f"node-{i}")
                self.keys.append(key)
        self.superlink: subprocess.Popen | None = None
        self._link_tracker: ProcessTracker | None = None
        self.nodes: dict[int, Node] = {}
        #: The last run submitted (:meth:`run`).
        self.run_id: str | None = None

    # -- processes ------------------------------------------------------------
    def _popen(
        self,
        args: list[str],
        home: Path,
        name: str,
        extra_env: Mapping[str, str] | None = None,
        *,
        node: bool = False,
    ) -> subprocess.Popen:
        home.mkdir(parents=True, exist_ok=True)
        env = {
            **flwr_env(home),
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": SUPEREXEC_POLL,
            **(extra_env or {}),
        }
        if node:  # a SuperNode: the reproduction key only when asked (fedpriv.server.node_keys)
            env = node_keys.node_environment(env, share=self.share_secret_key)
        with open(self.workdir / f"{name}.log", "w") as logfile:  # the child keeps its copy
            return subprocess.Popen(
                args, env=env, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_superlink(self, *, timeout: float | None = None) -> None:
        """Start the SuperLink (:meth:`Coordinator.launch`: health, then every node's key
        registered), within ``timeout`` (default :attr:`wait`) for each step."""
        wait = self.wait if timeout is None else timeout
        self.superlink = self.coordinator.launch(bind="127.0.0.1", wait=wait, popen=self._popen)
        self._link_tracker = ProcessTracker(self.superlink.pid)
        log.info(f"SuperLink pid {self.superlink.pid} on 127.0.0.1:{self.port}")

    def start_node(
        self,
        index: int,
        *,
        key: Path | None = None,
        trust_ca: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Node:
        """Start SuperNode ``index`` (partition ``index`` of K) from its :class:`NodeSetup`.

        ``key`` overrides its authentication key (tests use an unregistered
        one); ``trust_ca=False`` starts it without the CA (tests); ``env``
        adds to its environment (e.g. its own ``FEDPRIV_DATA_DIR``).
        """
        setup = NodeSetup(
            superlink=f"127.0.0.1:{self.port}", index=index, nodes=self.num_clients,
            ca=None if self.tls is None or not trust_ca else self.tls.ca_cert,
            key=None if self.tls is None else (key or self.keys[index].private),
            data=None if self.data is None else self.data[index],
            eval_data=None if self.eval_data is None else self.eval_data[index],
            node_config={
                **self.node_config.get(index, {}),
                **node_keys.node_config(self.share_secret_key),
            },
            max_retries=3,
        )  # fmt: skip
        args = setup.command(port=free_port())
        args[0] = str(BIN / args[0])
        proc = self._popen(args, self.workdir / f"node-{index}", f"node-{index}", env, node=True)
        node = Node(index=index, proc=proc, tracker=ProcessTracker(proc.pid))
        self.nodes[index] = node
        return node

    def failed_node(self) -> str | None:
        """A started SuperNode that has exited, and why (:func:`early_failure`): one
        line naming it; ``None`` while all run."""
        for index, node in sorted(self.nodes.items()):
            why = early_failure(node.proc, self.workdir / f"node-{index}.log")
            if why is not None:
                return f"node {index}: {why}"
        return None

    def online(self) -> int:
        """How many SuperNodes the SuperLink reports online."""
        cp = flwr(
            ["supernode", "ls", CONNECTION, "--format", "json"],
            self.env,
            capture_output=True,
            timeout=self.wait,
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

    def wait_online(self, n: int, *, timeout: float | None = None, every: float = 3.0) -> None:
        """Return once the SuperLink reports ``n`` SuperNodes online (``flwr supernode ls``),
        within ``timeout`` (default :attr:`wait`).

        ``ls`` is asked as soon as ``n`` nodes logged their node id, and at the
        latest every ``every`` s (a CLI call takes seconds, so it is not asked
        in a tight loop); every wait has a deadline.
        """
        timeout = self.wait if timeout is None else timeout
        deadline = time.monotonic() + timeout
        asked = -float("inf")
        while True:
            if self.superlink is None or self.superlink.poll() is not None:
                raise RuntimeError("the SuperLink stopped while nodes were connecting")
            if (failed := self.failed_node()) is not None:
                raise NodeFailed(failed)
            if self._connected() >= n or time.monotonic() - asked >= every:
                asked = time.monotonic()
                if (k := self.online()) >= n:
                    break
            if time.monotonic() > deadline:
                raise StepTimeout(f"{k} of {n} SuperNodes online after {timeout:.0f} s")
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
        end, as ``fedpriv coordinator submit`` and ``follow`` do
        (:mod:`fedpriv.server.coordinator_runs`); returns the launcher's exit code (module
        docstring). ``run_id`` is set once it is submitted; ``hook`` and ``on_submit`` as
        in :func:`deploy`. The federation keeps running: several runs may follow one
        another on it."""
        self.run_id = submit_resolved(self.coordinator, settings, config, limit=timeout)
        where = settings.dataset if self.data is None else "the nodes' own files"
        log.info(
            f"run {self.run_id} submitted: {settings.method} on {where}, "
            f"K={settings.num_clients}, T={settings.rounds}, TLS and node authentication "
            f"{'off' if self.insecure else 'on'}"
        )
        if on_submit is not None:
            on_submit(self)
        code, _ = follow_run(
            self.coordinator, self.run_id, quiet=quiet,
            hook=None if hook is None else (lambda line: hook(self, line)),
            healthy=lambda: self.superlink is not None and self.superlink.poll() is None,
        )  # fmt: skip
        return code

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
