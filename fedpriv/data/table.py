"""Reading delimited files into raw frames with file line numbers kept.

Numeric columns are parsed as floats on the fast path; if any cell fails to
parse, the file is re-read as text so that encoding can name the exact column
and line of the bad value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedpriv.data.errors import DataError
from fedpriv.data.schema import BinaryColumn, CategoricalColumn, NumericColumn, Schema


def _numeric_like(values: tuple[str, ...]) -> bool:
    try:
        [float(v) for v in values]
    except ValueError:
        return False
    return True


def _float_columns(schema: Schema) -> list[str]:
    # Columns whose every declared value is a number parse faster as floats.
    out = []
    for c in schema.columns:
        if isinstance(c, NumericColumn):
            out.append(c.name)
        elif isinstance(c, BinaryColumn) and _numeric_like(c.positive + c.negative):
            out.append(c.name)
        elif isinstance(c, CategoricalColumn) and _numeric_like(c.categories):
            out.append(c.name)
    if _numeric_like(schema.target.labels):
        out.append(schema.target.column)
    return out


def read_table(
    path: str | Path,
    schema: Schema,
    *,
    names: list[str] | None = None,
    skiprows: int = 0,
    sep: str = ",",
    skipinitialspace: bool = False,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Read ``path`` (plain or .gz) into raw cells plus each row's file line number.

    Missing tokens from the schema become NaN; nothing else is interpreted.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DataError("file not found", code="file_not_found", source=source)
    opts = {
        "sep": sep,
        "header": None if names is not None else 0,
        "names": names,
        "skiprows": skiprows,
        "skipinitialspace": skipinitialspace,
        "keep_default_na": False,
        "na_values": list(schema.missing_tokens),
    }
    try:
        head = pd.read_csv(path, nrows=0, **opts)
    except pd.errors.EmptyDataError as exc:
        raise DataError("file is empty", code="empty_file", source=source) from exc
    floats = {c: "float64" for c in _float_columns(schema) if c in head.columns}
    text = {c: str for c in head.columns if c not in floats}
    try:
        frame = pd.read_csv(path, dtype={**floats, **text}, **opts)
    except ValueError:
        # Some "numeric" cell is not a number: read as text; encoding reports it.
        frame = pd.read_csv(path, dtype=str, **opts)
    if len(frame) == 0:
        raise DataError("file has a header but no data rows", code="no_data_rows", source=source)
    first = 1 + skiprows + (names is None)
    return frame, np.arange(len(frame)) + first
