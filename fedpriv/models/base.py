"""The contract of a released model: what every learner's ``model()`` returns.

A released model scores encoded rows and travels as named numeric arrays:
the DP evaluation's query carries ``to_arrays()`` to the nodes, which rebuild
it with ``from_arrays`` (:mod:`fedpriv.clients.evaluation`), and the model file
stores the same arrays (:mod:`fedpriv.artefact`). Each registered method names
its model class (:attr:`fedpriv.methods.Method.model`); registration checks
that the class implements this contract (:mod:`fedpriv.method_check`).

Every array holds released or public values only: a model is post-processing
of the run's releases.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np


class ReleasedModel(ABC):
    """A learner's released model (module docstring)."""

    @abstractmethod
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1 | x) per encoded row (two classes), else (n, K) class probabilities."""

    @abstractmethod
    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The score per row whose sign (two classes) or argmax (K > 2) predicts."""

    @abstractmethod
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The model as named boolean or numeric arrays (no object dtype: no pickle)."""

    @classmethod
    @abstractmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Any:
        """The inverse of :meth:`to_arrays`."""
