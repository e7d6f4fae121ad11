"""What every in-process estimator shares: training data, parameters, the run, prediction."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv.data import TabularDataset, iid
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import BINARY_LABELS, check_labels, check_partition
from fedpriv.seeding import derive_generator


def federated_training_data(
    data: TabularDataset | np.ndarray,
    y: np.ndarray | None,
    partition: list[np.ndarray] | None,
    n_clients: int,
    part: str = "train",
    *,
    classes: Sequence[float] = BINARY_LABELS,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Training rows and who holds them (see :meth:`TabularDataset.client_partition`).

    The labels must lie in the public label set: the schema's for a dataset,
    else ``classes`` (the learner's: {0, 1} for a binary learner). A
    partition must give each row to at most one client. Both are refused with
    a :class:`~fedpriv.errors.DataError` naming the bad label or the shared row.
    """
    if isinstance(data, TabularDataset):
        X, yy = data.xy(part)
        target = data.schema.target
        yy = check_labels(yy, target.classes, column=target.column)
        if partition is None:
            partition = data.client_partition(n_clients, part)
        return X, yy, check_partition(partition, yy.size)
    if y is None:
        raise ValueError("fit(X, y): y is required with an array X")
    X, yy = np.asarray(data, dtype=np.float64), check_labels(y, classes)
    if X.ndim != 2 or X.shape[0] != yy.size:
        raise ValueError(f"fit(X, y): X must be (n, d) with n = len(y); got {X.shape}, {yy.shape}")
    if partition is None:
        partition = iid(yy.size, n_clients=n_clients, rng=derive_generator(0, "partition", "iid"))
    return X, yy, check_partition(partition, yy.size)


class Estimator:
    """scikit-learn parameter handling, the in-process run, and prediction from ``model_``."""

    @property
    def secret_key(self) -> SecretKey | None:
        """Key of the private randomness (``None``: fresh OS entropy at every fit)."""
        return self._secret_key

    @secret_key.setter
    def secret_key(self, key: SecretKey | bytes | None) -> None:
        # Raw bytes become a SecretKey at once: a bytes attribute would be pickled,
        # copied and shown by get_params() as is; a SecretKey hides and redacts itself.
        self._secret_key = None if key is None else SecretKey.coerce(key)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        # The constructor's keyword arguments are the parameters (scikit-learn rule).
        names = inspect.signature(type(self).__init__).parameters
        return {k: getattr(self, k) for k in names if k != "self"}

    def set_params(self, **params: Any):
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r}")
            setattr(self, k, v)
        return self

    def _fit_on(
        self,
        X: np.ndarray,
        y: np.ndarray,
        partition: list[np.ndarray],
        *,
        handler: Any,
        strategy: Any,
        participation: float = 1.0,
    ):
        """Train ``strategy`` against ``handler`` clients under a fresh ledger; keep the results.

        The runtime takes the estimator's ``seed``, ``secret_key`` and
        ``secure_aggregation``, the ledger its ``epsilon`` and ``delta``
        (``epsilon=None``: no ledger).
        """
        from fedpriv.federation.protocol import make_clients

        runtime = InProcessRuntime(
            clients=make_clients(X, y, partition),
            handler=handler,
            seed=self.seed,
            secret_key=self.secret_key,
            participation=participation,
            secure_aggregation=self.secure_aggregation,
        )
        ledger = None
        if self.epsilon is not None:
            ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=self.epsilon, delta=self.delta))
        strategy = runtime.run(strategy, ledger=ledger)
        self.model_ = strategy.model()
        self.noise_multiplier_ = strategy.noise_multiplier_
        self.ledger_ = ledger
        self.privacy_report_ = ledger.report() if ledger is not None else None
        self.communication_ = runtime.communication
        self.n_features_in_ = X.shape[1]
        return strategy

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(np.asarray(X, dtype=np.float64))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = self.model_.predict_proba(np.asarray(X, dtype=np.float64))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.decision_function(X) > 0).astype(np.int64)

    @property
    def epsilon_spent_(self) -> float:
        return math.inf if self.privacy_report_ is None else self.privacy_report_.epsilon
