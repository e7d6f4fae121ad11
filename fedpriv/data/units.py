"""Units of privacy in a table: the schema's unit keys, and each row's unit id.

A hospital holds many records per patient (Diabetes 130-US: 101,766 encounters
of 71,518 patients). Record-level DP protects one encounter; a schema that
names a ``unit_column`` asks for the guarantee per *unit* (a patient and all
their records). Three public keys declare it, together or not at all:

* ``unit_column``: the id column (never a feature, the target or the client
  column; read as text, so ``"007"`` and ``"7"`` are two units);
* ``max_records_per_unit`` m: each node keeps at most m records of a unit,
  a random subset drawn from its secret key (:func:`fedpriv.privacy.units.bound_units`),
  and every sensitivity is a unit's, m records' (or one clipped sum per unit);
* ``unit_scope = "node"``: the consortium's declaration that every unit's
  records are held by one node. A node cannot check it alone (the ids never
  leave it); a simulation on one file, which holds every row, does
  (:func:`fedpriv.privacy.units.check_units_within_clients`).

This module only reads: which rows belong to which unit, as codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fedpriv.data.errors import DataError

#: Largest public bound on a unit's records (a patient's encounters).
MAX_RECORDS_PER_UNIT = 10_000
#: The allowed ``unit_scope`` values: every unit held by one node.
UNIT_SCOPES = ("node",)
#: The schema keys of unit-level privacy.
UNIT_KEYS = ("unit_column", "max_records_per_unit", "unit_scope")


def check_unit_keys(schema: Any, features: set[str]) -> None:
    """Refuse (``ValueError`` naming key, value and what is allowed) unit keys given in
    part, a unit column that is a feature, the target or the client column, an m
    outside [1, :data:`MAX_RECORDS_PER_UNIT`] and a scope outside :data:`UNIT_SCOPES`."""
    keys = {k: getattr(schema, k) for k in UNIT_KEYS}
    given = [k for k, v in keys.items() if v is not None]
    if not given:
        return
    if len(given) < len(keys):
        absent = next(k for k in keys if k not in given)
        raise ValueError(
            f"{absent} is missing; unit-level privacy needs {', '.join(UNIT_KEYS)} together "
            f"(got {given[0]} = {keys[given[0]]!r})"
        )
    col = schema.unit_column
    if not isinstance(col, str) or not col:
        raise ValueError(f"unit_column must be a column name; got {col!r}")
    role = (
        "a feature" if col in features
        else "the target" if col == schema.target.column
        else "the client column" if col == schema.client_column
        else None
    )  # fmt: skip
    if role:
        raise ValueError(
            f"unit_column = {col!r} is {role}; the unit column must be an id column of its "
            "own (it is never a feature)"
        )
    m = schema.max_records_per_unit
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_RECORDS_PER_UNIT:
        raise ValueError(
            f"max_records_per_unit must be an integer in [1, {MAX_RECORDS_PER_UNIT}]; got {m!r}"
        )
    if schema.unit_scope not in UNIT_SCOPES:
        raise ValueError(
            f"unit_scope must be one of {list(UNIT_SCOPES)} (the consortium declares that "
            f"every unit's records are held by one node); got {schema.unit_scope!r}"
        )


def privacy_unit(column: str | None, max_records: int | None) -> str:
    """``"record"``, or ``"<column>, at most m records"``: whom a guarantee protects."""
    if column is None:
        return "record"
    return f"{column}, at most {int(max_records)} record{'s' if max_records != 1 else ''}"


def unit_ids(frame: pd.DataFrame, column: str, *, source: str, lines: np.ndarray) -> np.ndarray:
    """Each row's unit id as written (an object array of text), refusing a missing column
    (``missing_column``) or a missing id (``missing_unit_id``, naming its line)."""
    if column not in frame.columns:
        raise DataError(
            f"unit column missing; the file has {list(frame.columns)}",
            code="missing_column",
            source=source,
            column=column,
        )
    ids = frame[column]
    missing = ids.isna().to_numpy()
    if missing.any():
        raise DataError(
            "unit id is missing (every record must name its unit)",
            code="missing_unit_id",
            source=source,
            column=column,
            line=int(np.asarray(lines)[np.flatnonzero(missing)[0]]),
        )
    return ids.astype(str).str.strip().to_numpy(dtype=object)


def unit_codes(ids: np.ndarray) -> np.ndarray:
    """Dense int64 codes 0 … U − 1 of ``ids`` (equal ids, equal codes)."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(ids, return_inverse=True)[1].astype(np.int64).ravel()
