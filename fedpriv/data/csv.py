"""Bring your own CSV: a user's file plus a schema TOML becomes a federated dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpriv.data.dataset import TabularDataset, cached
from fedpriv.data.encode import LoadReport, encode, refuse_out_of_bounds_columns
from fedpriv.data.errors import DataError
from fedpriv.data.schema import Schema
from fedpriv.data.split import make_split
from fedpriv.data.table import check_text_file, read_table


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
    client when there is one) and frozen by ``split_seed``. The file is read
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
        clients, names = None, ()
        strata = enc.y
        if client_col is not None:
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
            names = tuple(str(n) for n in names_arr)
            strata = clients * 2 + enc.y
        split = make_split(
            enc.y,
            seed=split_seed,
            test_fraction=test_fraction,
            val_fraction=val_fraction,
            strata=strata,
        )
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
