"""The released bdpe_α ensemble: complete greedy trees, leaf values and leveraging.

H(x) = Σ_t β_t h_t(x), h_t(x) the value of the leaf of tree t that x reaches
(heap order, x ≤ threshold goes left, as :func:`fedpriv.models.trees.route`).
Probabilities are σ(aH + b) when the run released a calibration (``platt`` =
(a, b), a > 0: Platt scaling on the calibration round's released bin counts,
:func:`fedpriv.models.bdpe_calibration.platt_fit`), else ψ_Mat⁻¹(H), Matsushita's inverse
link. Both are strictly increasing, so ranking metrics equal H's; the M_α
link's flat zone (α < 1) would tie every record with |H| ≤ 2(1 − α) at ½.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fedpriv.models.base import ReleasedModel
from fedpriv.models.bdpe import matsushita_inverse_link
from fedpriv.models.trees import RandomTree, route


@dataclass(frozen=True)
class BDPEModel(ReleasedModel):
    """T trees of depth D: ``feature``/``threshold`` (T, 2^D − 1), ``leaf_values``
    (T, 2^D), ``beta`` (T,), the ensemble loss's ``alpha`` (weights, links) and the
    calibration ``platt`` = (a, b), or empty."""

    feature: np.ndarray
    threshold: np.ndarray
    leaf_values: np.ndarray
    beta: np.ndarray
    alpha: float
    platt: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        f = np.asarray(self.feature, dtype=np.int64)
        t = np.asarray(self.threshold, dtype=np.float64)
        v = np.asarray(self.leaf_values, dtype=np.float64)
        b = np.asarray(self.beta, dtype=np.float64).reshape(-1)
        if f.ndim != 2 or t.shape != f.shape or v.shape != (f.shape[0], f.shape[1] + 1):
            raise ValueError(
                f"need feature/threshold (T, 2^D − 1) and leaf_values (T, 2^D); got "
                f"{f.shape}, {t.shape}, {v.shape}"
            )
        if b.shape != (f.shape[0],):
            raise ValueError(f"need one beta per tree ({f.shape[0]}); got {b.shape}")
        platt = np.asarray(self.platt, dtype=np.float64).reshape(-1)
        if platt.size not in (0, 2):
            raise ValueError(f"platt must hold (a, b) or nothing; got {platt.size} values")
        arrays = (
            ("feature", f),
            ("threshold", t),
            ("leaf_values", v),
            ("beta", b),
            ("platt", platt),
        )
        for name, value in arrays:
            object.__setattr__(self, name, value)
        object.__setattr__(self, "alpha", float(self.alpha))

    @classmethod
    def empty(cls, depth: int, alpha: float) -> BDPEModel:
        inner = (1 << depth) - 1
        return cls(
            np.zeros((0, inner), np.int64),
            np.zeros((0, inner)),
            np.zeros((0, inner + 1)),
            np.zeros(0),
            alpha,
        )

    @property
    def n_trees(self) -> int:
        return int(self.feature.shape[0])

    @property
    def depth(self) -> int:
        return int(self.feature.shape[1]).bit_length()

    def with_tree(self, feature, threshold, values, beta: float) -> BDPEModel:
        return BDPEModel(
            np.vstack([self.feature, np.asarray(feature, np.int64)[None]]),
            np.vstack([self.threshold, np.asarray(threshold, np.float64)[None]]),
            np.vstack([self.leaf_values, np.asarray(values, np.float64)[None]]),
            np.append(self.beta, float(beta)),
            self.alpha,
        )

    def with_platt(self, platt) -> BDPEModel:
        return replace(self, platt=np.asarray(platt, dtype=np.float64))

    def margins(self, X: np.ndarray, *, start: int = 0, base: np.ndarray | None = None):
        """H(x) = Σ_t β_t h_t(x), summed tree by tree in order (the same floats everywhere);
        ``base`` = the sum over trees ``[0, start)``, which it continues (a copy)."""
        X = np.asarray(X, dtype=np.float64)
        H = np.zeros(X.shape[0]) if base is None else np.array(base, dtype=np.float64)
        for t in range(start, self.n_trees):
            leaf = route(RandomTree(self.feature[t], self.threshold[t]), X)
            H += self.beta[t] * self.leaf_values[t][leaf]
        return H

    def explain(self, schema=None):
        """Internal nodes per schema column (:class:`fedpriv.models.explain_trees.SplitUsage`)."""
        from fedpriv.models.explain_trees import SELECTED, split_usage

        feats = self.feature
        return split_usage(feats, schema, trees=self.n_trees, origin=SELECTED)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The calibrated logit aH + b when the run released a calibration, else H: either
        way > 0 exactly where ``predict_proba`` > ½."""
        H = self.margins(X)
        return self.platt[0] * H + self.platt[1] if self.platt.size else H

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if self.platt.size:
            return 0.5 * (1.0 + np.tanh(0.5 * self.decision_function(X)))  # σ, no overflow
        return matsushita_inverse_link(self.margins(X))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": self.feature,
            "threshold": self.threshold,
            "leaf_values": self.leaf_values,
            "beta": self.beta,
            "alpha": np.array([self.alpha]),
            "platt": self.platt,
        }

    @classmethod
    def from_arrays(cls, arrays) -> BDPEModel:
        return cls(
            arrays["feature"],
            arrays["threshold"],
            arrays["leaf_values"],
            arrays["beta"],
            float(np.asarray(arrays["alpha"]).reshape(-1)[0]),
            arrays.get("platt", np.zeros(0)),
        )


def node_of_rows(feature: np.ndarray, threshold: np.ndarray, level: int, X: np.ndarray):
    """Each row's node at depth ``level`` of a tree whose first 2^level − 1 heap nodes are set."""
    if level == 0:
        return np.zeros(np.asarray(X).shape[0], dtype=np.int64)
    top = (1 << level) - 1
    return route(RandomTree(feature[:top], threshold[:top]), X)
