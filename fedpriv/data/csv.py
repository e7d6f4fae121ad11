"""Bring your own CSV: a user's file plus a schema TOML becomes a federated dataset.

:func:`load_csv` splits one file (train / validation / test, frozen by a seed);
:func:`load_csv_whole` keeps every row for training (cut into folds by the caller);
:func:`load_train_test` trains on one file and holds out another.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpriv.data.dataset import TabularDataset, cached
from fedpriv.data.encode import Encoded, LoadReport, encode, refuse_out_of_bounds_columns
from fedpriv.data.errors import DataError
from fedpriv.data.schema import Schema
from fedpriv.data.split import Split, make_split, unit_split
from fedpriv.data.table import check_text_file, read_table
from fedpriv.data.units import unit_codes


def load_csv(
    path: str | Path,
    schema: Schema | str | Path,
    *,
    client_column: str | None = None,
    sep: str | None = None,
    test_fraction: float = 0.2,
    val_fraction: float = 0.2,
    split_seed: int = 0,
    use_cache: bool = True,
) -> TabularDataset:
    """Load ``path`` with ``schema`` (a :class:`Schema` or a TOML path).

    Clients come from ``client_column`` (default: the schema's
    ``client_column``); without one, partition the training rows with
    :mod:`fedpriv.data.partition`. The split is stratified by label (and by
    client when there is one) and frozen by ``split_seed``; with a schema
    ``unit_column`` it splits the units (by their first row), every row in its
    unit's part. The file is read
    with the schema's ``encoding`` and ``sep`` (``sep`` here overrides it).
    Columns of the file the schema does not declare are ignored and listed in
    the load report, as are the values outside a categorical domain (counted
    per column); both are logged as warnings at every load.

    Raises
    ------
    DataError
        Naming the file, column and line: a missing column (with the
        delimiter the header seems to use), a repeated header, a byte the
        encoding cannot decode, a row with an extra field, a non-numeric
        value in a numeric column, a label outside the declared set, a value
        outside a categorical domain under ``missing = "error"``, an empty
        file, an entirely missing column, or a client without rows.
    SchemaError
        A malformed schema (e.g. a bound with lo >= hi), naming its file.
    """
    sch = schema if isinstance(schema, Schema) else Schema.from_toml(schema)
    path = Path(path)
    client_col = client_column or sch.client_column
    sep = sch.sep if sep is None else sep

    def build() -> TabularDataset:
        enc, report, clients, names = _encode_file(path, sch, client_col, sep)
        strata = enc.y if clients is None else clients * 2 + enc.y
        fractions = {"test_fraction": test_fraction, "val_fraction": val_fraction}
        if enc.units is None:
            split = make_split(enc.y, seed=split_seed, strata=strata, **fractions)
        else:  # by unit: no patient both trained on and scored
            units = unit_codes(enc.units)
            split = unit_split(units, enc.y, seed=split_seed, strata=strata, **fractions)
        ds = TabularDataset.from_encoded(
            sch.name, sch, [enc], split, report, clients=clients, client_names=names
        )
        if clients is not None:
            for part in ("train", "val", "test"):
                counts = np.bincount(clients[ds.rows(part)], minlength=len(names))
                if (counts == 0).any():
                    who = [names[i] for i in np.flatnonzero(counts == 0)]
                    raise DataError(
                        f"client(s) {who} have zero rows in the {part} part",
                        code="client_without_rows",
                        source=str(path),
                        column=client_col,
                    )
        return ds

    opts = {
        "client_column": client_col,
        "sep": sep,
        "test_fraction": test_fraction,
        "val_fraction": val_fraction,
        "split_seed": split_seed,
    }
    check_text_file(path, encoding=sch.encoding)  # a folder, a missing file, an archive
    return cached("csv", [path], sch, opts, build, use_cache=use_cache)


def load_csv_whole(
    path: str | Path,
    schema: Schema | str | Path,
    *,
    client_column: str | None = None,
    part: str = "train",
    sep: str | None = None,
    split_seed: int = 0,
    use_cache: bool = True,
) -> TabularDataset:
    """Every row of ``path`` in one part, ``"train"`` (default) or ``"test"``; the others empty.

    ``"train"``: a file trained on whole (``fedpriv run --train``) or cut into folds by
    the caller (``fedpriv cv``); ``"test"``: a held-out file, whose client column is
    ignored (its rows are scored, never partitioned) and which may hold one class.
    Read, checked and encoded as :func:`load_csv` does; ``split_seed`` seeds a simulated
    (IID) partition when there is no client column. Raises what :func:`load_csv` raises.
    """
    if part not in ("train", "test"):
        raise ValueError(f"part must be 'train' or 'test'; got {part!r}")
    sch = schema if isinstance(schema, Schema) else Schema.from_toml(schema)
    path = Path(path)
    client_col = (client_column or sch.client_column) if part == "train" else None
    sep = sch.sep if sep is None else sep

    def build() -> TabularDataset:
        enc, report, codes, names = _encode_file(path, sch, client_col, sep)
        parts = dict.fromkeys(("train", "val", "test"), np.zeros(0, dtype=np.int64))
        parts[part] = np.arange(enc.y.size)
        split = Split(**parts, seed=split_seed, rule=f"whole file ({part})")
        return TabularDataset.from_encoded(
            sch.name, sch, [enc], split, report, clients=codes, client_names=names
        )

    opts = {"client_column": client_col, "sep": sep, "split_seed": split_seed, "part": part}
    check_text_file(path, encoding=sch.encoding)
    return cached("csv-whole", [path], sch, opts, build, use_cache=use_cache)


def load_train_test(
    train: str | Path,
    test: str | Path,
    schema: Schema | str | Path,
    *,
    client_column: str | None = None,
    sep: str | None = None,
    split_seed: int = 0,
    use_cache: bool = True,
) -> TabularDataset:
    """``train``'s rows as the ``"train"`` part, ``test``'s as ``"test"`` (``val`` empty).

    Both files are read and checked against ``schema`` here, before anything is fitted
    (a bad value in either is a :class:`DataError` naming its file, column and line).
    The clients come from ``train``'s client column (as :func:`load_csv`); ``test``'s is
    ignored, and its rows carry client code −1, which no partition accepts: only the
    training rows are ever held by clients.
    """
    sch = schema if isinstance(schema, Schema) else Schema.from_toml(schema)
    opts = {"sep": sep, "split_seed": split_seed, "use_cache": use_cache}
    tr = load_csv_whole(train, sch, client_column=client_column, **opts)
    te = load_csv_whole(test, sch, part="test", **opts)
    n_train, n_test = tr.y.size, te.y.size
    split = Split(
        train=np.arange(n_train),
        val=np.zeros(0, dtype=np.int64),
        test=n_train + np.arange(n_test),
        seed=split_seed,
        rule=f"train file {Path(train).name}, test file {Path(test).name}",
    )
    codes = None
    if tr.clients is not None:
        codes = np.concatenate([tr.clients, np.full(n_test, -1, dtype=tr.clients.dtype)])
    units = None
    if tr.units is not None:  # the test file's codes after the training file's: never shared
        units = np.concatenate([tr.units, te.units + (int(tr.units.max(initial=-1)) + 1)])
    return TabularDataset(
        name=sch.name,
        schema=sch,
        X=np.vstack([tr.X, te.X]),
        X_ordinal=np.vstack([tr.X_ordinal, te.X_ordinal]),
        y=np.concatenate([tr.y, te.y]),
        feature_names=tr.feature_names,
        split=split,
        report=tr.report,
        clients=codes,
        client_names=tr.client_names,
        units=units,
    )


def _encode_file(
    path: Path, sch: Schema, client_col: str | None, sep: str
) -> tuple[Encoded, LoadReport, np.ndarray | None, tuple[str, ...]]:
    """``path`` read and encoded with ``sch``: the rows, the load report, each row's client
    code (``None`` without a client column) and the client names (sorted)."""
    report = LoadReport(source=str(path))
    frame, lines = read_table(path, sch, sep=sep)
    if client_col is not None and client_col not in frame.columns:
        raise DataError(
            f"client column missing; the file has {list(frame.columns)}",
            code="missing_column",
            source=str(path),
            column=client_col,
        )
    enc = encode(frame, sch, source=str(path), lines=lines, report=report)
    refuse_out_of_bounds_columns(frame, sch, source=str(path))
    if client_col is None:
        return enc, report, None, ()
    col = frame[client_col]
    if col.isna().any():
        bad = int(lines[np.flatnonzero(col.isna().to_numpy())[0]])
        raise DataError(
            "client id is missing",
            code="missing_client_id",
            source=str(path),
            column=client_col,
            line=bad,
        )
    names_arr, clients = np.unique(col.astype(str).to_numpy(), return_inverse=True)
    return enc, report, clients, tuple(str(n) for n in names_arr)
