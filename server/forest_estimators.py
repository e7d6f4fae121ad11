"""The forest estimators: Lumberjack and the fully random DP forest.

Their parameters and fit come from the method registry as for every
estimator (:mod:`fedpriv.server.estimators`); what differs is prediction: any number
of classes, scored by the released leaves. With arrays, every feature is a
numeric feature on the public box [0, 1] (thresholds are drawn there), never
a range read off the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.server.method_estimator import MethodEstimator


class _Forest(MethodEstimator):
    """Prediction from a forest's class scores (any number of classes)."""

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        return self.model_.class_scores(X)

    def decision_function(self, X: Any) -> np.ndarray:
        """Binary: P(``classes_[1]``) − ½; else the (n, C) class scores."""
        scores = self._class_scores(self._rows(X))
        return scores[:, 1] - 0.5 if scores.shape[1] == 2 else scores


class LumberjackClassifier(_Forest):
    """Lumberjack DP random forest, federated (Lebeda et al.; ``strategies/lumberjack.py``).

    Settings: :class:`fedpriv.strategies.lumberjack.LumberjackConfig` (paper: 30 trees,
    ε₁ = 0.75ε, δ = 1e-6; ``trees`` and ``depth`` automatic by default, from the
    budget and the public record bound, or the released record count when no
    ``max_records`` is declared); run parameters: :mod:`fedpriv.server.estimators`.
    With ``epsilon=math.inf`` every non-empty node splits and leaves take the
    majority.

    Attributes
    ----------
    calibration_ :
        σ and Δ of the structure's sparse threshold (``None`` if non-private).
    gate_ : int
        The deterministic gate used.
    config_ : LumberjackConfig
        The settings the fit ran, automatic ``trees`` and ``depth`` resolved.
    """

    method = "lumberjack"

    def _after_fit(self, strategy: Any) -> None:
        self.calibration_ = strategy.calibration_
        self.gate_ = strategy.gate_


class DPRandomForestClassifier(_Forest):
    """Fully random DP forest with federated leaf aggregation (``strategies/random_forest.py``).

    Settings: :class:`fedpriv.strategies.random_forest.RandomForestConfig`; run
    parameters: :mod:`fedpriv.server.estimators`.
    """

    method = "random_forest"
