"""Node-local data: what one node reads, and the public facts the server may use instead.

A deployed node reads its own file (node-config ``data-path``: CSV, or Parquet
by suffix) against the run's public schema (run-config ``schema``: a bundled
schema name or a TOML path; default the ``dataset``'s). Without a
``data-path`` a node simulates a hospital: it takes its slice of a bundled
corpus, or of one CSV (run-config ``csv``) split by the schema's client
column or IID. :func:`node_rows` is that one code path; every failure is the
loaders' :class:`~fedpriv.data.DataError` with its code.

The server never opens a private row. It uses the schema (width, label set)
and a *declared* public bound on records per client, run-config
``max-records`` (:func:`record_bound`). For a bundled corpus the default
bound is :func:`declared_max_records`, the largest client's training rows of
that published corpus: public, because the corpus and its split are. For a
user file it must be declared; a node whose file holds more rows fails at the
key exchange with ``too_many_records`` (a fact about the bound, not a count).

A simulation on one CSV is scored on that file's test split
(:func:`csv_test_split`), as an in-process fit on it is.

Held-out rows (:func:`node_eval_rows`), for the DP federated evaluation: a
node's own ``eval-data-path`` file; in simulation, its slice of the test
split of the run's ``csv`` or bundled corpus; none for a node given only a
``data-path``. They obey the same declared bound.

Unit-level privacy (a schema ``unit_column``, :mod:`fedpriv.privacy.units`):
:func:`node_data` and :func:`node_eval_data` bound every unit to the schema's
``max_records_per_unit`` rows with the node's own secret key before any method
sees them. A simulation, which cuts every node's rows from one file, first
refuses a unit that two clients would hold (``unit_spans_clients``); a node on
its own file cannot check that (the schema's ``unit_scope = "node"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpriv.data.corpora import LOADERS, load_for_run
from fedpriv.data.corpora import schema as bundled_schema
from fedpriv.data.csv import load_csv
from fedpriv.data.dataset import TabularDataset
from fedpriv.data.encode import (
    Encoded,
    LoadReport,
    encode,
    log_report,
    refuse_out_of_bounds_columns,
)
from fedpriv.data.errors import DataError
from fedpriv.data.schema import Schema
from fedpriv.data.split import Split
from fedpriv.data.table import check_file, read_table
from fedpriv.data.units import unit_codes
from fedpriv.federation.protocol import ClientData
from fedpriv.privacy.randomness import SecretKey
from fedpriv.privacy.units import bound_units, bounding_generator, check_units_within_clients
from fedpriv.records import check_labels

#: Corpora shipped with fedpriv (public benchmark datasets) whose schema is bundled.
BUNDLED = ("adult", "heart", "diabetes130", "brfss")
#: The node-config key naming a node's own file.
DATA_PATH = "data-path"
#: The node-config key naming a node's own held-out file (DP federated evaluation).
EVAL_DATA_PATH = "eval-data-path"


@dataclass(frozen=True, kw_only=True)
class DataSource:
    """Where a run's rows come from, from its settings (public values only).

    ``schema`` and ``csv`` are the run-config keys (``""``: unset);
    ``max_records`` the declared bound (``None``: the bundled default).
    """

    dataset: str
    schema: str = ""
    csv: str = ""
    num_clients: int = 2
    split_seed: int = 0
    max_records: int | None = None

    @classmethod
    def of(cls, settings: Any) -> DataSource:
        """From a :class:`~fedpriv.federation.settings.RunSettings` (duck-typed)."""
        return cls(
            dataset=settings.dataset,
            schema=settings.schema,
            csv=settings.csv,
            num_clients=settings.num_clients,
            split_seed=settings.split_seed,
            max_records=settings.max_records,
        )

    @property
    def bundled(self) -> bool:
        """Rows of a bundled corpus (no ``csv``; the schema is the dataset's own)."""
        return not self.csv and self.schema in ("", self.dataset)


@lru_cache(maxsize=8)
def run_schema(schema: str, dataset: str) -> Schema:
    """The run's public schema: a bundled name, a TOML path, or (``""``) the dataset's."""
    name = schema or dataset
    if name in BUNDLED:
        return bundled_schema(name)
    if name == "synthetic" and not schema:
        return LOADERS["synthetic"](n=100).schema  # generated from public parameters
    path = Path(name)
    if not path.is_file():
        raise DataError(
            f"schema must be one of {list(BUNDLED)} or a schema TOML file; got {name!r}",
            code="file_not_found",
            source=name,
        )
    return Schema.from_toml(path)


def check_bound(n: int, max_records: int | None, *, source: str) -> None:
    """Refuse a node holding more than the declared ``max_records`` rows.

    The error names the bound only: the count stays on the node.
    """
    if max_records is not None and n > max_records:
        raise DataError(
            f"the file holds more rows than the run's declared max-records = {max_records}",
            code="too_many_records",
            source=source,
        )


def read_encoded(path: str | Path, schema: Schema) -> Encoded:
    """Every row of one node's file, encoded with ``schema``.

    CSV through :func:`fedpriv.data.table.read_table` (the schema's ``sep``
    and ``encoding``), Parquet (``.parquet``) through pandas; both encoded by
    :func:`fedpriv.data.encode.encode`, so errors carry the loaders' codes.
    The whole file is the node's training data (no split: evaluation is the
    server's, on a public file).
    """
    path = Path(path)
    source = str(path)
    if path.suffix == ".parquet":
        check_file(path, kind="Parquet")
        try:
            frame = pd.read_parquet(path)
        except ImportError as exc:
            raise DataError(
                "reading Parquet needs pyarrow or fastparquet; install one, or write a CSV",
                code="parquet_unavailable",
                source=source,
            ) from exc
        lines = np.arange(len(frame)) + 1  # row numbers (a Parquet file has no lines)
    else:
        frame, lines = read_table(path, schema)
    report = LoadReport(source=source)
    enc = encode(frame, schema, source=source, lines=lines, report=report)
    refuse_out_of_bounds_columns(frame, schema, source=source)
    log_report(report)  # the node's own log
    check_labels(enc.y, schema.target.classes, column=schema.target.column)
    return enc


def read_file(path: str | Path, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Every row of one node's file: (X, y) (:func:`read_encoded`)."""
    enc = read_encoded(path, schema)
    return enc.X, enc.y.astype(np.float64)


def files_dataset(paths: list[str | Path], schema: Schema) -> TabularDataset:
    """The nodes' files as one dataset, file i held by client i, every row training.

    The in-process twin of a deployment on these files: an estimator fitted on
    it (with the run's ``max_records``) sees each client's rows in file order,
    as each node does.
    """
    encs = [read_encoded(p, schema) for p in paths]
    clients = np.concatenate([np.full(e.y.size, i, dtype=np.int64) for i, e in enumerate(encs)])
    empty = np.zeros(0, dtype=np.int64)
    split = Split(
        train=np.arange(clients.size), val=empty, test=empty, seed=None, rule="node files"
    )
    report = LoadReport(source=", ".join(map(str, paths)))
    report.n_rows = int(clients.size)
    names = tuple(Path(p).stem for p in paths)
    return TabularDataset.from_encoded(
        schema.name, schema, encs, split, report, clients=clients, client_names=names
    )


@lru_cache(maxsize=4)
def bundled_run_data(dataset: str, num_clients: int, split_seed: int) -> TabularDataset:
    """A bundled corpus as a run splits it, once per process: a simulation serves any
    node from any worker, so a worker that loaded the corpus for one node reuses it."""
    return load_for_run(dataset, num_clients=num_clients, split_seed=split_seed)


def _rows(
    path: str | None, source: DataSource, pid: int, part: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A node's own file (``path``), whole, else its slice (``pid``) of ``part`` of the
    run's ``csv`` (its client column, else IID from the split seed) or bundled corpus:
    (X, y, each row's unit code or ``None``), every row (no unit bounded yet)."""
    sch = run_schema(source.schema, source.dataset)
    if path:
        enc = read_encoded(str(path), sch)
        X, y = enc.X, enc.y.astype(np.float64)
        units = None if enc.units is None else unit_codes(enc.units)
        return X, y, units
    if source.csv:
        ds = load_csv(source.csv, sch, split_seed=source.split_seed)
    else:
        ds = bundled_run_data(source.dataset, source.num_clients, source.split_seed)
    X_all, y_all = ds.xy(part)
    y_all = check_labels(y_all, sch.target.classes, column=sch.target.column)
    parts = ds.client_partition(source.num_clients, part=part)  # no row held twice
    if not 0 <= pid < len(parts):
        raise DataError(
            f"node partition-id {pid} is outside the {len(parts)} clients the file is split "
            f"into (its client column's values, or num-clients = {source.num_clients}): "
            f"run {len(parts)} nodes (num-clients = {len(parts)})",
            code="no_such_client",
            source=where_from(source),
        )
    units = None
    if ds.units is not None:  # the simulation holds every row: it can check the scope
        units = ds.units[ds.rows(part)]
        check_units_within_clients(
            units, parts, column=str(sch.unit_column), source=where_from(source)
        )
        units = units[parts[pid]]
    rows = parts[pid]
    return X_all[rows], y_all[rows], units


def _where(path: str | None, source: DataSource, part: str) -> str:
    if path:
        return str(path)
    where = where_from(source)
    return where if part == "train" else f"{where} ({part} split)"


def _checked(
    path: str | None, source: DataSource, pid: int, part: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`_rows`, each part checked against the declared record bound."""
    X, y, units = _rows(path, source, pid, part)
    check_bound(
        int(y.shape[0]), record_bound(source, required=False), source=_where(path, source, part)
    )
    return X, y, units


def _bounded(
    path: str | None, source: DataSource, pid: int, part: str, key: SecretKey
) -> ClientData:
    """The rows a node's methods see: with units, at most m per unit, drawn from ``key``."""
    X, y, units = _rows(path, source, pid, part)
    where = _where(path, source, part)
    if units is not None:
        sch = run_schema(source.schema, source.dataset)
        kept = bound_units(units, sch.unit_records, bounding_generator(key, part))
        X, y, units = X[kept.rows], y[kept.rows], kept.units
    check_bound(int(y.shape[0]), record_bound(source, required=False), source=where)
    return ClientData(client_id=pid, X=X, y=y, units=units)


def where_from(source: DataSource) -> str:
    """The run's rows as a message names them: its ``csv``, else its bundled corpus."""
    return source.csv or source.dataset


def csv_client_names(csv: str | Path, schema: Schema, *, split_seed: int = 0) -> tuple[str, ...]:
    """The hospitals of a simulation on one CSV (its client column's values), ``()`` when
    the schema names no client column (then the run's ``num-clients`` split it IID).

    A launcher starts one node per name: the file's own count of clients, as an
    in-process fit uses it (the whole file is the curator's in a simulation).
    """
    if schema.client_column is None:
        return ()
    return load_csv(csv, schema, split_seed=split_seed).client_names


def node_rows(
    node_config: Mapping[str, Any], source: DataSource, pid: int
) -> tuple[np.ndarray, np.ndarray]:
    """This node's training rows (X, y), checked against the declared record bound.

    With ``data-path`` in ``node_config``: that file, whole. Otherwise the
    node's slice (``pid``) of the training part of the run's ``csv`` (its
    client column, else IID from the split seed) or of the bundled corpus.
    """
    X, y, _ = _checked(node_config.get(DATA_PATH), source, pid, "train")
    return X, y


def node_data(
    node_config: Mapping[str, Any], source: DataSource, pid: int, key: SecretKey
) -> ClientData:
    """This node's training rows as its methods see them: :func:`node_rows`, with every
    unit bounded to the schema's ``max_records_per_unit`` rows drawn from the node's
    own ``key`` (the same subset every round), and each row's unit kept."""
    return _bounded(node_config.get(DATA_PATH), source, pid, "train", key)


def node_eval_rows(
    node_config: Mapping[str, Any], source: DataSource, pid: int
) -> tuple[np.ndarray, np.ndarray]:
    """This node's held-out rows (X, y) for the DP federated evaluation.

    With ``eval-data-path``: that file, whole. A node given its own
    ``data-path`` but no held-out file holds none (it adds zero counts).
    Otherwise (simulation) the node's slice of the test split of the run's
    ``csv`` or bundled corpus, divided as the training split is (client
    column, else IID from the split seed). Checked against the declared bound.
    """
    path = node_config.get(EVAL_DATA_PATH)
    if not path and node_config.get(DATA_PATH):
        sch = run_schema(source.schema, source.dataset)
        return np.zeros((0, sch.n_features)), np.zeros(0, dtype=np.int64)
    X, y, _ = _checked(path, source, pid, "test")
    return X, y


def node_eval_data(
    node_config: Mapping[str, Any], source: DataSource, pid: int, key: SecretKey
) -> ClientData:
    """This node's held-out rows (:func:`node_eval_rows`) as the DP evaluation reads
    them: every unit bounded to ``max_records_per_unit`` rows, as :func:`node_data`."""
    path = node_config.get(EVAL_DATA_PATH)
    if not path and node_config.get(DATA_PATH):
        sch = run_schema(source.schema, source.dataset)
        units = None if sch.unit_column is None else np.zeros(0, dtype=np.int64)
        return ClientData(client_id=pid, X=np.zeros((0, sch.n_features)), y=np.zeros(0),
                          units=units)  # fmt: skip
    return _bounded(path, source, pid, "test", key)


@lru_cache(maxsize=16)
def declared_max_records(dataset: str, num_clients: int, split_seed: int) -> int:
    """The bundled corpus's largest client (training rows) under ``num_clients``.

    Public: the corpus, its split (``split_seed``) and its partition are
    published, so this is a property of a public benchmark, not of a
    consortium's private data. Never used for a user's file.
    """
    ds = load_for_run(dataset, num_clients=num_clients, split_seed=split_seed)
    return max(int(p.size) for p in ds.client_partition(num_clients))


def record_bound(source: DataSource, *, required: bool = True) -> int | None:
    """The run's public bound on records per client: declared, or the bundled default.

    ``required=False``: ``None`` when a user's data declares none (the caller
    only checks a bound when there is one); else a :class:`ValueError` naming
    ``max-records``.
    """
    if source.max_records is not None:
        return source.max_records
    if source.bundled:
        return declared_max_records(source.dataset, source.num_clients, source.split_seed)
    if not required:
        return None
    raise ValueError(
        "max-records must be declared (an integer >= 1: the public bound on records per "
        "client) for a run on your own files; got unset"
    )


def public_test_split(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
    """The bundled corpus's test split (X, y): the published benchmark's evaluation rows."""
    ds = load_for_run(source.dataset, num_clients=source.num_clients, split_seed=source.split_seed)
    return ds.xy("test")


def csv_test_split(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
    """The test split (X, y) of a simulation's one CSV (run-config ``csv``), the rows an
    in-process fit on that file scores (same schema, same ``split-seed``).

    A simulation on one file has one curator, who holds the whole file (the nodes'
    slices are cut from it); its held-out 20 % is never any node's training rows.
    """
    sch = run_schema(source.schema, source.dataset)
    X, y = load_csv(source.csv, sch, split_seed=source.split_seed).xy("test")
    return X, check_labels(y, sch.target.classes, column=sch.target.column)
