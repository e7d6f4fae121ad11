"""Row-wise, schema-only encoding of a raw table into model matrices.

Every transformation uses the public schema and nothing else: numeric values
are transformed, clipped to the schema bounds and min-max scaled with those
bounds; categories are one-hot encoded over the declared domain. The encoding
of a row therefore never depends on any other row (a test checks this). Each
clip, unseen category and missing cell is counted in a :class:`LoadReport`.

Two views come out of one pass:

* ``X`` — the one-hot view (numeric in [0, 1], one column per category);
* ``X_ordinal`` — one column per schema column: numeric in [0, 1], binary 0/1,
  categorical as its integer level (``<missing>`` is the last level). Forests
  split on it.

A value outside a categorical column's domain is an error where the column
has ``missing = "error"``, else it is encoded as ``<missing>`` and counted per
column in the report. Columns of the file the schema does not declare
(neither feature, target, client column nor ``drop``) are ignored and listed
in the report.
"""

from __future__ import annotations

__all__ = [
    "OUT_OF_BOUNDS_REFUSED",
    "Encoded",
    "LoadReport",
    "box_standardisation",
    "encode",
    "encode_features",
    "encode_target",
    "feature_columns",
    "feature_space_numeric",
    "log_report",
    "refuse_out_of_bounds_columns",
]

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedpriv.data.errors import DataError
from fedpriv.data.report import (
    OUT_OF_BOUNDS_REFUSED,
    LoadReport,
    log_report,
    refuse_out_of_bounds_columns,
)
from fedpriv.data.schema import (
    BinaryColumn,
    CategoricalColumn,
    Missing,
    NumericColumn,
    Schema,
    canonical,
)
from fedpriv.data.units import unit_ids


@dataclass(frozen=True)
class Encoded:
    """Encoded rows of one table."""

    X: np.ndarray
    X_ordinal: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    report: LoadReport
    #: Each row's unit id as written (text), with a schema ``unit_column``; else ``None``.
    units: np.ndarray | None = None


def _factorize(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    # Canonicalise distinct values only: cheap even for 250k-row columns.
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return codes, [canonical(u) for u in uniques]


def _first_line(mask: np.ndarray, lines: np.ndarray) -> int:
    return int(lines[np.flatnonzero(mask)[0]])


def _count_missing(
    miss: np.ndarray, spec, report: LoadReport, source: str, lines: np.ndarray
) -> None:
    """Count missing cells, or refuse them where the schema allows none."""
    if not miss.any():
        return
    if spec.missing is Missing.ERROR:
        raise DataError(
            "value is missing and the schema allows no missing values here",
            code="missing_value",
            source=source,
            column=spec.name,
            line=_first_line(miss, lines),
        )
    report.missing[spec.name] = int(miss.sum())


def encode_target(
    frame: pd.DataFrame, schema: Schema, *, source: str, lines: np.ndarray
) -> np.ndarray:
    """Class codes from the schema's target (0/1 for a binary target, the label's
    position for a multiclass one); undeclared or missing labels are errors."""
    col = schema.target.column
    codes, uniques = _factorize(frame[col])
    if (codes < 0).any():
        raise DataError(
            "label is missing",
            code="missing_label",
            source=source,
            column=col,
            line=_first_line(codes < 0, lines),
        )
    allowed = set(schema.target.labels)
    bad = [i for i, u in enumerate(uniques) if u not in allowed]
    if bad:
        mask = np.isin(codes, bad)
        value = uniques[codes[np.flatnonzero(mask)[0]]]
        raise DataError(
            f"label {value!r} is outside the declared label set {list(schema.target.labels)}",
            code="label_outside_label_set",
            source=source,
            column=col,
            line=_first_line(mask, lines),
        )
    if schema.target.multiclass:
        position = {label: i for i, label in enumerate(schema.target.labels)}
        return np.array([position[u] for u in uniques], dtype=np.int8)[codes]
    positive = np.array([u in set(schema.target.positive) for u in uniques], dtype=np.int8)
    return positive[codes]


def _numeric(
    series: pd.Series, spec: NumericColumn, report: LoadReport, source: str, lines: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    raw = series
    if not pd.api.types.is_numeric_dtype(raw):
        parsed = pd.to_numeric(raw, errors="coerce")
        bad = parsed.isna().to_numpy() & raw.notna().to_numpy()
        if bad.any():
            i = np.flatnonzero(bad)[0]
            raise DataError(
                f"value {raw.iloc[i]!r} is not a number",
                code="not_a_number",
                source=source,
                column=spec.name,
                line=int(lines[i]),
            )
        raw = parsed
    x = raw.to_numpy(dtype=np.float64, copy=True)
    infinite = np.isinf(x)
    if infinite.any():
        # ``inf`` is no measurement: clipping it to a bound would invent one.
        i = np.flatnonzero(infinite)[0]
        raise DataError(
            f"value {float(x[i])!r} is not a finite number; the column's bounds are "
            f"[{spec.lo:g}, {spec.hi:g}]: write the value, or list the token in the schema's "
            "missing_tokens to read it as missing",
            code="not_finite",
            source=source,
            column=spec.name,
            line=int(lines[i]),
        )
    miss = np.isnan(x)
    _count_missing(miss, spec, report, source, lines)
    x[miss] = spec.lo
    low, high = x < spec.lo, x > spec.hi
    report.bounds[spec.name] = (spec.lo, spec.hi)
    report.present[spec.name] = report.present.get(spec.name, 0) + int((~miss).sum())
    if low.any():
        report.clipped_low[spec.name] = int(low.sum())
    if high.any():
        report.clipped_high[spec.name] = int(high.sum())
    np.clip(x, spec.lo, spec.hi, out=x)
    lo_t, hi_t = spec.transform.apply(np.array([spec.lo, spec.hi]))
    scaled = (spec.transform.apply(x) - lo_t) / (hi_t - lo_t)
    return scaled, miss


def _levels(
    series: pd.Series,
    spec: CategoricalColumn | BinaryColumn,
    report: LoadReport,
    source: str,
    lines: np.ndarray,
    domain: tuple[str, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Level index per row (-1: missing, -2: outside the domain)."""
    codes, uniques = _factorize(series)
    index = {c: i for i, c in enumerate(domain)}
    lut = np.array([index.get(u, -2) for u in uniques] + [-1], dtype=np.int64)
    levels = lut[codes]  # code -1 (missing) picks the trailing -1
    miss = levels == -1
    _count_missing(miss, spec, report, source, lines)
    unseen = levels == -2
    if unseen.any():
        counts = pd.Series(np.asarray(uniques, dtype=object)[codes[unseen]]).value_counts()
        report.unseen[spec.name] = {str(k): int(v) for k, v in counts.items()}
    return levels, unseen


def encode_features(
    frame: pd.DataFrame, schema: Schema, *, source: str, lines: np.ndarray, report: LoadReport
) -> tuple[np.ndarray, np.ndarray]:
    """One-hot and ordinal views of the schema's feature columns."""
    n = len(frame)
    X = np.zeros((n, schema.n_features), dtype=np.float64)
    X_ord = np.zeros((n, len(schema.columns)), dtype=np.float64)
    j = 0
    for k, spec in enumerate(schema.columns):
        series = frame[spec.name]
        if isinstance(spec, NumericColumn):
            scaled, miss = _numeric(series, spec, report, source, lines)
            X[:, j] = scaled
            X_ord[:, k] = scaled
            if spec.missing is Missing.INDICATOR:
                X[:, j + 1] = miss
        elif isinstance(spec, BinaryColumn):
            domain = spec.negative + spec.positive
            levels, unseen = _levels(series, spec, report, source, lines, domain)
            if unseen.any():
                bad = np.flatnonzero(unseen)[0]
                raise DataError(
                    f"value {series.iloc[bad]!r} is neither {list(spec.positive)} nor "
                    f"{list(spec.negative)}",
                    code="value_outside_domain",
                    source=source,
                    column=spec.name,
                    line=int(lines[bad]),
                )
            X[:, j] = levels >= len(spec.negative)
            X_ord[:, k] = X[:, j]
        else:
            levels, unseen = _levels(series, spec, report, source, lines, spec.categories)
            if unseen.any() and spec.missing is Missing.ERROR:
                bad = np.flatnonzero(unseen)[0]
                raise DataError(
                    f"value {series.iloc[bad]!r} is not in the declared categories "
                    f"{list(spec.categories)}; add it to the schema's categories, or set "
                    'missing = "category" to encode it as <missing> (counted in the load report)',
                    code="value_outside_domain",
                    source=source,
                    column=spec.name,
                    line=int(lines[bad]),
                )
            n_cat = len(spec.categories)
            if spec.missing is Missing.CATEGORY:
                # Missing and out-of-domain values share the <missing> level.
                levels = np.where(levels < 0, n_cat, levels)
            rows = np.flatnonzero(levels >= 0)
            X[rows, j + levels[rows]] = 1.0
            X_ord[:, k] = np.where(levels >= 0, levels, -1)
        j += spec.width
    return X, X_ord


def box_standardisation(schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Public (shift, scale) per encoded feature: x ↦ (x − shift)·scale.

    Numeric value features, min-max scaled into [0, 1] by the public bounds,
    are standardised as if uniform on that box: mean ½ and sd 1/√12, so
    x ↦ √12 (x − ½). Indicators, binary and one-hot features keep their 0/1
    values. The map depends on the schema only (rule 2: no data statistics);
    it is what gradient-based models see in place of the paper's
    training-set standardisation (benchmark paper §4.1), which is not private.
    """
    shift = np.zeros(schema.n_features)
    scale = np.ones(schema.n_features)
    j = 0
    for spec in schema.columns:
        if isinstance(spec, NumericColumn):
            shift[j], scale[j] = 0.5, math.sqrt(12.0)
        j += spec.width
    return shift, scale


def feature_space_numeric(schema: Schema) -> np.ndarray:
    """Per encoded feature: True for a numeric column's value, False for 0/1 features.

    One-hot levels, binary columns and missing indicators are 0/1; random
    forests split the former at a threshold in their public range and the
    latter once per path (Lumberjack §5).
    """
    out = np.zeros(schema.n_features, dtype=bool)
    j = 0
    for spec in schema.columns:
        if isinstance(spec, NumericColumn):
            out[j] = True
        j += spec.width
    return out


def feature_columns(schema: Schema) -> np.ndarray:
    """Per encoded feature: the index of its schema column, except that a numeric
    column's missing indicator gets a column id of its own (after all columns)."""
    out = np.zeros(schema.n_features, dtype=np.int64)
    extra = len(schema.columns)
    j = 0
    for k, spec in enumerate(schema.columns):
        out[j : j + spec.width] = k
        if isinstance(spec, NumericColumn) and spec.width == 2:
            out[j + 1] = extra
            extra += 1
        j += spec.width
    return out


def encode(
    frame: pd.DataFrame,
    schema: Schema,
    *,
    source: str,
    lines: np.ndarray | None = None,
    report: LoadReport | None = None,
) -> Encoded:
    """Encode ``frame`` (raw cells, missing as NaN) with ``schema``.

    Parameters
    ----------
    frame : pandas.DataFrame
        Raw rows; must hold every schema column and the target column.
    source : str
        File or dataset name used in errors and the report.
    lines : numpy.ndarray, optional
        File line number of each row, for error messages (default: row + 2).
    report : LoadReport, optional
        A report to extend (e.g. one that already lists dataset-level drops).
    """
    lines = np.arange(len(frame)) + 2 if lines is None else np.asarray(lines)
    report = report or LoadReport(source=source)
    if len(frame) == 0:
        raise DataError("no data rows", code="no_data_rows", source=source)
    needed = [*schema.column_names, schema.target.column]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise DataError(
            f"missing column(s) {absent}; the file has {list(frame.columns)}",
            code="missing_column",
            source=source,
            column=absent[0],
        )
    for c in needed:
        if frame[c].isna().all():
            raise DataError(
                "column is entirely missing",
                code="column_entirely_missing",
                source=source,
                column=c,
            )
    declared = {*needed, *schema.drop, schema.client_column, schema.unit_column}
    for c in frame.columns:
        if c not in declared and c not in report.undeclared:
            report.undeclared.append(str(c))
    y = encode_target(frame, schema, source=source, lines=lines)
    X, X_ord = encode_features(frame, schema, source=source, lines=lines, report=report)
    report.n_rows = len(frame)
    units = None
    if schema.unit_column is not None:  # never a feature: kept beside the rows
        units = unit_ids(frame, schema.unit_column, source=source, lines=lines)
    return Encoded(
        X=X, X_ordinal=X_ord, y=y, feature_names=schema.feature_names, report=report, units=units
    )
