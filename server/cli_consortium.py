"""``fedpriv coordinator ...`` and ``fedpriv node keygen|start|status``: a consortium.

The coordinator (:mod:`fedpriv.server.coordinator`, :mod:`fedpriv.server.coordinator_runs`)
holds no data row; each hospital runs its own node on its own machine
(:mod:`fedpriv.server.hospital`). The how-to "Run a consortium" walks through both.
Errors of setting or file are one line and exit code 2.
"""

from __future__ import annotations

import signal
import sys
import time
import tomllib
from pathlib import Path

import click
from fedpriv.server.cli_node import Refused, node

DIR_OPTION = click.option(
    "--dir", "root", type=click.Path(file_okay=False, path_type=Path),
    default=Path("coordinator"), show_default=True, help="The coordinator's folder.",
)  # fmt: skip


def _settings(fn):
    """Run ``fn`` turning a setting error into one line, exit 2."""
    from fedpriv.federation.settings import SettingError

    try:
        return fn()
    except SettingError as exc:
        raise Refused(str(exc)) from None


def _coordinator(root: Path):
    from fedpriv.server.coordinator import Coordinator

    coord = Coordinator(root)
    _settings(coord.settings)
    return coord


@click.group()
def coordinator() -> None:
    """The coordinator's commands: CA, allow-list, SuperLink, runs (no data row)."""


@coordinator.command()
@click.option("--host", "hosts", multiple=True, required=True,
              help="A host name or address the nodes dial (repeat for several).")  # fmt: skip
@click.option("--port", type=int, default=9093, show_default=True, help="The SuperLink's port.")
@DIR_OPTION
def init(hosts: tuple[str, ...], port: int, root: Path) -> int:
    """Make the coordinator's folder: the consortium's CA and the SuperLink's certificate."""
    from fedpriv.server.coordinator import Coordinator

    coord = _settings(lambda: Coordinator.init(root, hosts=hosts, port=port))
    click.echo(f"coordinator folder {coord.root}: SuperLink {coord.address}")
    click.echo(f"give every node {coord.tls.ca_cert} (its --ca) and the address {coord.address}")
    return 0


@coordinator.command()
@click.argument("public_key", type=click.Path(path_type=Path))
@click.option("--name", default=None, help="The node's name [default: the file's stem].")
@click.option("--rotate", is_flag=True, help="Replace the named node's key (same index).")
@DIR_OPTION
def register(public_key: Path, name: str | None, rotate: bool, root: Path) -> int:
    """Put a node's public key (node.pub) on the allow-list."""
    coord = _coordinator(root)
    n = _settings(lambda: coord.register(public_key, name=name, rotate=rotate))
    click.echo(
        f"registered {n.name} as node {n.index} ({n.fingerprint}); its operator starts it "
        f"with --index {n.index} --nodes K (K: the consortium's number of nodes)"
    )
    return 0


@coordinator.command()
@click.option("--bind", default="0.0.0.0", show_default=True, help="The address to listen on.")
@click.option("--detach", is_flag=True, help="Return once it runs (stop: coordinator stop).")
@click.option("--timeout", type=float, default=None,
              help="How long start-up and registration may each take (s) [default: "
              "120 + 15 s per registered node].")  # fmt: skip
@DIR_OPTION
def start(bind: str, detach: bool, timeout: float, root: Path) -> int:
    """Start the SuperLink (TLS, node authentication) and register every allowed key."""
    from fedpriv.server.processes import ProcessTracker

    coord = _coordinator(root)
    proc = _settings(lambda: coord.launch(bind=bind, wait=timeout))
    click.echo(
        f"SuperLink running on {bind}:{coord.port} (pid {proc.pid}); log {root}/superlink.log"
    )
    if detach:
        return 0
    tracker, asked = ProcessTracker(proc.pid), []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _f: asked.append(signum))
    while not asked and proc.poll() is None:
        time.sleep(0.2)
    coord.stop_process(proc, tracker)
    return 0 if asked else 2


@coordinator.command()
@click.option("--config", "config_file", help="A TOML file of run-config keys (key = value).",
              type=click.Path(exists=True, dir_okay=False, path_type=Path))  # fmt: skip
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Run-config override.")
@click.option("--method", default=None, help="The method (run-config method).")
@click.option("--schema", type=click.Path(path_type=Path), default=None,
              help="The consortium's public schema TOML.")  # fmt: skip
@click.option("--epsilon", type=float, default=None, help="The run's ε.")
@click.option("--max-records", type=int, default=None, help="Public bound on rows per node.")
@click.option("--preset", default=None, help="A named job (default deploy-files).")
@DIR_OPTION
def submit(config_file, sets, method, schema, epsilon, max_records, preset, root: Path) -> int:
    """Submit a run to the consortium; prints its run id."""
    from fedpriv.server.coordinator_runs import submit_run

    from fedpriv.federation.limits import parse_overrides

    coord = _coordinator(root)
    overrides: dict = {}
    if config_file is not None:
        try:
            overrides.update(tomllib.loads(config_file.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise Refused(f"--config {config_file}: not valid TOML ({exc})") from None
    overrides.update(_settings(lambda: parse_overrides(list(sets))))
    given = {"method": method, "schema": schema, "epsilon": epsilon, "max-records": max_records}
    overrides.update({k: str(v) if k == "schema" else v for k, v in given.items() if v is not None})
    run_id, s = _settings(lambda: submit_run(coord, overrides, preset=preset))
    click.echo(f"submitted run {run_id}: {s.method}, K={s.num_clients}, ε={s.epsilon:g}")
    return 0


@coordinator.command()
@click.argument("run_id")
@click.option("--timeout", type=float, default=None,
              help="The run's time limit (s) [default: 1800 + T × round-timeout].")  # fmt: skip
@DIR_OPTION
def follow(run_id: str, timeout: float | None, root: Path) -> int:
    """Follow a run to its end: progress, its real status, AUC and ε."""
    from fedpriv.server.coordinator_runs import follow_run, result

    coord = _coordinator(root)
    code, out = _settings(lambda: follow_run(coord, run_id, timeout=timeout))
    click.echo(result(out))
    return code


@coordinator.command()
@click.argument("run_id", required=False)
@DIR_OPTION
def status(run_id: str | None, root: Path) -> int:
    """The SuperLink, the registered nodes (online or not) and the runs."""
    from fedpriv.server.coordinator_runs import status_lines

    for line in status_lines(_coordinator(root), run_id):
        click.echo(line)
    return 0


@coordinator.command()
@DIR_OPTION
def stop(root: Path) -> int:
    """Stop a SuperLink started with --detach (by its PID)."""
    stopped = _coordinator(root).stop()
    click.echo("SuperLink stopped" if stopped else "no SuperLink was running")
    return 0


# -- the hospital's side ------------------------------------------------------------
@node.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The node's key folder (node.key stays there).")  # fmt: skip
@click.option("--name", default="node", show_default=True, help="The key's comment.")
def keygen(out: Path, name: str) -> int:
    """Make this node's authentication key pair; print the public key to send."""
    from fedpriv.server.hospital import keygen as make

    key, fp = _settings(lambda: make(out, name))
    click.echo(key.public.read_text().strip())
    click.echo(f"fingerprint {fp}\nsend {key.public} to the coordinator; {key.private} stays here")
    return 0


@node.command("start")
@click.option(
    "--superlink", required=True, metavar="HOST:PORT", help="The coordinator's SuperLink."
)
@click.option("--ca", type=click.Path(path_type=Path), required=True, help="The consortium's CA.")
@click.option("--key", type=click.Path(path_type=Path), required=True,
              help="The node's key folder (node keygen --out).")  # fmt: skip
@click.option("--data", type=click.Path(path_type=Path), required=True, help="This node's file.")
@click.option("--schema", type=click.Path(path_type=Path), default=None,
              help="This node's copy of the public schema (other runs refused).")  # fmt: skip
@click.option("--policy", type=click.Path(path_type=Path), required=True,
              help="This node's budget policy TOML ([policy] table).")  # fmt: skip
@click.option("--state", type=click.Path(path_type=Path), required=True,
              help="This node's folder: ledger, audit log, SuperNode log.")  # fmt: skip
@click.option("--index", type=int, required=True, help="This node's index (coordinator register).")
@click.option("--nodes", type=int, required=True, help="The consortium's number of nodes K.")
@click.option("--eval-data", type=click.Path(path_type=Path), default=None,
              help="This node's held-out file (DP federated evaluation).")  # fmt: skip
@click.option("--allow-reproduction-key", is_flag=True,
              help="Accept $FEDPRIV_SECRET_KEY (a bit-for-bit reproduction; not certified "
              "under distributed noise).")  # fmt: skip
def start_node(superlink, ca, key, data, schema, policy, state, index, nodes, eval_data,
               allow_reproduction_key) -> int:  # fmt: skip
    """Run this hospital's node: dial the SuperLink, answer under its own policy."""
    from fedpriv.server.hospital import KEY_FILE, NodeSetup, run_node
    from fedpriv.server.launch import flwr_env
    from fedpriv.server.node_keys import node_config, node_environment
    from fedpriv.server.processes import free_port

    setup = NodeSetup(
        superlink=superlink, index=index, nodes=nodes, ca=ca, key=Path(key) / KEY_FILE,
        data=data, eval_data=eval_data, schema=schema, policy=policy, state=state,
        node_config=node_config(allow_reproduction_key), retry_for=600.0,
    )  # fmt: skip
    setup = _settings(setup.check)
    env = node_environment(flwr_env(setup.state / "flower"), share=allow_reproduction_key)
    return run_node(setup, log_file=setup.state / "supernode.log", env=env, port=free_port())


@node.command("status")
@click.option("--state", type=click.Path(path_type=Path), required=True, help="The node's folder.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable.")
def node_status(state: Path, as_json: bool) -> int:
    """What this node has answered and spent, and what its policy leaves."""
    from fedpriv.server.hospital import status_text

    click.echo(status_text(state, as_json))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(coordinator())
