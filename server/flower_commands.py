"""The command lines of Flower's SuperLink and SuperNodes, as fedpriv runs them.

:func:`superlink_command` and :func:`supernode_command` are used by the
coordinator's and the nodes' commands (:mod:`fedpriv.server.coordinator`,
:mod:`fedpriv.server.hospital`), which the loopback launcher and the containers of
``docker-compose.yml`` run. Pure functions of their arguments, kept apart from the
process management.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from fedpriv.server.tls import TlsFiles


def superlink_command(*, host: str, port: int, tls: TlsFiles | None) -> list[str]:
    """The SuperLink's command line (``fedpriv coordinator start``'s).

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
    extra_config: Mapping[str, object] | None = None,
    retry_for: float = 20.0,
    max_retries: int | None = 3,
) -> list[str]:
    """SuperNode ``index``'s command line (``fedpriv node start``'s).

    ``ca_cert=None`` and ``auth_key=None`` together mean ``--insecure``; one of
    them alone is a misconfiguration the tests use on purpose. ``data_path``:
    the node's own file (node-config ``data-path``, a quoted TOML string);
    ``eval_data_path`` its held-out file (``eval-data-path``). ``retry_for`` (s) and
    ``max_retries`` (``None``: no limit): how long a node retries a lost connection.
    """
    node_config = f"partition-id={index} num-partitions={num_clients}"
    if data_path is not None:
        node_config += f" data-path={json.dumps(str(data_path))}"
    if eval_data_path is not None:
        node_config += f" eval-data-path={json.dumps(str(eval_data_path))}"
    for k, v in (extra_config or {}).items():  # e.g. the node's budget policy and state-dir
        node_config += f" {k}={json.dumps(v)}"
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
    ]
    # A lost SuperLink is retried this long, not forever (a refused key or a CA the node
    # does not trust stops it at once: Flower's exit code 305).
    if max_retries is not None:
        args += ["--max-retries", str(max_retries)]
    args += ["--max-wait-time", f"{retry_for:g}"]
    if ca_cert is None and auth_key is None:
        return [*args, "--insecure"]
    if ca_cert is not None:
        args += ["--root-certificates", str(ca_cert)]
    if auth_key is not None:
        args += ["--auth-supernode-private-key", str(auth_key)]
    return args
