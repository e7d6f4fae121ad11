"""Public dataset schemas: column types, bounds, domains, target, transforms.

A schema is written once by a person from a dataset's documentation and is
never computed from the rows: bounds and domains learned from private data
leak it (the most common DP bug in this field; Lumberjack §E). Schemas live as
TOML files (format in ``experiments/schemas/example.toml``) or are built as
frozen dataclasses.

A numeric column may declare a public, data-independent transform (``log1p``
for heavy-tailed money columns, ``sqrt``) applied before min-max scaling with
the transformed bounds, so that random thresholds land where the data lives
without touching private statistics.

A ``unit_column`` (a patient id, never a feature) with ``max_records_per_unit``
and ``unit_scope`` makes the guarantee per unit (:mod:`fedpriv.data.units`).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.data.units import check_unit_keys, privacy_unit
from fedpriv.records import BINARY_LABELS


class SchemaError(ValueError):
    """A schema is malformed; the message names the schema and the column."""


class Transform(Enum):
    """Public monotone transforms applied to a numeric column before scaling."""

    IDENTITY = "identity"
    LOG1P = "log1p"
    SQRT = "sqrt"

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self is Transform.LOG1P:
            return np.log1p(x)
        if self is Transform.SQRT:
            return np.sqrt(x)
        return x


class Missing(Enum):
    """What a missing cell becomes."""

    ERROR = "error"  # refuse the file
    CATEGORY = "category"  # its own one-hot column (categorical only)
    INDICATOR = "indicator"  # numeric: impute the lower bound and add a 0/1 indicator


def canonical(value: object) -> str:
    """Canonical text of a cell or domain entry: ``"1.0"``, ``"1"`` and ``1`` agree."""
    s = str(value).strip()
    try:
        f = float(s)
    except ValueError:
        return s
    if math.isfinite(f) and f == int(f):
        return str(int(f))
    return repr(f)


@dataclass(frozen=True, kw_only=True)
class NumericColumn:
    """A real-valued column with public bounds ``[lo, hi]`` in raw units."""

    name: str
    lo: float
    hi: float
    transform: Transform = Transform.IDENTITY
    missing: Missing = Missing.ERROR

    def __post_init__(self) -> None:
        lo, hi = float(self.lo), float(self.hi)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
            raise SchemaError(
                f"column {self.name!r}: bounds must be finite with lo < hi; got lo={self.lo!r}, "
                f"hi={self.hi!r}"
            )
        if self.transform is Transform.LOG1P and lo <= -1:
            raise SchemaError(f"column {self.name!r}: log1p needs lo > -1; got lo={lo!r}")
        if self.transform is Transform.SQRT and lo < 0:
            raise SchemaError(f"column {self.name!r}: sqrt needs lo >= 0; got lo={lo!r}")
        if self.missing is Missing.CATEGORY:
            raise SchemaError(
                f"column {self.name!r}: numeric columns take missing = error|indicator"
            )
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    @property
    def width(self) -> int:
        return 1 + (self.missing is Missing.INDICATOR)

    def feature_names(self) -> list[str]:
        names = [self.name]
        if self.missing is Missing.INDICATOR:
            names.append(f"{self.name}:missing")
        return names


@dataclass(frozen=True, kw_only=True)
class CategoricalColumn:
    """A column over a public, finite domain; one-hot encoded."""

    name: str
    categories: tuple[str, ...]
    missing: Missing = Missing.CATEGORY

    def __post_init__(self) -> None:
        cats = tuple(canonical(c) for c in self.categories)
        if not cats:
            raise SchemaError(f"column {self.name!r}: categories must be non-empty")
        if len(set(cats)) != len(cats):
            raise SchemaError(f"column {self.name!r}: categories repeat: {list(self.categories)}")
        if self.missing is Missing.INDICATOR:
            raise SchemaError(
                f"column {self.name!r}: categorical columns take missing = error|category"
            )
        object.__setattr__(self, "categories", cats)

    @property
    def n_levels(self) -> int:
        """Levels of the ordinal view: the domain plus a missing level if any."""
        return len(self.categories) + (self.missing is Missing.CATEGORY)

    @property
    def width(self) -> int:
        return self.n_levels

    def feature_names(self) -> list[str]:
        names = [f"{self.name}={c}" for c in self.categories]
        if self.missing is Missing.CATEGORY:
            names.append(f"{self.name}=<missing>")
        return names


@dataclass(frozen=True, kw_only=True)
class BinaryColumn:
    """A two-valued column: ``positive`` values map to 1, ``negative`` to 0."""

    name: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    missing: Missing = Missing.ERROR

    def __post_init__(self) -> None:
        pos = tuple(canonical(v) for v in _as_tuple(self.positive))
        neg = tuple(canonical(v) for v in _as_tuple(self.negative))
        if not pos or not neg or set(pos) & set(neg):
            raise SchemaError(
                f"column {self.name!r}: positive and negative values must be non-empty and "
                f"disjoint; got {list(pos)} / {list(neg)}"
            )
        if self.missing is not Missing.ERROR:
            raise SchemaError(f"column {self.name!r}: binary columns take missing = error")
        object.__setattr__(self, "positive", pos)
        object.__setattr__(self, "negative", neg)

    width = 1

    def feature_names(self) -> list[str]:
        return [self.name]


Column = NumericColumn | CategoricalColumn | BinaryColumn


@dataclass(frozen=True, kw_only=True)
class Target:
    """The target column and its public label set.

    Binary (``positive`` given): ``y = 1`` iff the raw label is in ``positive``.
    Multiclass (``positive`` empty): ``y`` is the label's position in
    ``labels``, so the classes are ``0 … len(labels) − 1`` in declared order.
    ``labels`` is the declared label set; any other label is an input error.
    """

    column: str
    labels: tuple[str, ...]
    positive: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        pos = tuple(canonical(v) for v in _as_tuple(self.positive))
        labels = tuple(canonical(v) for v in _as_tuple(self.labels))
        if len(set(labels)) != len(labels) or len(labels) < 2:
            raise SchemaError(
                f"target {self.column!r}: labels must be at least two distinct values; "
                f"got {list(labels)}"
            )
        if pos and (not set(pos) <= set(labels) or set(pos) == set(labels)):
            raise SchemaError(
                f"target {self.column!r}: positive labels {list(pos)} must be a non-empty proper "
                f"subset of the label set {list(labels)} (omit positive for a multiclass target)"
            )
        object.__setattr__(self, "positive", pos)
        object.__setattr__(self, "labels", labels)

    @property
    def multiclass(self) -> bool:
        """True when every declared label is its own class (no ``positive``)."""
        return not self.positive

    @property
    def classes(self) -> tuple[int, ...]:
        """The encoded label set: (0, 1) for a binary target (1 for a ``positive``
        label), else the labels' positions ``0 … C − 1``.

        Public (from the schema, never the rows): every entry point checks the
        encoded labels against it (:func:`fedpriv.records.check_labels`).
        """
        if self.multiclass:
            return tuple(range(len(self.labels)))
        return BINARY_LABELS


@dataclass(frozen=True, kw_only=True)
class Schema:
    """Public description of one tabular dataset."""

    name: str
    columns: tuple[Column, ...]
    target: Target
    drop: tuple[str, ...] = ()
    missing_tokens: tuple[str, ...] = ("?", "")
    client_column: str | None = None
    #: Whom the guarantee protects (a patient id column); ``None``: one record.
    unit_column: str | None = None
    max_records_per_unit: int | None = None  # m: a unit's records a node may use
    unit_scope: str | None = None  # "node": every unit held by one node
    description: str = ""
    sep: str = ","
    encoding: str = "utf-8"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.sep, str) or len(self.sep) != 1 or self.sep in _BAD_SEPS:
            raise SchemaError(
                f"schema {self.name!r}: sep must be one character other than a quote or a "
                f"line break (e.g. ',', ';', '\\t', '|'); got {self.sep!r}"
            )
        try:
            codecs.lookup(self.encoding)
        except (LookupError, TypeError) as exc:
            raise SchemaError(
                f"schema {self.name!r}: encoding must be a Python codec name (e.g. 'utf-8', "
                f"'latin-1', 'utf-16'); got {self.encoding!r}"
            ) from exc
        names = [c.name for c in self.columns]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SchemaError(f"schema {self.name!r}: columns declared twice: {sorted(dup)}")
        if not self.columns:
            raise SchemaError(f"schema {self.name!r}: declares no feature columns")
        clash = set(names) & ({self.target.column} | set(self.drop))
        if clash:
            raise SchemaError(
                f"schema {self.name!r}: {sorted(clash)} is both a feature and target/drop"
            )
        object.__setattr__(self, "drop", tuple(self.drop))
        object.__setattr__(self, "missing_tokens", tuple(self.missing_tokens))
        self._check_unit(set(names))
        self._refuse_declared_missing()

    def _check_unit(self, features: set[str]) -> None:
        """The unit keys together or not at all (:func:`fedpriv.data.units.check_unit_keys`)."""
        try:
            check_unit_keys(self, features)
        except ValueError as exc:
            raise SchemaError(f"schema {self.name!r}: {exc}") from None

    @property
    def unit_records(self) -> int:
        """m: the records of one unit a node may use (1 without a unit column)."""
        return 1 if self.max_records_per_unit is None else int(self.max_records_per_unit)

    @property
    def privacy_unit(self) -> str:
        """Whom the guarantee protects, as reports say it: ``"record"``, or
        ``"<unit column>, at most m records"``."""
        return privacy_unit(self.unit_column, self.max_records_per_unit)

    def _refuse_declared_missing(self) -> None:
        """A declared level, binary value or label that is also a missing token can never
        be read (the reader turns it into a missing cell first): refuse the schema."""
        tokens = {str(t).strip() for t in self.missing_tokens}
        declared: list[tuple[str, str, tuple[str, ...]]] = [
            (f"target {self.target.column!r}", "labels", self.target.labels)
        ]
        for c in self.columns:
            if isinstance(c, CategoricalColumn):
                declared.append((f"column {c.name!r}", "categories", c.categories))
            elif isinstance(c, BinaryColumn):
                declared.append((f"column {c.name!r}", "positive", c.positive))
                declared.append((f"column {c.name!r}", "negative", c.negative))
        for where, key, values in declared:
            clash = [v for v in values if v in tokens]
            if clash:
                raise SchemaError(
                    f"schema {self.name!r}, {where}: {key} value {clash[0]!r} is also a missing "
                    f"token (missing_tokens = {list(self.missing_tokens)}), so it would be read "
                    "as a missing cell; rename the level, or remove it from missing_tokens"
                )

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(n for c in self.columns for n in c.feature_names())

    @property
    def n_features(self) -> int:
        return sum(c.width for c in self.columns)

    @property
    def column_widths(self) -> tuple[int, ...]:
        """Encoded features per schema column (one-hot levels, value + indicator, 1)."""
        return tuple(c.width for c in self.columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def digest(self) -> str:
        """Stable hash of everything that affects encoding (cache key component)."""
        payload = json.dumps(_to_jsonable(self), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    # -- TOML ---------------------------------------------------------------
    @classmethod
    def from_toml(cls, path: str | Path) -> Schema:
        """Read a schema file (format: ``experiments/schemas/example.toml``)."""
        path = Path(path)
        if path.is_dir():
            raise SchemaError(f"{path}: is a directory, not a schema file (a .toml file)")
        if not path.is_file():
            raise SchemaError(
                f"{path}: schema file not found (fedpriv schema draft writes one from a CSV)"
            )
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SchemaError(f"{path}: not valid TOML: {exc}") from exc
        except OSError as exc:
            raise SchemaError(f"{path}: cannot be read: {exc}") from exc
        try:
            return cls.from_dict(data)
        except SchemaError as exc:
            raise SchemaError(f"{path}: {exc}") from exc

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schema:
        """A schema from its TOML tables; an unknown key at any level is a :class:`SchemaError`.

        Loader-specific settings go in the ``[extra]`` table (kept as
        :attr:`extra`, unchecked): a misspelt key elsewhere must not be
        stored and silently ignored (e.g. ``client_colum``, which would fall
        back to an IID split).
        """
        from fedpriv.data.schema_toml import schema_from_dict

        return schema_from_dict(cls, data)


#: Characters that cannot separate fields (the CSV quote and line breaks).
_BAD_SEPS = frozenset({'"', "\n", "\r"})


def _as_tuple(v: object) -> tuple:
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return (v,)


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if hasattr(obj, "__dataclass_fields__"):
        out = {"__kind__": type(obj).__name__}
        for f in fields(obj):
            if f.name != "extra":
                out[f.name] = _to_jsonable(getattr(obj, f.name))
        return out
    if isinstance(obj, dict):
        return {k: _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    return obj
