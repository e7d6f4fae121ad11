"""The public half of a model file's metadata: the schema as data, the card's public values.

:func:`schema_to_dict` writes a :class:`~fedpriv.data.Schema` as the tables
:meth:`~fedpriv.data.Schema.from_dict` reads back (same digest);
:func:`public_values` lists what a privacy card names as public (schema bounds
and domains, label set, record bound, seed, number of clients, the query
structure); :func:`jsonable` turns settings into plain JSON values. Everything
here is public: nothing reads a private row. :mod:`fedpriv.artefact` writes
and reads the file.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import numpy as np

from fedpriv.data.schema import BinaryColumn, CategoricalColumn, NumericColumn, Schema
from fedpriv.methods import get_method


def schema_to_dict(schema: Schema) -> dict[str, Any]:
    """The tables :meth:`Schema.from_dict` reads back into an equal schema (same digest)."""
    columns = []
    for c in schema.columns:
        if isinstance(c, NumericColumn):
            col = {"type": "numeric", "name": c.name, "lo": c.lo, "hi": c.hi}
            col |= {"transform": c.transform.value, "missing": c.missing.value}
        elif isinstance(c, CategoricalColumn):
            col = {"type": "categorical", "name": c.name, "categories": list(c.categories)}
            col |= {"missing": c.missing.value}
        elif isinstance(c, BinaryColumn):
            col = {"type": "binary", "name": c.name, "positive": list(c.positive)}
            col |= {"negative": list(c.negative), "missing": c.missing.value}
        else:  # pragma: no cover - the schema's column union is closed
            raise ValueError(f"unknown column type {type(c).__name__}")
        columns.append(col)
    t = schema.target
    out = {
        "name": schema.name,
        "description": schema.description,
        "target": {"column": t.column, "positive": list(t.positive), "labels": list(t.labels)},
        "columns": columns,
        "drop": list(schema.drop),
        "missing_tokens": list(schema.missing_tokens),
        "sep": schema.sep,
        "encoding": schema.encoding,
        "extra": jsonable(schema.extra),
    }
    if schema.client_column is not None:
        out["client_column"] = schema.client_column
    if schema.unit_column is not None:
        out["unit_column"] = schema.unit_column
        out["max_records_per_unit"] = schema.max_records_per_unit
        out["unit_scope"] = schema.unit_scope
    return out


def jsonable(value: Any) -> Any:
    """``value`` with enums as their values, arrays and tuples as lists, inf as "inf"."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def public_values(
    schema: Schema | None,
    settings: dict[str, Any],
    *,
    method: str,
    classes: Any = None,
    record_bound: int | None = None,
) -> dict[str, Any]:
    """The public values the card lists: schema bounds and domains, label set, record
    bound, seed, number of clients and the query structure (the method's settings)."""
    if schema is None:
        box = {"features": "bare arrays: every feature in the public box [0, 1]"}
    else:
        box = {
            "schema": schema.name,
            "bounds": {c.name: [c.lo, c.hi] for c in schema.columns if hasattr(c, "lo")},
            "domains": {
                c.name: list(c.categories) for c in schema.columns if hasattr(c, "categories")
            },
            "binary": {
                c.name: {"positive": list(c.positive), "negative": list(c.negative)}
                for c in schema.columns
                if isinstance(c, BinaryColumn)
            },
        }
    if classes is None and schema is not None:
        t = schema.target
        classes = {"labels": list(t.labels), "positive": list(t.positive)}
    m = get_method(method)
    config = {k: settings[k] for k in m.config_fields if k in settings}
    try:
        from fedpriv.federation.settings import config_from_values

        rounds = config_from_values(m, config).rounds
    except (TypeError, ValueError, AttributeError):
        rounds = None
    return {
        **box,
        "label_set": jsonable(classes),
        "record_bound": record_bound,
        "seed": settings.get("seed"),
        "num_clients": settings.get("num_clients"),
        "query_structure": jsonable({"method": method, "rounds": rounds, "config": config}),
    }
