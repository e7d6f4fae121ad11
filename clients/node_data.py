"""A node's rows for the ClientApp: its own file, else its slice of the run's data.

Kept apart from :mod:`fedpriv.clients.app` (the message handlers): these read
the node's configuration (``data-path``, ``eval-data-path``) and cache the
loaded rows per run source, refusing (``too_many_records``) a file beyond the
declared public bound (:mod:`fedpriv.data.node`).

Unit-level privacy (a schema ``unit_column``): the rows a node answers from are
bounded to ``max_records_per_unit`` per unit with the node's own secret key
(``context.state["private"]``), the same subset every round of the run. Before
the key exchange has made that key (its own check of the rows), a fresh key from
OS entropy bounds them: a valid bound either way, and never used for a reply.
"""

from __future__ import annotations

from functools import lru_cache

from flwr.app import Context

from fedpriv.data.node import (
    DATA_PATH,
    EVAL_DATA_PATH,
    DataSource,
    node_data,
    node_eval_data,
    run_schema,
)
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy.randomness import SecretKey


def _node_key(context: Context, s: RunSettings) -> SecretKey | None:
    """The key bounding this node's units: its secret key (the key exchange stores it),
    else fresh OS entropy; ``None`` without units (nothing to bound: one cache entry)."""
    if run_schema(s.schema, s.dataset).unit_column is None:
        return None
    if "private" in context.state:
        return SecretKey(bytes(context.state["private"]["key"]))
    return SecretKey.generate()


@lru_cache(maxsize=16)
def _source_data(
    source: DataSource, data_path: str, pid: int, key: SecretKey | None = None
) -> ClientData:
    key = SecretKey.generate() if key is None else key
    return node_data({DATA_PATH: data_path} if data_path else {}, source, pid, key)


def _node_data(context: Context, s: RunSettings, pid: int) -> ClientData:
    """This node's rows: its own ``data-path`` file, else its slice of the run's data,
    refused (``too_many_records``) beyond the declared bound; with units, bounded per
    unit with this node's key."""
    path = str(context.node_config.get(DATA_PATH, "") or "")
    return _source_data(DataSource.of(s), path, pid, _node_key(context, s))


@lru_cache(maxsize=16)
def _source_eval_data(
    source: DataSource, data_path: str, eval_path: str, pid: int, key: SecretKey | None = None
) -> ClientData:
    config = {k: v for k, v in ((DATA_PATH, data_path), (EVAL_DATA_PATH, eval_path)) if v}
    key = SecretKey.generate() if key is None else key
    return node_eval_data(config, source, pid, key)


def _node_eval_data(context: Context, s: RunSettings, pid: int) -> ClientData:
    """This node's held-out rows (DP federated evaluation): its ``eval-data-path`` file,
    else its slice of the run's test split (none for a node with only a ``data-path``);
    with units, bounded per unit with this node's key."""
    path = str(context.node_config.get(DATA_PATH, "") or "")
    eval_path = str(context.node_config.get(EVAL_DATA_PATH, "") or "")
    return _source_eval_data(DataSource.of(s), path, eval_path, pid, _node_key(context, s))
