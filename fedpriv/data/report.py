"""What loading did to a table's rows, for the data's owner only.

A :class:`LoadReport` counts drops, clips, out-of-domain values and missing
cells per column; :meth:`LoadReport.warnings` is what the owner must see
(:func:`log_report` writes it to the local log at every load).
:func:`refuse_out_of_bounds_columns` refuses a numeric column that clipping
would make (almost) constant. All of it is about the curator's own private
rows and stays with the curator: never sent to the server, never released.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fedpriv.data.errors import DataError
from fedpriv.data.schema import NumericColumn, Schema
from fedpriv.logs import get_logger

logger = get_logger(__name__)


@dataclass
class LoadReport:
    """What loading did to the rows: drops (with reasons), clips, unseen values, missing
    cells, and the file's columns the schema does not declare (ignored).

    Everything here is about the curator's own rows and stays with the curator:
    :func:`log_report` writes :meth:`warnings` to the local log at every load
    (``unseen`` keeps the values themselves, which the log and
    :meth:`summary` leave out).
    """

    source: str
    n_rows: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    clipped_low: dict[str, int] = field(default_factory=dict)
    clipped_high: dict[str, int] = field(default_factory=dict)
    unseen: dict[str, dict[str, int]] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    undeclared: list[str] = field(default_factory=list)
    #: Public bounds [lo, hi] of each numeric column (from the schema), for the messages.
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Present (non-missing) values read per numeric column: what the clip counts are of.
    present: dict[str, int] = field(default_factory=dict)

    def _order(self, col: str) -> int:
        # Schema order where known (bounds are recorded in it), else after.
        keys = list(self.bounds or {})
        return keys.index(col) if col in keys else len(keys)

    def drop(self, reason: str, count: int) -> None:
        if count:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(count)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "n_rows": self.n_rows,
            "dropped": dict(self.dropped),
            "clipped_low": dict(self.clipped_low),
            "clipped_high": dict(self.clipped_high),
            "unseen": {k: dict(v) for k, v in self.unseen.items()},
            "missing": dict(self.missing),
            "undeclared": list(self.undeclared),
            "bounds": {k: list(v) for k, v in self.bounds.items()},
            "present": dict(self.present),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadReport:
        d = dict(d)
        d["bounds"] = {k: tuple(v) for k, v in d.get("bounds", {}).items()}
        return cls(**d)

    def unseen_counts(self) -> dict[str, int]:
        """Out-of-domain values per column (mapped to the column's ``<missing>`` level)."""
        return {col: sum(v.values()) for col, v in self.unseen.items()}

    def warnings(self) -> list[str]:
        """What the user must see without asking: values clipped to their column's bounds,
        values that left their declared domain, and file columns the schema ignores.

        Column names and counts only. The counts are facts about the curator's own
        private rows: they are for the node's operator (the local log and console, the
        local run's files), never sent to the server or another party (no mechanism
        accounts for them).
        """
        out = []
        bounds = self.bounds or {}
        for col in sorted(set(self.clipped_low) | set(self.clipped_high), key=self._order):
            low, high = self.clipped_low.get(col, 0), self.clipped_high.get(col, 0)
            lo_hi = bounds.get(col)
            to = f" to [{lo_hi[0]:g}, {lo_hi[1]:g}]" if lo_hi else " to the schema's bounds"
            where = ", ".join(
                p for p in (f"{low:,} below" if low else "", f"{high:,} above" if high else "") if p
            )
            of = f" of {self.present[col]:,}" if self.present.get(col) else ""
            out.append(
                f"{self.source}: column {col!r}: {low + high:,}{of} values clipped{to} "
                f"({where}); check the file's unit against the schema's public bounds"
            )
        for col, n in self.unseen_counts().items():
            out.append(
                f"{self.source}: column {col!r}: {n} value(s) outside the declared categories "
                "were encoded as <missing>; add them to the schema's categories, or set "
                'missing = "error" to refuse them'
            )
        if self.undeclared:
            out.append(
                f"{self.source}: {len(self.undeclared)} column(s) not declared in the schema "
                f"are ignored: {self.undeclared}; declare them, or list them in drop"
            )
        return out

    def summary(self) -> str:
        parts = [f"{self.source}: {self.n_rows} rows"]
        if self.dropped:
            parts.append("dropped " + ", ".join(f"{v} {k}" for k, v in self.dropped.items()))
        n_clip = sum(self.clipped_low.values()) + sum(self.clipped_high.values())
        if n_clip:
            parts.append(f"{n_clip} values clipped to schema bounds")
        unseen = self.unseen_counts()
        if unseen:
            per_column = ", ".join(f"{c} {n}" for c, n in unseen.items())
            parts.append(
                f"{sum(unseen.values())} values outside declared domains, encoded as "
                f"<missing> ({per_column})"
            )
        if self.undeclared:
            parts.append(f"ignored undeclared columns {self.undeclared}")
        return "; ".join(parts)


def log_report(report: LoadReport) -> None:
    """Log ``report``'s :meth:`~LoadReport.warnings` at WARNING (the curator's local log)."""
    for message in report.warnings():
        logger.warning(message)


#: Share of a numeric column's present values outside its bounds from which the column
#: is refused rather than clipped: it would become (almost) constant, which is nearly
#: always a unit mismatch (ages in months, a weight in grams), not a few outliers.
OUT_OF_BOUNDS_REFUSED = 0.99


def refuse_out_of_bounds_columns(frame: pd.DataFrame, schema: Schema, *, source: str) -> None:
    """Refuse a numeric column whose present values lie (nearly) all outside its bounds.

    A local check on the curator's own rows: the error stays with the data's owner
    (a Flower node sends only its code and the column, as for every
    :class:`~fedpriv.data.errors.DataError`; :func:`fedpriv.errors.public_error`).
    Run by the loaders of a user's training file (:func:`fedpriv.data.load_csv`,
    :func:`fedpriv.data.node.read_encoded`) after :func:`encode`, which stays a
    row-wise map (a row's encoding never depends on another row); not on the rows
    a model scores, where one out-of-bound row is clipped as in training.

    Raises
    ------
    DataError
        ``column 'age': 4,800 of 4,800 values lie outside the bounds [18, 100] ...``.
    """
    for spec in schema.columns:
        if not isinstance(spec, NumericColumn):
            continue
        # The cells were checked to be numbers and finite by :func:`encode_features`.
        x = pd.to_numeric(frame[spec.name], errors="coerce").to_numpy(dtype=np.float64)
        present = int((~np.isnan(x)).sum())
        out = int(((x < spec.lo) | (x > spec.hi)).sum())
        if out and out >= OUT_OF_BOUNDS_REFUSED * present:
            raise DataError(
                f"{out:,} of {present:,} values lie outside the bounds "
                f"[{spec.lo:g}, {spec.hi:g}], so clipping would make the column (almost) "
                "constant: check the unit of the file's values against the schema's bounds",
                code="values_out_of_bounds",
                source=source,
                column=spec.name,
            )
