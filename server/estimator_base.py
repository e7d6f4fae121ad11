"""What every in-process estimator shares: the scikit-learn contract, training data, the run.

The estimators are scikit-learn classifiers (:class:`sklearn.base.BaseEstimator`
and :class:`~sklearn.base.ClassifierMixin`): ``__init__`` only stores its
parameters, ``fit`` validates them and the data and returns ``self``,
``clone``, ``get_params``/``set_params``, ``cross_val_score``, ``Pipeline``
and ``GridSearchCV`` work, and a fitted estimator has ``classes_`` and
``n_features_in_``.

Label set. A DP learner never reads its label set off the private rows
(privacy rule 2: ``np.unique(y)`` would release which labels occur). It is
public: a :class:`~fedpriv.data.TabularDataset`'s schema ``target.classes``,
else the ``classes`` parameter (any labels, strings included, sorted as
``classes_``), else {0, 1}. A label outside it is refused with a
:class:`~fedpriv.errors.DataError` naming the label. ``predict`` returns
labels from ``classes_``; ``predict_proba``'s columns follow ``classes_``.
Boosting and DP-SGD are binary (``classes`` of exactly two labels, the
second the positive class); the forests and DP-EBM (``dp_gam``) take any number.

Secret key. ``secret_key`` is stored as given (``clone`` needs the very
object back) and becomes a :class:`~fedpriv.privacy.randomness.SecretKey` in
``fit``. The repr (text and HTML) shows ``secret_key=<hidden>``, never key
bytes, and pickling stores a redacted placeholder (raw bytes included).

Ledger. Each fit without ``ledger=`` takes a fresh
:class:`~fedpriv.privacy.PrivacyLedger`, so its ``privacy_report_`` covers
that fit only and says so (``"scope"``): refitting on the same rows spends
again, and refitting the same object without a ledger logs a WARNING. Pass
``ledger=`` (a ``PrivacyLedger`` whose budget is the total for the rows) to
chain fits: each fit runs in a child of it
(:meth:`~fedpriv.privacy.PrivacyLedger.scope`) with the fit's own
``epsilon``/``delta``, and a fit that would take the shared ledger past its
budget raises :class:`~fedpriv.privacy.PrivacyBudgetExceededError` before
any noise is drawn; a non-private fit (``epsilon=inf``) is charged as a
non-private event, which only an infinite budget admits. ``clone`` shares
the ledger (a deliberate choice: ledgers deep-copy to themselves), so the
folds of ``cross_val_score`` or ``GridSearchCV`` on the same rows are
charged together.

Tags. ``non_deterministic=True`` (without ``secret_key`` every fit draws
fresh noise), ``requires_fit=True``, ``poor_score=True`` (a DP model on a
few dozen rows is noise), ``multi_class`` for the forests and DP-EBM.

scikit-learn's ``check_estimator``: what passes, and which checks a DP learner
fails by design and why, is :mod:`fedpriv.server.sklearn_checks`; the training
rows are assembled by :mod:`fedpriv.server.training_data`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event
from fedpriv.server.estimator_sklearn import SklearnPlumbing
from fedpriv.server.fit_size import FitSize, PublicSize, fit_size
from fedpriv.server.sklearn_checks import expected_failed_checks  # noqa: F401 - re-exported
from fedpriv.server.training_data import check_features, federated_training_data
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import (
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from fedpriv.data import TabularDataset, check_training_classes
from fedpriv.data.node import check_bound
from fedpriv.federation.engine import RoundDone
from fedpriv.federation.limits import check_run_sizes, run_size_range
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.federation.settings import SettingError
from fedpriv.federation.status import (
    DEFAULT_MAX_ABORTED_SHARE,
    RoundAbortedError,
    RunFailedError,
    RunStatus,
    outcome_of,
)
from fedpriv.logs import get_logger
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.records import (
    BINARY_LABELS,
    encode_labels,
    public_label_set,
)

log = get_logger(__name__)

#: The ``scope`` of a fit's privacy report without a shared ledger.
SCOPE_THIS_FIT = (
    "this fit only: refitting on the same rows spends again; pass ledger= to chain fits"
)
#: The ``scope`` of a fit's privacy report charged to a shared ledger.
SCOPE_SHARED = (
    "this fit; every fit charged to the shared ledger= is accounted together in its report()"
)

#: What the message of a binary learner's label error adds.
_BINARY_NOTE = (
    "Only binary classification is supported by this learner: pass its two "
    "labels as classes=[negative, positive]"
)


class Estimator(SklearnPlumbing, ClassifierMixin, BaseEstimator):
    """The scikit-learn contract, the in-process run, and prediction from ``model_``.

    Subclasses store their parameters in ``__init__`` (among them ``classes``,
    ``num_clients``, ``epsilon``, ``delta``, ``seed``, ``secret_key``,
    ``secure_aggregation``, ``ledger``) and in ``fit`` call :meth:`_training_data`, then
    :meth:`_fit_on`.
    """

    #: Whether the learner takes more than two classes (the forests do).
    _multi_class: ClassVar[bool] = False
    #: Whether ``decision_function`` gives K logits for K > 2 classes (DP-SGD's softmax).
    _class_logits: ClassVar[bool] = False

    # -- fit --------------------------------------------------------------
    def _shared_ledger(self) -> PrivacyLedger | None:
        """The ``ledger`` parameter, checked: ``None`` or a :class:`PrivacyLedger`."""
        shared = getattr(self, "ledger", None)
        if shared is not None and not isinstance(shared, PrivacyLedger):
            raise TypeError(
                f"ledger must be a fedpriv.privacy.PrivacyLedger or None; "
                f"got {type(shared).__name__}"
            )
        return shared

    def _fit_ledger(self) -> PrivacyLedger | None:
        """This fit's ledger: a fresh one, or a child of the shared ``ledger`` (class docstring).

        Called before any private randomness is used, so a fit over a shared
        budget raises before any noise is drawn.
        """
        shared = self._shared_ledger()
        if not math.isfinite(self.epsilon):
            if shared is not None:  # the non-private reference releases its model unprotected
                shared.spend(
                    dp_event.NonPrivateDpEvent(), label=f"{type(self).__name__} fit, epsilon=inf"
                )
            return None
        budget = PrivacyBudget(epsilon=self.epsilon, delta=self.delta)
        if shared is not None:
            return shared.scope(budget)
        if getattr(self, "ledger_", None) is not None:
            log.warning(
                "%s refitted without ledger=: this fit spends epsilon=%g again, and its "
                "privacy_report_ covers this fit only; on the same rows the total is the "
                "composition of every fit (pass ledger= to chain fits)",
                type(self).__name__,
                self.epsilon,
            )
        return PrivacyLedger(budget=budget)

    def _label_set(self, data: TabularDataset | np.ndarray) -> np.ndarray:
        """The public label set: the schema's, else ``classes``, else {0, 1} (never the rows)."""
        n = None if self._multi_class else 2
        if isinstance(data, TabularDataset):
            target = data.schema.target
            labels = public_label_set(target.classes, n_classes=n, key="target.classes")
            if self.classes is not None and not np.array_equal(
                public_label_set(self.classes), labels
            ):
                raise ValueError(
                    f"classes: a dataset's label set is its schema's target.classes "
                    f"{labels.tolist()}; got {list(self.classes)}"
                )
            return labels
        classes = BINARY_LABELS if self.classes is None else self.classes
        return public_label_set(classes, n_classes=n)

    def _training_data(
        self,
        data: TabularDataset | np.ndarray,
        y: Any,
        partition: list[np.ndarray] | None,
        part: str,
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Validated rows, class indices into ``classes_``, and the partition; sets
        ``classes_`` and ``n_features_in_``."""
        classes = self._label_set(data)
        note = "" if self._multi_class else _BINARY_NOTE
        label_set: Sequence = classes
        if not isinstance(data, TabularDataset):
            # Sparse, empty, complex: refused by scikit-learn; NaN/inf by check_features.
            data = validate_data(self, data, dtype=np.float64, ensure_all_finite=False)
            check_features(data)
            if y is None:
                raise ValueError(
                    f"{type(self).__name__} requires y to be passed, but the target y is None"
                )
            # Labels as codes, by our check: a NaN or foreign label is named in a DataError.
            y = encode_labels(column_or_1d(y, warn=True), classes, note=note)
            label_set = range(classes.size)
            check_consistent_length(data, y)
            # As for a loaded dataset: a local check on the caller's own rows (its
            # error stays with them), naming the label of the one class.
            check_training_classes(y, column="y", source="fit", labels=classes)
            if partition is None and data.shape[0] < self.num_clients:
                raise ValueError(
                    f"n_samples={data.shape[0]} rows cannot be split IID over "
                    f"num_clients={self.num_clients} clients (each needs a row)"
                )
        X, yy, partition = federated_training_data(
            data, y, partition, self.num_clients, part, classes=label_set
        )
        self.classes_ = classes
        self.n_features_in_ = X.shape[1]
        return X, yy, partition

    def _record_bound(self, partition: list[np.ndarray]) -> int | None:
        """The declared public bound on records per client (``max_records``), checked:
        ``None`` when undeclared (the codec then uses the largest client's rows)."""
        bound = getattr(self, "max_records", None)
        if bound is None:
            return None
        if isinstance(bound, bool) or not isinstance(bound, numbers.Integral):
            raise SettingError(
                f"max_records must be an integer in {run_size_range('max_records')} or None; "
                f"got {bound!r}"
            )
        check_run_sizes({"max_records": bound})
        for rows in partition:
            check_bound(len(rows), int(bound), source="fit")
        return int(bound)

    def _fit_size(
        self,
        partition: list[np.ndarray],
        public: PublicSize | None = None,
        *,
        key: Any = None,
        schema: Any = None,
    ) -> FitSize:
        """This fit's ledger and key, and the public bounds on its records
        (:func:`fedpriv.server.fit_size.fit_size`: the caller's, declared, or a released
        count's bound); ``key``: the fit's secret key if already drawn; ``schema``: the
        data's (its privacy unit)."""
        return fit_size(self, partition, public, key=key, schema=schema)

    def _distributed_noise(self, n_clients: int):
        """The distributed-noise setting of this fit (``None``: central noise)."""
        from fedpriv.options import NoiseMode
        from fedpriv.privacy.distributed import DistributedNoise

        try:
            mode = NoiseMode.parse(getattr(self, "noise", NoiseMode.CENTRAL))
            if mode is NoiseMode.CENTRAL:
                return None
            return DistributedNoise(
                dropouts=getattr(self, "tolerated_dropouts", 1), max_parties=n_clients
            )
        except ValueError as exc:
            raise SettingError(str(exc)) from None

    def _fit_on(
        self,
        X: np.ndarray,
        y: np.ndarray,
        partition: list[np.ndarray],
        *,
        handler: Any,
        strategy: Any,
        participation: float = 1.0,
        rounds_planned: int | None = None,
        size: FitSize | None = None,
        on_round: Callable[[RoundDone], None] | None = None,
        units: np.ndarray | None = None,
    ):
        """Train ``strategy`` against ``handler`` clients under this fit's ledger; keep the results.

        The run's status (:mod:`fedpriv.federation.status`, threshold
        ``max_aborted_share``) is kept as ``run_status_`` and ``run_outcome_``
        (rounds planned, released, aborted); a degraded run logs a warning; a
        failed one raises :class:`~fedpriv.federation.status.RunFailedError`
        carrying the ledger and its privacy report (the spend stays recorded).

        The runtime takes the estimator's ``seed``, ``secret_key`` (coerced
        here, not in ``__init__``) and ``secure_aggregation``, the ledger its
        ``epsilon`` and ``delta`` (``epsilon=math.inf``: no ledger, the non-private
        reference), fresh or a child of ``ledger`` (:meth:`_fit_ledger`). ``size``: the
        fit's ledger, key and public record bound as :meth:`_fit_size` prepared them
        (the strategy then charges ``size.learner``); ``None``: prepared here.
        ``on_round``: called after each round with its
        :class:`~fedpriv.federation.engine.RoundDone`, whose ``ledger`` is this fit's
        (``size.ledger``: the record count's release included). ``units``: each row's
        unit code with unit-level privacy (``partition`` bounded per unit), else ``None``.
        """
        from fedpriv.federation.protocol import make_clients

        if size is None:
            size = self._fit_size(partition)
        runtime = InProcessRuntime(
            noise=self._distributed_noise(len(partition)),
            clients=make_clients(X, y, partition, units),
            max_records=size.max_records,
            handler=handler,
            seed=self.seed,
            secret_key=size.key,
            participation=participation,
            secure_aggregation=self.secure_aggregation,
        )
        ledger = size.ledger
        error = None
        tick = None
        if on_round is not None:

            def tick(done: RoundDone) -> None:
                on_round(dataclasses.replace(done, ledger=ledger))

        try:
            strategy = runtime.run(strategy, ledger=size.learner, on_round=tick)
        except RoundAbortedError as exc:  # the method cannot go on: failed, with the reason
            error = exc
        comm = runtime.communication
        outcome = outcome_of(
            comm,
            rounds_planned=comm.rounds if rounds_planned is None else rounds_planned,
            max_aborted_share=getattr(self, "max_aborted_share", DEFAULT_MAX_ABORTED_SHARE),
            error=error,
        )
        report = None
        if ledger is not None:
            scope = SCOPE_THIS_FIT if self.ledger is None else SCOPE_SHARED
            report = dataclasses.replace(ledger.report(), scope=scope)
        if outcome.failed:
            # No model_: the fit failed. What was spent stays reachable through the error.
            raise RunFailedError(
                outcome, ledger=ledger, privacy_report=report, communication=comm
            ) from error
        if outcome.status is RunStatus.DEGRADED:
            log.warning("%s: %s", type(self).__name__, outcome.line())
        self.model_ = strategy.model()
        self.noise_multiplier_ = strategy.noise_multiplier_
        self.ledger_ = ledger
        self.privacy_report_ = report
        self.communication_ = comm
        self.run_outcome_ = outcome
        self.run_status_ = outcome.status
        return strategy

    # -- prediction -------------------------------------------------------
    def _rows(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite=False)
        return check_features(X, box=False)

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        """(n, len(classes_)) class probabilities of validated rows (binary: 1 − p, p)."""
        p = self.model_.predict_proba(X)
        return np.column_stack([1.0 - p, p])

    def decision_function(self, X: Any) -> np.ndarray:
        """Score of the positive class ``classes_[1]`` (> 0: predict it)."""
        X = self._rows(X)  # first: an unfitted estimator raises NotFittedError
        return self.model_.decision_function(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, columns in the order of ``classes_``."""
        return self._class_scores(self._rows(X))

    def predict(self, X: Any) -> np.ndarray:
        """Labels from ``classes_``."""
        check_is_fitted(self)
        if self.classes_.size == 2:
            return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    @property
    def epsilon_spent_(self) -> float:
        return math.inf if self.privacy_report_ is None else self.privacy_report_.epsilon
