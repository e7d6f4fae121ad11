"""DP histogram boosting of one-column trees (DP-EBM): the maths.

A generalised additive model ``f(x) = b + Σ_k s_k[bin_k(x)]`` on the logit
scale (Nori, Caruana et al., "Accuracy, Interpretability, and Differential
Privacy via Explainable Boosting", ICML 2021, Alg. 1). Each *term* k is one
schema column and its shape function ``s_k`` a lookup over the column's
public bins:

* a numeric column: ``B`` equal-width bins over its public box [0, 1] (or
  cuts released by a DP quantile sketch, :func:`quantile_cuts`), plus one bin
  for a missing value when the column has a missing indicator;
* a binary column: two bins (cut at ½);
* a categorical column: one bin per one-hot level.

Every record sits in exactly one bin of every term, which is what makes the
per-bin sums cheap to privatise: one record moves one bin's (Σg, Σh) of a
term by at most (:data:`GRAD_BOUND`, :data:`HESS_BOUND`), so the L2
sensitivity of a term's reply is :data:`L2_SENSITIVITY` = √(1 + 1/16). The
client clips every record's g to [−1, 1] and h to [0, ¼] where it computes
them (:func:`bin_sums`), so the bound holds for any label.

More than two classes: a softmax GAM with C values per bin, its bounds
derived in :mod:`fedpriv.models.gam_softmax`. Pair terms (2-D shape functions
over coarse public bins): :mod:`fedpriv.models.gam_pairs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.models.base import ReleasedModel
from fedpriv.models.gam_pairs import PairTerm, pairs_from_arrays, pairs_to_arrays
from fedpriv.models.gam_softmax import softmax
from fedpriv.models.gam_updates import (  # noqa: F401 - re-exported
    newton_bin_updates,
    residual_gain,
    residual_gains,
)
from fedpriv.models.trees import sigmoid
from fedpriv.validation import check_count

#: |g| ≤ 1 and 0 ≤ h ≤ ¼ per record (logistic loss, clipped where computed).
GRAD_BOUND, HESS_BOUND = 1.0, 0.25
#: L2 sensitivity of one term's per-bin (Σg, Σh): one record sits in one bin.
L2_SENSITIVITY = math.sqrt(GRAD_BOUND**2 + HESS_BOUND**2)
#: At margin 0 (p = ½) a record's g = ½ − y ∈ [−½, ½] and h = ¼ exactly.
INTERCEPT_GRAD_BOUND = 0.5
INTERCEPT_SENSITIVITY = math.sqrt(INTERCEPT_GRAD_BOUND**2 + HESS_BOUND**2)
#: Cells of the public fine grid of the quantile sketch (per numeric column).
FINE_GRID = 256


@dataclass(frozen=True)
class Terms:
    """The public binning of every term (one per schema column).

    Attributes
    ----------
    feature : (m,) int64
        Encoded feature of a threshold term's value, or a one-hot term's first level.
    levels : (m,) int64
        One-hot levels of a categorical term; 0 for a threshold term.
    missing : (m,) int64
        Encoded missing-indicator feature of a numeric term, or −1.
    numeric : (m,) bool
        Whether the term's cuts may come from the quantile sketch (numeric value).
    cuts : tuple of (n_cuts_k,) float64
        Increasing cut points of each threshold term (empty for one-hot terms):
        bin ``b`` holds ``c_{b−1} ≤ x < c_b``.
    """

    feature: np.ndarray
    levels: np.ndarray
    missing: np.ndarray
    numeric: np.ndarray
    cuts: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        for name in ("feature", "levels", "missing"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        object.__setattr__(self, "numeric", np.asarray(self.numeric, dtype=bool))
        cuts = tuple(np.asarray(c, dtype=np.float64).reshape(-1) for c in self.cuts)
        object.__setattr__(self, "cuts", cuts)
        m = self.feature.size
        shapes = {a.shape for a in (self.feature, self.levels, self.missing, self.numeric)}
        if shapes != {(m,)} or len(cuts) != m or m == 0:
            raise ValueError(f"terms need m ≥ 1 entries in every field; got shapes {shapes}")
        for k, c in enumerate(cuts):
            if self.levels[k] < 0 or (self.levels[k] > 0 and c.size):
                raise ValueError(f"term {k}: a one-hot term has levels > 0 and no cuts")
            if c.size and not (np.isfinite(c).all() and (np.diff(c) > 0).all()):
                raise ValueError(f"term {k}: cuts must be finite and increasing; got {c}")

    @property
    def m(self) -> int:
        return int(self.feature.size)

    def n_bins(self, k: int) -> int:
        """Bins of term ``k`` (its reply holds twice as many sums)."""
        if self.levels[k] > 0:
            return int(self.levels[k])
        return self.cuts[k].size + 1 + int(self.missing[k] >= 0)

    @property
    def max_bins(self) -> int:
        return max(self.n_bins(k) for k in range(self.m))

    def check_features(self, n_features: int) -> None:
        """Refuse terms reading a feature the data does not have."""
        top = np.maximum(self.feature + np.maximum(self.levels, 1) - 1, self.missing)
        if self.feature.min() < 0 or top.max() >= n_features:
            raise ValueError(
                f"terms read features up to {int(top.max())}; the data has 0..{n_features - 1}"
            )

    def with_cuts(self, cuts: dict[int, np.ndarray]) -> Terms:
        """The same terms with the cuts of the terms in ``cuts`` replaced."""
        new = tuple(np.asarray(cuts.get(k, c)) for k, c in enumerate(self.cuts))
        return Terms(self.feature, self.levels, self.missing, self.numeric, new)

    def to_arrays(self) -> dict[str, np.ndarray]:
        width = max(1, max(c.size for c in self.cuts))
        cuts = np.zeros((self.m, width))
        for k, c in enumerate(self.cuts):
            cuts[k, : c.size] = c
        return {
            "feature": self.feature.copy(),
            "levels": self.levels.copy(),
            "missing": self.missing.copy(),
            "numeric": self.numeric.copy(),
            "n_cuts": np.array([c.size for c in self.cuts], dtype=np.int64),
            "cuts": cuts,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Terms:
        n_cuts = np.asarray(arrays["n_cuts"], dtype=np.int64)
        cuts = np.asarray(arrays["cuts"], dtype=np.float64).reshape(n_cuts.size, -1)
        return cls(
            feature=arrays["feature"],
            levels=arrays["levels"],
            missing=arrays["missing"],
            numeric=arrays["numeric"],
            cuts=tuple(cuts[k, :c] for k, c in enumerate(n_cuts)),
        )


def equal_width_cuts(bins: int) -> np.ndarray:
    """``bins − 1`` interior cuts of [0, 1] into equal-width bins."""
    b = check_count("bins", bins)
    return np.arange(1, b) / b


def schema_terms(schema, bins: int) -> Terms:
    """One term per schema column, binned from the public schema alone."""
    from fedpriv.data.schema import BinaryColumn, CategoricalColumn, Missing

    feature, levels, missing, numeric, cuts = [], [], [], [], []
    j = 0
    for spec in schema.columns:
        feature.append(j)
        if isinstance(spec, CategoricalColumn):
            levels.append(spec.width)
            missing.append(-1)
            numeric.append(False)
            cuts.append(np.zeros(0))
        elif isinstance(spec, BinaryColumn):
            levels.append(0)
            missing.append(-1)
            numeric.append(False)
            cuts.append(np.array([0.5]))
        else:
            levels.append(0)
            missing.append(j + 1 if spec.missing is Missing.INDICATOR else -1)
            numeric.append(True)
            cuts.append(equal_width_cuts(bins))
        j += spec.width
    return Terms(feature, levels, missing, numeric, tuple(cuts))


def box_terms(n_features: int, bins: int) -> Terms:
    """Without a schema: every feature a numeric term on the public box [0, 1]."""
    d = check_count("n_features", n_features)
    return Terms(
        np.arange(d),
        np.zeros(d),
        np.full(d, -1),
        np.ones(d, dtype=bool),
        tuple(equal_width_cuts(bins) for _ in range(d)),
    )


def term_bins(terms: Terms, k: int, XT: np.ndarray) -> np.ndarray:
    """Bin of every row (columns of the feature-major ``XT``) in term ``k``."""
    f = int(terms.feature[k])
    if terms.levels[k] > 0:
        return np.argmax(XT[f : f + int(terms.levels[k])], axis=0).astype(np.int64)
    cuts = terms.cuts[k]
    b = np.searchsorted(cuts, XT[f], side="right").astype(np.int64)
    if terms.missing[k] >= 0:
        b[XT[int(terms.missing[k])] > 0.5] = cuts.size + 1
    return b


def bin_matrix(terms: Terms, XT: np.ndarray) -> np.ndarray:
    """(m, n) bins of every row in every term."""
    terms.check_features(XT.shape[0])
    return np.stack([term_bins(terms, k, XT) for k in range(terms.m)])


def margins(
    base, shapes: tuple[np.ndarray, ...], bins: np.ndarray, pairs: tuple = ()
) -> np.ndarray:
    """Logit(s) of every row: ``base + Σ_k shapes[k][bins[k]] + Σ_pairs v[cell]`` (summed
    in term order); (n,) for a binary model, (n, C) for a softmax one."""
    if np.ndim(base) == 0:
        out = np.full(bins.shape[1], float(base))
    else:
        out = np.zeros((bins.shape[1], np.size(base))) + np.asarray(base, dtype=np.float64)
    for k, s in enumerate(shapes):
        out += s[bins[k]]
    for pair in pairs:
        out += pair.values[pair.cells(bins)]
    return out


def bin_sums(margin: np.ndarray, y: np.ndarray, bins: np.ndarray, n_bins: int) -> np.ndarray:
    """``[Σg_b | Σh_b]`` over one term's bins, g = σ(f) − y, h = σ(1 − σ), each clipped
    to the bound the sensitivity assumes ([−1, 1] and [0, ¼]) where it is computed."""
    p = sigmoid(np.asarray(margin, dtype=np.float64))
    g = np.clip(p - y, -GRAD_BOUND, GRAD_BOUND)
    h = np.clip(p * (1.0 - p), 0.0, HESS_BOUND)
    b = np.asarray(bins, dtype=np.int64)
    if b.size and (b.min() < 0 or b.max() >= n_bins):
        raise ValueError(f"bins must lie in [0, {n_bins}); got {b.min()}..{b.max()}")
    # float64 even without rows (np.bincount of nothing is int64, which a node would
    # refuse to upload: a client without rows would count as a dropout).
    return np.concatenate(
        [np.bincount(b, weights=g, minlength=n_bins), np.bincount(b, weights=h, minlength=n_bins)]
    ).astype(np.float64, copy=False)


def intercept_sums(y: np.ndarray) -> np.ndarray:
    """``[Σg, Σh]`` at margin 0: g = ½ − y clipped to [−½, ½], h = ¼."""
    g = np.clip(0.5 - np.asarray(y, dtype=np.float64), -INTERCEPT_GRAD_BOUND, INTERCEPT_GRAD_BOUND)
    return np.array([g.sum(), HESS_BOUND * g.size])


def fine_histograms(terms: Terms, XT: np.ndarray, grid: int = FINE_GRID) -> np.ndarray:
    """Counts of every numeric term's value on ``grid`` equal cells of [0, 1], concatenated
    (a row with the missing indicator set counts nowhere): one record adds at most 1
    to one cell per numeric term."""
    out = []
    for k in np.flatnonzero(terms.numeric):
        x = XT[int(terms.feature[k])]
        cell = np.minimum(np.floor(np.clip(x, 0.0, 1.0) * grid), grid - 1).astype(np.int64)
        w = np.ones(x.size)
        if terms.missing[k] >= 0:
            w[XT[int(terms.missing[k])] > 0.5] = 0.0
        out.append(np.bincount(cell, weights=w, minlength=grid))
    return np.concatenate(out) if out else np.zeros(0)


def quantile_cuts(histogram: np.ndarray, bins: int) -> np.ndarray:
    """Cuts at the ``bins``-quantiles of a (noisy) histogram on equal cells of [0, 1].

    Post-processing of released counts only: negative counts count as 0, each
    quantile is rounded up to a cell edge, and repeated edges merge (the bins a
    quantile step would leave empty). Without mass: equal-width cuts.
    """
    h = np.maximum(np.asarray(histogram, dtype=np.float64), 0.0)
    grid = h.size
    total = h.sum()
    if not total > 0:
        return equal_width_cuts(bins)
    cum = np.cumsum(h)[:-1] / total  # mass below each interior edge e/grid, e = 1..grid-1
    targets = np.arange(1, check_count("bins", bins)) / bins
    edges = np.unique(np.searchsorted(cum, targets, side="left") + 1)
    edges = edges[(edges > 0) & (edges < grid)]
    return edges / grid


@dataclass(frozen=True)
class GAMModel(ReleasedModel):
    """``f(x) = base + Σ_k shapes[k][bin_k(x)] + Σ_pairs v[cell(x)]``; released values only.

    Binary: ``base`` a float and each shape (n_bins,) on the logit scale.
    Softmax (C > 2 classes, :mod:`fedpriv.models.gam_softmax`): ``base`` (C,) and
    each shape (n_bins, C). ``pairs``: interaction terms
    (:class:`fedpriv.models.gam_pairs.PairTerm`), values (cells,) or (cells, C).
    """

    base: float | np.ndarray
    terms: Terms
    shapes: tuple[np.ndarray, ...]
    pairs: tuple[PairTerm, ...] = ()

    def __post_init__(self) -> None:
        shapes = tuple(np.asarray(s, dtype=np.float64) for s in self.shapes)
        if np.ndim(self.base) == 0:
            object.__setattr__(self, "base", float(self.base))
            tail: tuple[int, ...] = ()
        else:
            base = np.asarray(self.base, dtype=np.float64).reshape(-1)
            if base.size < 3:
                raise ValueError(f"a softmax base needs C ≥ 3 classes; got {base.size}")
            object.__setattr__(self, "base", base)
            tail = (base.size,)
        if len(shapes) != self.terms.m or any(
            s.shape != (self.terms.n_bins(k), *tail) for k, s in enumerate(shapes)
        ):
            raise ValueError(
                "need one shape per term with one value per bin (and class) "
                f"({[self.terms.n_bins(k) for k in range(self.terms.m)]}, {tail}); "
                f"got {[s.shape for s in shapes]}"
            )
        object.__setattr__(self, "shapes", shapes)
        pairs = tuple(self.pairs)
        for p in pairs:
            if p.b >= self.terms.m or p.values.shape[1:] != tail:
                raise ValueError(f"pair ({p.a}, {p.b}) does not fit {self.terms.m} terms, {tail}")
            if p.map_a.size != self.terms.n_bins(p.a) or p.map_b.size != self.terms.n_bins(p.b):
                raise ValueError(f"pair ({p.a}, {p.b}): its maps must cover every fine bin")
        object.__setattr__(self, "pairs", pairs)

    @property
    def n_classes(self) -> int:
        """2 for a binary model, C for a softmax one."""
        return 2 if np.ndim(self.base) == 0 else int(np.size(self.base))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Base, binning, shapes (padded with 0 to the widest term) and pairs as arrays."""
        tail = () if self.n_classes == 2 else (self.n_classes,)
        table = np.zeros((self.terms.m, self.terms.max_bins, *tail))
        for k, s in enumerate(self.shapes):
            table[k, : s.shape[0]] = s
        base = np.array([self.base]) if self.n_classes == 2 else self.base.copy()
        out = {"base": base, **self.terms.to_arrays(), "shapes": table}
        if self.pairs:
            out.update(pairs_to_arrays(self.pairs, self.terms.max_bins))
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> GAMModel:
        """Inverse of :meth:`to_arrays`."""
        terms = Terms.from_arrays(arrays)
        base = np.asarray(arrays["base"], dtype=np.float64).reshape(-1)
        tail = () if base.size == 1 else (base.size,)
        table = np.asarray(arrays["shapes"], dtype=np.float64).reshape(terms.m, -1, *tail)
        shapes = tuple(table[k, : terms.n_bins(k)] for k in range(terms.m))
        return cls(
            base=float(base[0]) if base.size == 1 else base,
            terms=terms,
            shapes=shapes,
            pairs=pairs_from_arrays(arrays, terms.n_bins),
        )

    def margins(self, bins: np.ndarray) -> np.ndarray:
        """Logit(s) of rows given their (m, n) bins."""
        return margins(self.base, self.shapes, bins, self.pairs)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Logit of every row (binary) or its (n, C) logits (softmax)."""
        XT = np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)
        return self.margins(bin_matrix(self.terms, XT))

    def class_scores(self, X: np.ndarray) -> np.ndarray:
        """(n, C) class probabilities, columns in class order (binary: 1 − p, p)."""
        f = self.decision_function(X)
        if f.ndim == 2:
            return softmax(f)
        p = sigmoid(f)
        return np.column_stack([1.0 - p, p])

    def explain(self, schema=None):
        """The terms by column name in raw units
        (:func:`fedpriv.models.explain.explain_gam`; no noise band: ``Artefact.explain``)."""
        from fedpriv.models.explain import explain_gam

        return explain_gam(self, schema)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1) of every row (as :class:`~fedpriv.models.trees.TreeEnsemble`); for a
        softmax model P(class 1), as the forests' models (:meth:`class_scores`: all C)."""
        f = self.decision_function(X)
        return sigmoid(f) if f.ndim == 1 else softmax(f)[:, 1]


def warm_up() -> None:
    """Nothing to compile: the client's maths is numpy (the registry's ``kernels`` hook)."""
