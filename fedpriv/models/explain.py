"""A released GAM's terms in the schema's raw units: what ``GAMModel.explain`` returns.

A DP-EBM model (:mod:`fedpriv.models.gam`) is ``f(x) = b + Σ_k s_k[bin_k(x)]``
on the logit scale, each term ``k`` one schema column binned on the public
encoded box [0, 1]. :func:`explain_gam` names every term and states its bins
in the units a reader knows:

* a numeric column: the cut points mapped back through the schema's public
  min-max scaling and transform (``x = T⁻¹(T(lo) + u·(T(hi) − T(lo)))``,
  :func:`raw_values`), so bin ``b`` is ``[edges[b], edges[b + 1])`` in raw
  units, plus a ``missing`` bin when the column has a missing indicator;
* a binary column: its negative and positive values;
* a categorical column: one bin per declared level (and ``<missing>``).

Everything here reads the released shapes and the public schema only. The
noise band of each bin (:mod:`fedpriv.models.gam_noise`) and importances over
rows (:func:`term_importance`: the caller passes *public* rows, e.g. a
published test split; importances over private rows would be a release) are
separate, so that this module never decides which rows are public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

#: The three kinds of term a schema column gives.
NUMERIC, BINARY, CATEGORICAL = "numeric", "binary", "categorical"


@dataclass(frozen=True, kw_only=True)
class TermShape:
    """One term's shape function in raw units.

    Attributes
    ----------
    name : str
        The schema column (``x<j>`` for a model fitted on bare arrays).
    kind : str
        ``"numeric"``, ``"binary"`` or ``"categorical"``.
    labels : tuple of str
        One label per bin, in bin order (``[a, b)`` in raw units for a numeric
        value bin, ``missing``, a level, or a binary value).
    values : ndarray
        The released shape, (n_bins,) logits, or (n_bins, C) for a softmax model.
    edges : ndarray
        A numeric term's value-bin edges in raw units, (n_value_bins + 1,),
        from the public lower to the public upper bound; empty otherwise.
    missing : bool
        Whether the last bin is the missing-value bin.
    transform : str
        The schema's public transform of a numeric column (``identity`` otherwise).
    noise_std : ndarray or None
        Per bin, an upper bound on the standard deviation of the noise the
        released shape carries (:func:`fedpriv.models.gam_noise.with_noise_band`);
        ``None`` where it is not known.
    visits : int or None
        The rounds whose release updated this term (from the privacy card).
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    values: np.ndarray
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0))
    missing: bool = False
    transform: str = "identity"
    noise_std: np.ndarray | None = None
    visits: int | None = None

    @property
    def spread(self) -> float:
        """max − min of the shape over its bins (logits; the largest class spread for a
        softmax shape): an importance that reads no row at all."""
        v = np.asarray(self.values, dtype=np.float64).reshape(self.values.shape[0], -1)
        return float(np.max(v.max(axis=0) - v.min(axis=0)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists of floats)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "labels": list(self.labels),
            "values": np.asarray(self.values).tolist(),
            "edges": np.asarray(self.edges).tolist(),
            "missing": self.missing,
            "transform": self.transform,
            "noise_std": None if self.noise_std is None else np.asarray(self.noise_std).tolist(),
            "visits": self.visits,
            "spread": self.spread,
        }


@dataclass(frozen=True, kw_only=True)
class GAMExplanation:
    """A released GAM as named terms (:func:`explain_gam`)."""

    intercept: float | np.ndarray
    terms: tuple[TermShape, ...]
    #: Interaction terms, by the names of their two columns (values not expanded here).
    pairs: tuple[tuple[str, str], ...] = ()
    #: How :attr:`TermShape.noise_std` was derived, when it was (else empty).
    noise_rule: str = ""

    def term(self, name: str) -> TermShape:
        """The term of column ``name``."""
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {name!r}; terms: {[t.name for t in self.terms]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "intercept": np.asarray(self.intercept).tolist(),
            "terms": [t.to_dict() for t in self.terms],
            "pairs": [list(p) for p in self.pairs],
            "noise_rule": self.noise_rule,
        }

    def to_text(self) -> str:
        """Every term, bin by bin: label, value and (if known) the noise bound."""
        base = np.asarray(self.intercept)
        lines = [f"intercept {_num(base) if base.ndim == 0 else base.round(4).tolist()}"]
        for t in self.terms:
            head = f"{t.name} ({t.kind}"
            head += f", {t.transform} scale" if t.transform != "identity" else ""
            head += "" if t.visits is None else f", updated in {t.visits} rounds"
            lines.append(f"\n{head}, spread {t.spread:.4f}):")
            for b, label in enumerate(t.labels):
                v = np.asarray(t.values[b])
                value = _num(v) if v.ndim == 0 else str(v.round(4).tolist())
                band = "" if t.noise_std is None else f"  ± {float(t.noise_std[b]):.4f}"
                lines.append(f"  {label:<28} {value}{band}")
        if self.pairs:
            lines.append("\ninteractions: " + ", ".join(f"{a} × {b}" for a, b in self.pairs))
        if self.noise_rule:
            lines.append(f"\n± : {self.noise_rule}")
        return "\n".join(lines)


def _num(x: Any) -> str:
    return f"{float(x):+.4f}"


def raw_values(spec: Any, u: np.ndarray) -> np.ndarray:
    """Encoded values ``u`` ∈ [0, 1] of numeric column ``spec`` back in raw units: the
    inverse of the public transform and min-max scaling (:mod:`fedpriv.data.encode`)."""
    from fedpriv.data.schema import Transform

    lo_t, hi_t = spec.transform.apply(np.array([spec.lo, spec.hi], dtype=np.float64))
    t = lo_t + np.asarray(u, dtype=np.float64) * (hi_t - lo_t)
    if spec.transform is Transform.LOG1P:
        return np.expm1(t)
    if spec.transform is Transform.SQRT:
        return np.square(t)
    return t


def _edge_text(x: float) -> str:
    if math.isfinite(x) and abs(x - round(x)) < 1e-9 * max(1.0, abs(x)):
        return str(round(x))
    return f"{x:.4g}"


def _value_labels(edges: np.ndarray) -> list[str]:
    """``[a, b)`` per value bin; the last closed (the public upper bound is inclusive)."""
    n = edges.size - 1
    return [
        f"[{_edge_text(edges[b])}, {_edge_text(edges[b + 1])}{']' if b == n - 1 else ')'}"
        for b in range(n)
    ]


def _schema_term(spec: Any, cuts: np.ndarray, values: np.ndarray, missing: bool) -> TermShape:
    from fedpriv.data.schema import BinaryColumn, CategoricalColumn

    if isinstance(spec, CategoricalColumn):
        labels = [name.split("=", 1)[1] for name in spec.feature_names()]
        return TermShape(name=spec.name, kind=CATEGORICAL, labels=tuple(labels), values=values)
    if isinstance(spec, BinaryColumn):
        labels = ("/".join(spec.negative), "/".join(spec.positive))
        return TermShape(name=spec.name, kind=BINARY, labels=labels, values=values)
    edges = raw_values(spec, np.concatenate([[0.0], cuts, [1.0]]))
    labels = _value_labels(edges) + (["missing"] if missing else [])
    return TermShape(
        name=spec.name,
        kind=NUMERIC,
        labels=tuple(labels),
        values=values,
        edges=edges,
        missing=missing,
        transform=spec.transform.value,
    )


def _box_term(j: int, cuts: np.ndarray, values: np.ndarray, levels: int) -> TermShape:
    """A term of a model fitted on bare arrays: encoded units (the box [0, 1])."""
    if levels > 0:
        labels = tuple(f"level {i}" for i in range(levels))
        return TermShape(name=f"x{j}", kind=CATEGORICAL, labels=labels, values=values)
    edges = np.concatenate([[0.0], cuts, [1.0]])
    return TermShape(
        name=f"x{j}", kind=NUMERIC, labels=tuple(_value_labels(edges)), values=values, edges=edges
    )


def explain_gam(model: Any, schema: Any = None) -> GAMExplanation:
    """``model``'s terms (a :class:`~fedpriv.models.gam.GAMModel`) in raw units.

    Parameters
    ----------
    model : GAMModel
        The released model.
    schema : Schema, optional
        The public schema it was fitted on (one term per column, in column
        order); without one, terms are named ``x<j>`` in encoded units.

    Raises
    ------
    ValueError
        If the schema's columns are not the model's terms.
    """
    terms = model.terms
    if schema is not None and len(schema.columns) != terms.m:
        raise ValueError(
            f"the schema has {len(schema.columns)} columns but the model {terms.m} terms: "
            "not the schema it was fitted on"
        )
    out = []
    for k in range(terms.m):
        values = np.asarray(model.shapes[k], dtype=np.float64)
        cuts = terms.cuts[k]
        if schema is None:
            out.append(_box_term(int(terms.feature[k]), cuts, values, int(terms.levels[k])))
        else:
            spec = schema.columns[k]
            out.append(_schema_term(spec, cuts, values, bool(terms.missing[k] >= 0)))
    names = [t.name for t in out]
    pairs = tuple((names[p.a], names[p.b]) for p in model.pairs)
    return GAMExplanation(intercept=model.base, terms=tuple(out), pairs=pairs)


def term_contributions(model: Any, X: np.ndarray) -> np.ndarray:
    """(m, n[, C]): each term's logit contribution ``s_k[bin_k(x)]`` to each row of ``X``
    (encoded rows; pairs not included)."""
    from fedpriv.models.gam import bin_matrix

    XT = np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)
    bins = bin_matrix(model.terms, XT)
    return np.stack([np.asarray(s)[bins[k]] for k, s in enumerate(model.shapes)])


def term_importance(model: Any, X: np.ndarray) -> np.ndarray:
    """(m,) mean absolute centred contribution of each term over the rows ``X``:
    ``mean_i |s_k(x_i) − mean_j s_k(x_j)|`` (as EBM's term importance, which averages
    over centred shapes; a softmax model's averaged over the classes too).

    The rows must be public (a published test split, the run's public evaluation
    file): an average over private rows would be a release no mechanism accounts for.
    """
    c = term_contributions(model, X)
    if c.shape[1] == 0:
        return np.full(c.shape[0], np.nan)
    centred = c - c.mean(axis=1, keepdims=True)
    return np.abs(centred).reshape(c.shape[0], -1).mean(axis=1)


def with_terms(explanation: GAMExplanation, terms: list[TermShape], rule: str) -> GAMExplanation:
    """``explanation`` with its terms replaced (e.g. noise bands added) and the rule stated."""
    return replace(explanation, terms=tuple(terms), noise_rule=rule)
