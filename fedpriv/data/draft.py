"""A schema skeleton from a CSV's header and column types, with placeholders for the rest.

A schema is public and written by a person from documentation (a data
dictionary, a code list, physical limits), never from the rows: bounds or
levels read off the private data leak it (:mod:`fedpriv.data.schema`). So
:func:`draft_schema` writes only what the file's *structure* says: the column
names and, from the pandas dtypes of its first :data:`DRAFT_ROWS` rows, whether
each column looks numeric, binary (a boolean dtype) or categorical. Every
bound, domain, label and binary value is the placeholder :data:`PLACEHOLDER`;
no value, bound or level observed in the data is ever written.

:func:`refuse_placeholders` is called by :meth:`Schema.from_dict` (so by every
loader), which refuses a schema until every placeholder has been filled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

#: The text standing for a value a person must fill in from public knowledge.
PLACEHOLDER = "FILL ME"
#: Rows read to classify the columns by dtype (their values are never written).
DRAFT_ROWS = 200
#: What an unfilled draft's error and the ``schema draft`` command say.
WHY = (
    "fill it from public knowledge (a data dictionary, a standard's code list, physical "
    "limits), never from the rows: bounds or levels read off the data leak it"
)


def _q(s: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; non-ASCII kept as is)."""
    return json.dumps(str(s), ensure_ascii=False)


def classify_columns(
    path: str | Path, *, sep: str = ",", encoding: str = "utf-8", nrows: int = DRAFT_ROWS
) -> dict[str, str]:
    """``{column: "numeric" | "binary" | "categorical"}`` from the dtypes of the first rows.

    Only the dtype pandas infers is used: a boolean dtype is binary, any
    other numeric dtype numeric, the rest categorical. Missing tokens ``?``
    and ``""`` read as missing, so they do not make a numeric column text.
    """
    frame = pd.read_csv(path, sep=sep, encoding=encoding, nrows=nrows, na_values=["?"])
    kinds = {}
    for name in frame.columns:
        dtype = frame[name].dtype
        if pd.api.types.is_bool_dtype(dtype):
            kinds[str(name)] = "binary"
        elif pd.api.types.is_numeric_dtype(dtype):
            kinds[str(name)] = "numeric"
        else:
            kinds[str(name)] = "categorical"
    return kinds


def draft_schema(
    path: str | Path,
    *,
    target: str | None = None,
    client_column: str | None = None,
    sep: str = ",",
    encoding: str = "utf-8",
) -> str:
    """The TOML text of a schema skeleton for the CSV at ``path``.

    ``target`` and ``client_column`` name columns of the file (refused with a
    ``ValueError`` naming the header otherwise); they are left out of the
    feature columns. Without ``target`` the target column is a placeholder too.
    """
    path = Path(path)
    kinds = classify_columns(path, sep=sep, encoding=encoding)
    for key, col in (("target", target), ("client_column", client_column)):
        if col is not None and col not in kinds:
            raise ValueError(f"{key}: column {col!r} is not in {path}'s header {list(kinds)}")
    ph = _q(PLACEHOLDER)
    lines = [
        f"# Draft schema for {path.name}: written from its header and column types only.",
        "# Every placeholder must be replaced before the schema loads: fill it from public",
        "# knowledge (a data dictionary, a standard's code list, physical limits), never",
        "# from the rows: bounds or levels read off the data leak it.",
        "# Check each column's type too (a numeric code may really be categorical).",
        "# Format: experiments/schemas/example.toml.",
        "",
        f"name = {_q(path.stem)}",
        'description = ""',
        'missing_tokens = ["?", ""]',
        "# Columns in the file that are not used:",
        "drop = []",
    ]
    if client_column is not None:
        lines.append(f"client_column = {_q(client_column)}")
    if sep != ",":
        lines.append(f"sep = {_q(sep)}")
    if encoding != "utf-8":
        lines.append(f"encoding = {_q(encoding)}")
    lines += [
        "",
        "# Binary target: y = 1 iff the label is in `positive`; `labels`: the whole public",
        "# label set (any other label is an error).",
        "[target]",
        f"column = {ph if target is None else _q(target)}",
        f"positive = [{ph}]",
        f"labels = [{ph}]",
    ]
    for name, kind in kinds.items():
        if name in (target, client_column):
            continue
        lines += ["", "[[columns]]", f"name = {_q(name)}", f'type = "{kind}"']
        if kind == "numeric":
            lines.append(
                '# [lo, hi] in raw units; optional: transform = "log1p", missing = "indicator"'
            )
            lines.append(f"bounds = [{ph}, {ph}]")
        elif kind == "categorical":
            lines.append("# The full public domain:")
            lines.append(f"categories = [{ph}]")
        else:
            lines.append(f"positive = [{ph}]")
            lines.append(f"negative = [{ph}]")
    return "\n".join(lines) + "\n"


def _placeholders(value: Any) -> int:
    """How many placeholders ``value`` holds (a bound pair can hold two)."""
    if isinstance(value, str):
        return int(value.strip() == PLACEHOLDER)
    if isinstance(value, (list, tuple)):
        return sum(_placeholders(v) for v in value)
    return 0


def refuse_placeholders(data: dict[str, Any]) -> None:
    """Refuse a schema table still holding a :data:`PLACEHOLDER`, naming where.

    Raises
    ------
    SchemaError
        ``schema 'x', column 'age': bounds is still the draft placeholder ...``.
    """
    from fedpriv.data.schema import SchemaError

    name = data.get("name", "<unnamed>")
    tables: list[tuple[str, Any]] = [("", data)]
    if isinstance(data.get("target"), dict):
        tables.append(("[target]", data["target"]))
    for col in data.get("columns", []) if isinstance(data.get("columns"), list) else []:
        if isinstance(col, dict):
            tables.append((f"column {col.get('name', '<unnamed>')!r}", col))
    # (where, key, how many placeholders its value holds), in file order.
    found = [(w, k, n) for w, t in tables for k, v in t.items() if (n := _placeholders(v))]
    if found:
        where, key, _ = found[0]
        at = f", {where}" if where else ""
        left = sum(n for *_, n in found)  # counted as the draft command counts them
        raise SchemaError(
            f"schema {name!r}{at}: {key} is still the draft placeholder {PLACEHOLDER!r} "
            f"({left} placeholder{'s' if left > 1 else ''} left): {WHY}"
        )
