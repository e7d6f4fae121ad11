"""A node's rows for the ClientApp: its own file, else its slice of the run's data.

Kept apart from :mod:`fedpriv.clients.app` (the message handlers): these read
the node's configuration (``data-path``, ``eval-data-path``) and cache the
loaded rows per run source, refusing (``too_many_records``) a file beyond the
declared public bound (:mod:`fedpriv.data.node`).
"""

from __future__ import annotations

from functools import lru_cache

from flwr.app import Context

from fedpriv.data.node import DATA_PATH, EVAL_DATA_PATH, DataSource, node_eval_rows, node_rows
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.settings import RunSettings


@lru_cache(maxsize=16)
def _source_data(source: DataSource, data_path: str, pid: int) -> ClientData:
    X, y = node_rows({DATA_PATH: data_path} if data_path else {}, source, pid)
    return ClientData(client_id=pid, X=X, y=y)


def _node_data(context: Context, s: RunSettings, pid: int) -> ClientData:
    """This node's rows: its own ``data-path`` file, else its slice of the run's data,
    refused (``too_many_records``) beyond the declared bound."""
    path = str(context.node_config.get(DATA_PATH, "") or "")
    return _source_data(DataSource.of(s), path, pid)


@lru_cache(maxsize=16)
def _source_eval_data(source: DataSource, data_path: str, eval_path: str, pid: int) -> ClientData:
    config = {k: v for k, v in ((DATA_PATH, data_path), (EVAL_DATA_PATH, eval_path)) if v}
    X, y = node_eval_rows(config, source, pid)
    return ClientData(client_id=pid, X=X, y=y)


def _node_eval_data(context: Context, s: RunSettings, pid: int) -> ClientData:
    """This node's held-out rows (DP federated evaluation): its ``eval-data-path`` file,
    else its slice of the run's test split (none for a node with only a ``data-path``)."""
    path = str(context.node_config.get(DATA_PATH, "") or "")
    eval_path = str(context.node_config.get(EVAL_DATA_PATH, "") or "")
    return _source_eval_data(DataSource.of(s), path, eval_path, pid)
