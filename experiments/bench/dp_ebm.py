"""DP-EBM (interpret's ``DPExplainableBoostingClassifier``) as a pooled peer row.

Nori, Caruana, Chen, Koch & Lou, "Accuracy, Interpretability, and Differential
Privacy via Explainable Boosting" (ICML 2021), as implemented by
``interpret-core`` (the optional ``ebm`` extra). It is the *non-federated*
upper reference of fedpriv's ``dp_gam``: one fit on every training row
(``partition`` is ignored), at the study's (ε, δ), with interpret's own GDP
accounting (its Algorithm 2: ε is spent whole by construction, so the
recorded spend is the ε given).

Privacy inputs come from the public schema only: every encoded feature lies in
[0, 1] by construction (numeric columns min-max scaled and clipped to the
schema's bounds, one-hot and binary columns 0/1; :mod:`fedpriv.data.encode`), so
``privacy_bounds`` is (0, 1) per feature and every feature is declared
``continuous`` (no type detection, no category set read from the rows).
interpret's private binning targets n / max_bins records per bin with the
training row count n: the benchmark's frozen partitions are public
(:func:`fedpriv.experiments.bench.learners.fitted`), so n is too.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The learner's name in configs, cells and reports.
NAME = "dp_ebm"
#: interpret's defaults that the benchmark fixes (only ``learning_rate`` is tuned).
FIXED = {"max_rounds": 300, "max_bins": 32, "max_leaves": 3, "bin_budget_frac": 0.1}


def available() -> bool:
    """Whether interpret (the ``ebm`` extra) is importable."""
    return importlib.util.find_spec("interpret") is not None


def missing_reason() -> str:
    return "interpret is not installed (pip install 'fedpriv[ebm]')"


def schema_bounds(schema) -> np.ndarray:
    """(lo, hi) of every encoded feature from the public schema: (0, 1) each.

    The encoding maps a numeric column through its schema box into [0, 1] and
    every other feature is 0/1 (:mod:`fedpriv.data.encode`); the rows are never read.
    """
    return np.tile([0.0, 1.0], (schema.n_features, 1))


@dataclass(frozen=True)
class _Comm:
    """Pooled: nothing is uploaded (NaN floats keep the row out of the communication table)."""

    floats_uploaded: np.ndarray
    rounds: int


class DPEBMLearner:
    """Benchmark adapter: the attributes :func:`~fedpriv.experiments.bench.cells.fit_cell` reads.

    Parameters
    ----------
    learning_rate : float
        interpret's boosting learning rate (the tuned setting).
    epsilon, delta : float
        The study's budget, passed to interpret whole.
    """

    def __init__(self, *, learning_rate: float, epsilon: float, delta: float) -> None:
        if not math.isfinite(epsilon):
            raise ValueError(f"dp_ebm needs a finite epsilon; got {epsilon!r}")
        self.learning_rate = float(learning_rate)
        self.epsilon = float(epsilon)
        self.delta = float(delta)

    def fit(self, ds, part: str) -> DPEBMLearner:
        from interpret.privacy import DPExplainableBoostingClassifier

        X, y = ds.xy(part)
        self.model_ = DPExplainableBoostingClassifier(
            feature_types=["continuous"] * X.shape[1],
            privacy_bounds=schema_bounds(ds.schema),
            learning_rate=self.learning_rate,
            epsilon=self.epsilon,
            delta=self.delta,
            n_jobs=1,
            # interpret's noise from OS entropy, as its authors require for privacy (a
            # fixed int makes its noise deterministic): a dp_ebm cell does not replay.
            random_state=None,
            **FIXED,
        )
        self.model_.fit(X, y)
        self.epsilon_spent_ = self.epsilon
        # interpret's noise std on each boosting update (its noise_scale_boosting_: the GDP
        # multiplier times the update's sensitivity, learning rate included).
        self.noise_multiplier_ = float(getattr(self.model_, "noise_scale_boosting_", math.nan))
        self.communication_ = _Comm(np.array([math.nan]), FIXED["max_rounds"])
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.model_.predict_proba(X)


def fitted(cell, part: str, secret_key) -> tuple[Any, Any, float]:
    """As :func:`fedpriv.experiments.bench.learners.fitted`, for ``dp_ebm`` (pooled)."""
    import time

    from fedpriv.experiments.bench.learners import dataset

    ds = dataset(cell.dataset)
    del secret_key  # interpret draws its own noise from OS entropy (DPEBMLearner.fit)
    clf = DPEBMLearner(**cell.param_dict, epsilon=cell.epsilon, delta=cell.delta)
    t0 = time.perf_counter()
    clf.fit(ds, part)
    return clf, ds, time.perf_counter() - t0
