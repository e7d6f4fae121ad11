"""Reading a schema's TOML tables: every key checked by name, type and shape.

A TOML schema is typed by hand, so each mistake is refused with one message
naming the schema, the column, the key, the value and what is allowed: an
unknown key (with the closest known one), a string where an array is meant
(``missing_tokens = "NA"`` is not the characters N and A), a bound that is a
string or a boolean, a ``bounds`` that is not a pair. Used by
:meth:`fedpriv.data.schema.Schema.from_dict`.
"""

from __future__ import annotations

import difflib
import json
from enum import Enum
from typing import Any

from fedpriv.data.draft import refuse_placeholders  # an unfilled `schema draft`
from fedpriv.data.schema import (
    BinaryColumn,
    CategoricalColumn,
    Column,
    Missing,
    NumericColumn,
    Schema,
    SchemaError,
    Target,
    Transform,
)


def schema_from_dict(schema_cls: type[Schema], data: dict[str, Any]) -> Schema:
    """``schema_cls`` from its TOML tables (:meth:`Schema.from_dict`)."""
    name = data.get("name", "<unnamed>")
    _check_keys(f"schema {name!r}", "at the top level", data, _TOP_KEYS)
    refuse_placeholders(data)
    if "target" not in data:
        raise SchemaError(f"schema {name!r}: missing [target]")
    _check_keys(f"schema {name!r}", "in [target]", data["target"], _TARGET_KEYS)
    try:
        target = Target(**data["target"])
    except KeyError as exc:
        raise SchemaError(f"schema {name!r}: missing [target] or its key {exc}") from exc
    except TypeError as exc:
        raise SchemaError(
            f"schema {name!r}: [target] needs the keys {sorted(_TARGET_KEYS)}: {exc}"
        ) from exc
    owner = f"schema {name!r}"
    for key in ("name", "description", "client_column", "unit_column", "unit_scope", "sep",
                "encoding"):  # fmt: skip
        if key in data and not isinstance(data[key], str):
            raise SchemaError(f"{owner}: {key} must be a string; got {data[key]!r}")

    columns_table = data.get("columns", [])
    if not isinstance(columns_table, list):
        raise SchemaError(
            f"{owner}: columns must be an array of tables ([[columns]]); got {columns_table!r}"
        )
    columns = tuple(_column_from_dict(name, c) for c in columns_table)
    extra = data.get("extra", {})
    if not isinstance(extra, dict):
        raise SchemaError(f"{owner}: extra must be a table; got {extra!r}")
    return schema_cls(
        name=name,
        columns=columns,
        target=target,
        drop=_string_list(owner, "drop", data.get("drop", [])),
        missing_tokens=_string_list(owner, "missing_tokens", data.get("missing_tokens", ["?", ""])),
        client_column=data.get("client_column"),
        unit_column=data.get("unit_column"),
        max_records_per_unit=data.get("max_records_per_unit"),
        unit_scope=data.get("unit_scope"),
        description=data.get("description", ""),
        sep=data.get("sep", ","),
        encoding=data.get("encoding", "utf-8"),
        extra=dict(extra),
    )


_TOP_KEYS = frozenset(
    {
        "name",
        "description",
        "target",
        "columns",
        "drop",
        "missing_tokens",
        "client_column",
        "unit_column",
        "max_records_per_unit",
        "unit_scope",
        "sep",
        "encoding",
        "extra",
    }
)
_TARGET_KEYS = frozenset({"column", "positive", "labels"})
_COLUMN_KEYS = {
    "numeric": frozenset({"name", "type", "bounds", "lo", "hi", "transform", "missing"}),
    "categorical": frozenset({"name", "type", "categories", "missing"}),
    "binary": frozenset({"name", "type", "positive", "negative", "missing"}),
}
#: Every key some column type takes (a key outside all of them is a typo).
_ANY_COLUMN_KEY = frozenset().union(*_COLUMN_KEYS.values())


def _check_keys(owner: str, where: str, table: object, allowed: frozenset[str]) -> None:
    """Refuse a key of ``table`` outside ``allowed``, suggesting the closest allowed one."""
    if not isinstance(table, dict):
        raise SchemaError(f"{owner}: expected a table {where}; got {table!r}")
    for key in table:
        if key in allowed:
            continue
        close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SchemaError(f"{owner}: unknown key {key!r} {where}; {hint}allowed: {sorted(allowed)}")


def _column_from_dict(schema_name: str, c: dict[str, Any]) -> Column:
    if not isinstance(c, dict):
        raise SchemaError(f"schema {schema_name!r}: each [[columns]] must be a table; got {c!r}")
    c = dict(c)
    kind = c.get("type")
    name = c.get("name", "<unnamed>")
    owner, where = f"schema {schema_name!r}", f"in column {name!r}"
    # A misspelt key (``tpye``) is named as such, before the type it hides is missed.
    _check_keys(owner, where, c, _ANY_COLUMN_KEY)
    if kind not in _COLUMN_KEYS:
        raise SchemaError(
            f"{owner}, column {name!r}: type must be numeric|categorical|binary; "
            + ("the key type is missing" if kind is None else f"got {kind!r}")
        )
    _check_keys(owner, where, c, _COLUMN_KEYS[kind])
    if not isinstance(name, str):
        raise SchemaError(f"{owner}: a column's name must be a string; got {name!r}")
    c.pop("type")
    try:
        if "missing" in c:
            c["missing"] = _enum(name, Missing, "missing", c["missing"])
        if kind == "numeric":
            if "bounds" in c and ("lo" in c or "hi" in c):
                raise SchemaError(f"column {name!r}: give bounds = [lo, hi] or lo and hi, not both")
            if "bounds" in c:
                c["lo"], c["hi"] = _bounds(name, c.pop("bounds"))
            for key in ("lo", "hi"):
                if key in c:
                    c[key] = _number(name, key, c[key])
            if "transform" in c:
                c["transform"] = _enum(name, Transform, "transform", c["transform"])
            return NumericColumn(**c)
        if kind == "categorical":
            if "categories" not in c:
                raise SchemaError(
                    f"column {name!r}: categories (the full public domain) is missing"
                )
            c["categories"] = _string_list(f"column {name!r}", "categories", c["categories"])
            return CategoricalColumn(**c)
        return BinaryColumn(**c)
    except SchemaError as exc:  # already names the column
        raise SchemaError(f"{owner}, {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{owner}, column {name!r}: {exc}") from exc


def _enum(column: str, kind: type[Enum], key: str, value: object) -> Enum:
    try:
        return kind(value)
    except ValueError:
        allowed = [m.value for m in kind]  # type: ignore[attr-defined]
        raise SchemaError(
            f"column {column!r}: {key} must be one of {allowed}; got {value!r}"
        ) from None


def _number(column: str, key: str, value: object) -> float:
    """A bound as written in TOML: an integer or a float, never a string or a boolean."""
    # bool is an int in Python: ``true`` would silently become the bound 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(
            f"column {column!r}: {key} must be a number (an integer or a float, unquoted); "
            f"got {value!r} ({type(value).__name__})"
        )
    return float(value)


def _bounds(column: str, value: object) -> tuple[float, float]:
    """``bounds = [lo, hi]``: a two-element array of numbers."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SchemaError(
            f"column {column!r}: bounds must be an array of two numbers [lo, hi] in raw units; "
            f"got {value!r}"
        )
    return _number(column, "bounds[0] (lo)", value[0]), _number(column, "bounds[1] (hi)", value[1])


def _string_list(owner: str, key: str, value: object) -> tuple[str, ...]:
    """An array of strings (numbers allowed, as their text): a lone string is refused, not
    split into its characters (``missing_tokens = "NA"`` meant ``["NA"]``)."""
    if isinstance(value, str):
        raise SchemaError(
            f"{owner}: {key} must be an array of strings; got the string {value!r} (write "
            f"{key} = [{json.dumps(value)}])"
        )
    if not isinstance(value, (list, tuple)):
        raise SchemaError(f"{owner}: {key} must be an array of strings; got {value!r}")
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, float))]
    if bad:
        raise SchemaError(
            f"{owner}: {key} must be an array of strings (or numbers); got the entry {bad[0]!r}"
        )
    return tuple(str(v) if not isinstance(v, str) else v for v in value)
