"""Which schema columns a released tree model splits on: the trees' ``explain``.

A tree model's structure is part of what it releases (each node's feature and
threshold, :mod:`fedpriv.models.base`), so counting the internal nodes that
split on each column reads released values only. What the count means depends
on how the splits were chosen:

* ``boosting`` and ``random_forest``: complete random trees, each split's
  feature drawn from the public schema with the run's public seed before any
  row is read. Their usage is the random draw, not what the data favoured.
* ``lumberjack``: random proposals, kept where the released heavy-hitter
  test said the node was heavy: usage counts the splits that survived pruning.
* ``bdpe``: each split chosen by an exponential mechanism on the rows: usage
  is data-driven (and released).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: How each structure's splits were chosen (module docstring).
RANDOM, PRUNED, SELECTED = "random", "pruned", "selected"
NOTES = {
    RANDOM: "splits drawn at random from the public schema before any row was read: "
    "the usage shows the random draw, not what the data favoured",
    PRUNED: "random split proposals kept where the released heavy-hitter test found the "
    "node heavy: the usage counts the splits that survived",
    SELECTED: "each split chosen by an exponential mechanism over the rows (released): "
    "the usage is data-driven",
}


@dataclass(frozen=True, kw_only=True)
class SplitUsage:
    """Internal nodes splitting on each column, over every tree of a released model.

    Attributes
    ----------
    columns : tuple of str
        The schema's columns (``x<j>`` per encoded feature without a schema).
    counts : ndarray
        (n_columns,) int64: the internal nodes splitting on each column.
    trees : int
        Trees in the model.
    origin : str
        How the splits were chosen: ``random``, ``pruned`` or ``selected`` (:data:`NOTES`).
    """

    columns: tuple[str, ...]
    counts: np.ndarray
    trees: int
    origin: str

    @property
    def note(self) -> str:
        return NOTES[self.origin]

    @property
    def shares(self) -> np.ndarray:
        """Each column's share of the internal nodes."""
        total = int(self.counts.sum())
        return self.counts / total if total else np.zeros(self.counts.size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "counts": self.counts.tolist(),
            "trees": self.trees,
            "origin": self.origin,
            "note": self.note,
        }

    def to_text(self) -> str:
        """One line per column, most used first."""
        order = np.argsort(-self.counts, kind="stable")
        width = max(len(c) for c in self.columns)
        lines = [f"split usage over {self.trees} trees ({self.note}):"]
        shares = self.shares
        for j in order:
            lines.append(
                f"  {self.columns[j]:<{width}}  {int(self.counts[j]):6d}  {shares[j]:6.1%}"
            )
        return "\n".join(lines)


def feature_columns(schema: Any, n_features: int) -> tuple[tuple[str, ...], np.ndarray]:
    """Column names and the column of each encoded feature (one-hot levels and a missing
    indicator belong to their column); without a schema each feature is its own."""
    if schema is None:
        return tuple(f"x{j}" for j in range(n_features)), np.arange(n_features)
    widths = np.asarray(schema.column_widths, dtype=np.int64)
    if int(widths.sum()) != n_features:
        raise ValueError(
            f"the schema encodes {int(widths.sum())} features but the model reads "
            f"{n_features}: not the schema it was fitted on"
        )
    return tuple(schema.column_names), np.repeat(np.arange(widths.size), widths)


def split_usage(features: np.ndarray, schema: Any, *, trees: int, origin: str) -> SplitUsage:
    """:class:`SplitUsage` of the internal nodes' encoded ``features`` (leaves excluded)."""
    f = np.asarray(features, dtype=np.int64).reshape(-1)
    n_features = schema.n_features if schema is not None else int(f.max(initial=-1)) + 1
    names, column = feature_columns(schema, n_features)
    if f.size and (f.min() < 0 or f.max() >= n_features):
        raise ValueError(f"split features {f.min()}..{f.max()} outside 0..{n_features - 1}")
    counts = np.bincount(column[f], minlength=len(names)).astype(np.int64)
    return SplitUsage(columns=names, counts=counts, trees=trees, origin=origin)
