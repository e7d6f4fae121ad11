"""A hospital's node, on its own machine: its key, its SuperNode, what it has spent.

``fedpriv node keygen`` makes the node's authentication key pair (:func:`keygen`):
the private key stays in the node's key folder (mode 0600) and is only ever read
by the node's own SuperNode; the public key and its fingerprint go to the
coordinator, who registers them (``fedpriv coordinator register``).

``fedpriv node start`` runs the node (:class:`NodeSetup`, :func:`start_process`,
:func:`run_node`): a Flower SuperNode that dials out to the coordinator's
SuperLink over TLS (trusting only ``--ca``) and authenticates with the node's
key. Its runtime API listens on 127.0.0.1 only, so the node opens no port to
the network. Its node-config names its own file (``data-path``), its own copy of
the consortium's public schema (``schema-path``: a run whose schema differs is
refused, :mod:`fedpriv.clients.node_rules`), its budget policy (``policy-file``)
and its state folder (``state-dir``: its ledger and audit log). Every file is
checked before the SuperNode starts; a SuperNode that Flower stops at once (a
CA it does not trust, a key the SuperLink does not know) is one line naming the
cause (:func:`diagnose`), exit code 2.

The loopback launcher (:class:`fedpriv.server.local_federation.Federation`) starts
its SuperNodes through the same :class:`NodeSetup`, so a one-machine deployment
and a consortium run the same command line.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fedpriv.server.flower_commands import supernode_command
from fedpriv.server.preflight import check_data_file
from fedpriv.server.processes import ProcessTracker, stop_trees
from fedpriv.server.tls import NodeKey, check_public_key, fingerprint, write_node_key

from fedpriv import logs
from fedpriv.federation.settings import SettingError

log = logs.get_logger(__name__)

#: The node's key files in its key folder.
KEY_FILE, PUBLIC_FILE = "node.key", "node.pub"
#: Node-config key of the node's own copy of the public schema.
SCHEMA_PATH = "schema-path"
#: Flower's SuperNode logs this once the SuperLink accepted it.
CONNECTED = "SuperNode ID:"

#: What a SuperNode's log says when Flower stops it at once, and what it means.
FAILURES = (
    ("Hostname mismatch", "the SuperLink's certificate does not name the host it dialled"),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "it does not trust the SuperLink's certificate (--ca is not the coordinator's ca.crt)",
    ),
    ("SSL/TLS handshake", "the TLS handshake with the SuperLink failed (check --ca)"),
    (
        "Failed to activate SuperNode",
        "the SuperLink refused its key: not registered (the coordinator runs "
        "`fedpriv coordinator register node.pub`)",
    ),
    ("Exit Code: 305", "it could not connect to the SuperLink"),
)


def diagnose(log_text: str) -> str | None:
    """The cause of a SuperNode's early exit, read from its log (``None``: unknown)."""
    for marker, cause in FAILURES:
        if marker in log_text:
            return cause
    return None


def keygen(out: Path, name: str = "node") -> tuple[NodeKey, str]:
    """The node's key pair in ``out`` (``node.key``, ``node.pub``) and the public key's
    fingerprint; an existing key is refused, never overwritten."""
    if (out / KEY_FILE).exists():
        raise SettingError(f"--out {out}: it holds a key already ({KEY_FILE}); not overwritten")
    key = write_node_key(out, name, stem=KEY_FILE)
    public = out / PUBLIC_FILE
    key.public.replace(public)  # node.key.pub -> node.pub
    return NodeKey(private=key.private, public=public), fingerprint(public.read_text())


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes: how a run and a node name the same schema."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class NodeSetup:
    """Everything ``fedpriv node start`` runs a node with (the loopback launcher too).

    ``superlink``: HOST:PORT of the coordinator's SuperLink; ``ca``: the consortium's
    CA certificate (``None``: no TLS, debugging only); ``key``: the node's private key
    file (``None`` with ``ca=None``); ``data``/``eval_data``: its own files (``None``:
    a simulated hospital's slice of a bundled corpus); ``schema``: its own copy of the
    public schema; ``policy``: its budget policy file; ``state``: its ledger's folder;
    ``index`` of ``nodes``: its partition id, as the coordinator registered it;
    ``node_config``: more node-config (the loopback launcher's per-node policy);
    ``retry_for``: how long (s) the SuperNode retries a lost connection.
    """

    superlink: str
    index: int
    nodes: int
    ca: Path | None = None
    key: Path | None = None
    data: Path | None = None
    eval_data: Path | None = None
    schema: Path | None = None
    policy: Path | None = None
    state: Path | None = None
    node_config: Mapping[str, object] | None = None
    retry_for: float = 20.0
    max_retries: int | None = None

    def check(self) -> NodeSetup:
        """Every setting and file checked before anything starts; returns the setup with
        absolute paths. Raises :class:`SettingError` naming the option."""
        from fedpriv.privacy.node_policy import PolicyFileError, load_policy_file

        host, _, port = self.superlink.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingError(f"--superlink must be HOST:PORT; got {self.superlink!r}")
        if not 2 <= self.nodes <= 10_000:
            raise SettingError(f"--nodes must lie in [2, 10000]; got {self.nodes}")
        if not 0 <= self.index < self.nodes:
            raise SettingError(f"--index must lie in [0, {self.nodes - 1}]; got {self.index}")
        for option, path in (("--ca", self.ca), ("--key", self.key), ("--schema", self.schema)):
            if path is not None and not Path(path).is_file():
                raise SettingError(f"{option} {path}: no such file")
        if self.ca is not None:
            _check_certificate(Path(self.ca))
        if self.key is not None and Path(self.key).stat().st_mode & 0o077:
            raise SettingError(
                f"--key {self.key}: readable by other users (chmod 600 it): a node's "
                "private key is its own"
            )
        if self.policy is not None:
            try:
                load_policy_file(self.policy)
            except PolicyFileError as exc:
                raise SettingError(f"--policy: {exc}") from None
        encoding = "utf-8"
        if self.schema is not None:
            from fedpriv.data import SchemaError
            from fedpriv.data.schema import Schema

            try:
                encoding = Schema.from_toml(Path(self.schema)).encoding
            except (SchemaError, OSError) as exc:
                raise SettingError(f"--schema {self.schema}: {exc}") from None
        data = (
            None if self.data is None else check_data_file(self.data, "--data", encoding=encoding)
        )
        held = self.eval_data
        held = None if held is None else check_data_file(held, "--eval-data", encoding=encoding)
        state = None
        if self.state is not None:
            state = Path(self.state).resolve()
            try:
                state.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SettingError(f"--state {self.state}: cannot be created ({exc})") from None

        def absolute(p: Path | None) -> Path | None:
            return None if p is None else Path(p).resolve()

        return NodeSetup(
            superlink=self.superlink, index=self.index, nodes=self.nodes,
            ca=absolute(self.ca), key=absolute(self.key), data=data, eval_data=held,
            schema=absolute(self.schema), policy=absolute(self.policy), state=state,
            node_config=self.node_config, retry_for=self.retry_for,
            max_retries=self.max_retries,
        )  # fmt: skip

    def config(self) -> dict[str, object]:
        """The node-config beyond partition and files: schema, policy, state, extras."""
        from fedpriv.privacy.node_budget import STATE_DIR
        from fedpriv.privacy.node_policy import POLICY_FILE

        out: dict[str, object] = dict(self.node_config or {})
        for key, path in ((SCHEMA_PATH, self.schema), (POLICY_FILE, self.policy)):
            if path is not None:
                out[key] = str(path)
        if self.state is not None:
            out[STATE_DIR] = str(self.state)
        return out

    def command(self, *, port: int) -> list[str]:
        """The SuperNode's command line; its runtime API on 127.0.0.1:``port``."""
        return supernode_command(
            index=self.index, num_clients=self.nodes, superlink=self.superlink,
            host="127.0.0.1", port=port, ca_cert=self.ca, auth_key=self.key,
            data_path=self.data, eval_data_path=self.eval_data, extra_config=self.config(),
            retry_for=self.retry_for, max_retries=self.max_retries,
        )  # fmt: skip


def _check_certificate(path: Path) -> None:
    from cryptography import x509

    try:
        x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError:
        raise SettingError(
            f"--ca {path}: not a PEM certificate (the coordinator's ca.crt)"
        ) from None


def read_public_key(path: Path) -> str:
    """A node's public key line from ``path``, checked (:class:`SettingError` naming it)."""
    try:
        return check_public_key(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingError(f"{path}: cannot be read ({exc})") from None
    except ValueError as exc:
        raise SettingError(f"{path}: {exc}") from None


def early_failure(proc: subprocess.Popen, log_file: Path) -> str | None:
    """If the SuperNode has exited: why (its log's cause, or its exit code); else ``None``."""
    if proc.poll() is None:
        return None
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        text = ""
    return diagnose(text) or f"its SuperNode exited with code {proc.returncode}"


def connected(log_file: Path) -> bool:
    """Whether the SuperNode logged its node id (the SuperLink accepted it)."""
    try:
        return CONNECTED in log_file.read_text(errors="replace")
    except OSError:
        return False


def run_node(setup: NodeSetup, *, log_file: Path, env: Mapping[str, str], port: int) -> int:
    """``fedpriv node start``: run the SuperNode until it stops or this process is asked
    to (SIGTERM, SIGINT); returns the exit code (0 stopped when asked, 2 refused or
    could not connect: one line naming the cause, 1 any other exit)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w") as out:
        proc = subprocess.Popen(
            setup.command(port=port), env=dict(env), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    tracker = ProcessTracker(proc.pid)
    asked = []

    def stop(signum, _frame) -> None:
        asked.append(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    said = False
    try:
        while not asked and proc.poll() is None:
            if not said and connected(log_file):
                log.info(
                    "node %d: connected to %s (log: %s)", setup.index, setup.superlink, log_file
                )
                said = True
            time.sleep(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stop_trees([(tracker, proc)])
    if asked:
        log.info("node %d: stopped", setup.index)
        return 0
    why = early_failure(proc, log_file)
    log.error("node %d: %s (log: %s)", setup.index, why, log_file)
    return 2 if diagnose(log_file.read_text(errors="replace")) else 1


def status_text(state: Path, as_json: bool = False) -> str:
    """``fedpriv node status``: the node's runs, spend and what its policy leaves, its
    audit log's check and any plan waiting for approval."""
    from fedpriv.server.cli_node import inspect_path

    from fedpriv.privacy.node_approval import list_pending

    text = inspect_path(Path(state), as_json)
    if as_json:
        return text
    pending = list_pending(state)
    return text + (f"\n{len(pending)} plan(s) waiting for approval (fedpriv node pending)"
                   if pending else "")  # fmt: skip
