"""Write a bundled corpus as per-hospital files, for demos of node-local data.

``python -m fedpriv.data.export <dataset> --num-clients K --out DIR`` writes
``DIR/hospital{i}.csv``, client i's training rows (the partition every
runtime uses), and ``DIR/test.csv``, the corpus's public test split (an
``eval-path``), each in the raw columns the dataset's schema reads. The
corpora are public benchmarks; the files stand in for what a hospital holds.

The rows are decoded from the encoded corpus (the loaders keep no raw
frame): categories and labels exactly, numeric values to 12 significant
digits of the public-bound scaling's inverse (clipped values stay clipped),
missing values as the schema's first missing token.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedpriv.data.corpora import load_for_run
from fedpriv.data.schema import CategoricalColumn, NumericColumn, Schema, Transform

log = logging.getLogger(__name__)

_INVERSE = {Transform.IDENTITY: lambda t: t, Transform.LOG1P: np.expm1, Transform.SQRT: np.square}


def decode(schema: Schema, X: np.ndarray, X_ordinal: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    """Raw cells (as the schema reads them) of encoded rows; missing cells are ``None``."""
    cols: dict[str, np.ndarray] = {}
    j = 0
    for k, spec in enumerate(schema.columns):
        if isinstance(spec, NumericColumn):
            lo_t, hi_t = spec.transform.apply(np.array([spec.lo, spec.hi]))
            raw = _INVERSE[spec.transform](X[:, j] * (hi_t - lo_t) + lo_t)
            cells = np.array([f"{v:.12g}" for v in raw], dtype=object)
            if spec.width == 2:
                cells[X[:, j + 1] == 1] = None
        elif isinstance(spec, CategoricalColumn):
            level = X_ordinal[:, k].astype(np.int64)
            domain = np.array([*spec.categories, None], dtype=object)
            # -1 (missing) and the <missing> level both decode to a missing cell.
            cells = domain[np.where((level < 0) | (level >= len(spec.categories)), -1, level)]
        else:
            cells = np.where(X[:, j] == 1, spec.positive[0], spec.negative[0]).astype(object)
        cols[spec.name] = cells
        j += spec.width
    target = schema.target
    if target.multiclass:
        cols[target.column] = np.asarray(target.labels, dtype=object)[np.asarray(y, dtype=np.int64)]
    else:
        negative = next(v for v in target.labels if v not in target.positive)
        cols[target.column] = np.where(y == 1, target.positive[0], negative)
    return pd.DataFrame(cols)


def _write(frame: pd.DataFrame, schema: Schema, path: Path) -> None:
    token = schema.missing_tokens[0] if schema.missing_tokens else ""
    frame.to_csv(path, index=False, sep=schema.sep, encoding=schema.encoding, na_rep=token)


def export(
    dataset: str,
    *,
    num_clients: int,
    out: str | Path,
    split_seed: int = 0,
    rows_per_client: int | None = None,
) -> list[Path]:
    """Write ``hospital{i}.csv`` (client i's training rows; at most ``rows_per_client``,
    the first ones) and ``test.csv`` (the public test split) under ``out``; returns
    the hospital files."""
    ds = load_for_run(dataset, num_clients=num_clients, split_seed=split_seed)
    sch = ds.schema
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train = ds.rows("train")
    paths = []
    for i, part in enumerate(ds.client_partition(num_clients)):
        rows = train[part][:rows_per_client]
        frame = decode(sch, ds.X[rows], ds.X_ordinal[rows], ds.y[rows])
        if sch.client_column is not None and sch.client_column not in frame:
            frame[sch.client_column] = ds.client_names[i] if ds.client_names else f"hospital{i}"
        paths.append(out / f"hospital{i}.csv")
        _write(frame, sch, paths[-1])
    test = ds.rows("test")
    frame = decode(sch, ds.X[test], ds.X_ordinal[test], ds.y[test])
    if sch.client_column is not None and sch.client_column not in frame:
        frame[sch.client_column] = "test"
    _write(frame, sch, out / "test.csv")
    log.info("wrote %d hospital files and test.csv to %s", len(paths), out)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="adult, heart, diabetes130 or brfss")
    ap.add_argument("--num-clients", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--rows-per-client", type=int, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    export(
        args.dataset,
        num_clients=args.num_clients,
        out=args.out,
        split_seed=args.split_seed,
        rows_per_client=args.rows_per_client,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
