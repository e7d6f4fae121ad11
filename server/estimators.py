"""scikit-learn estimators that run a method's strategy/client pair in process.

One class per registered method (:mod:`fedpriv.methods`). Its parameters are
derived, not written out: the method's settings (the fields of its
configuration dataclass, with the paper's defaults stated there), then the
run's own, named and defaulted as in the run config
(:class:`fedpriv.federation.settings.RunSettings`):

``epsilon``, ``delta``
    The budget of the whole fit, owned by the fit's ledger;
    ``epsilon=math.inf`` is the non-private reference (no noise, no ledger);
    ``delta=None`` is the method's paper δ.
``participation``
    Per-round client participation ρ.
``num_clients``
    Clients of an IID split when the data has no natural clients; at least 2
    (secure aggregation needs two parties).
``max_aborted_share``
    Largest share of rounds that may release nothing (``run_status_``:
    completed, degraded, or ``fit`` raises ``RunFailedError``).
``secure_aggregation``
    Sum replies through the masking shim (default) or plain fixed point.
``seed``
    Public seed of the public randomness (random trees, initial weights).
``classes``
    The public label set of array labels (sorted as ``classes_``; binary
    learners: two labels, the second positive); a dataset's is its schema's.
``secret_key``
    Key of the private randomness (noise, Poisson coins, participation).
    ``None``: fresh OS entropy at every fit. Pass one only to reproduce a
    fit; it is never logged or shown, and pickling drops it.
    ``SecretKey.from_public_seed(s)`` is a debug mode (``certified: false``).
``ledger``
    A :class:`fedpriv.privacy.PrivacyLedger` the caller owns, whose budget is
    the total for the rows: fits chain onto it (each in a child ledger with
    its own ``epsilon``/``delta``) and a fit that would pass it raises before
    any noise is drawn. ``None``: a fresh ledger per fit, whose report says
    it covers that fit only. ``clone`` shares it
    (:mod:`server.estimator_base`).

``fit`` takes a :class:`fedpriv.data.TabularDataset` (its training rows,
held by its natural clients or partitioned IID) or arrays ``X, y`` in the
public box [0, 1] (finite: a NaN or inf is refused, named by row and column;
values outside the box are counted in a warning), plus a partition, else an
IID split over ``num_clients``; trains through
:class:`fedpriv.federation.runtime.InProcessRuntime` and keeps the released
model (``model_``), the ledger and its report (``ledger_``,
``privacy_report_``), σ (``noise_multiplier_``), the traffic
(``communication_``) and the run's status (``run_status_``, ``run_outcome_``:
rounds planned, released, aborted). The scikit-learn contract, the tags and the
``check_estimator`` checks that do not apply to a DP learner are in
:mod:`server.estimator_base`.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any, ClassVar

import numpy as np

from fedpriv.data import TabularDataset
from fedpriv.federation.settings import (
    RunSettings,
    SettingError,
    check_run_values,
    config_from_values,
    method_defaults,
)
from fedpriv.methods import Method, StrategyContext, get_method
from server.estimator_base import Estimator

#: The run settings an estimator takes, under their run-config names.
RUN_PARAMS = (
    "epsilon",
    "delta",
    "participation",
    "num_clients",
    "secure_aggregation",
    "seed",
    "max_aborted_share",
)


def _signature(cls: type[MethodEstimator]) -> inspect.Signature:
    """The estimator's keyword-only parameters: the method's settings, then the run's."""
    m = get_method(cls.method)
    run = RunSettings.__dataclass_fields__
    # A choice's default is its plain string (scikit-learn accepts str defaults, not an
    # Enum subclass: check_parameters_default_constructible), as a run config spells it.
    params = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for f, default in zip(fields(m.config_class), method_defaults(m).values(), strict=True)
    ]
    for name in RUN_PARAMS:
        default = m.delta if name == "delta" else run[name].default
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    extra = {**cls.extra_params, "classes": None, "secret_key": None, "ledger": None}
    for name, default in extra.items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature([self_, *params])


class MethodEstimator(Estimator):
    """An estimator whose parameters and fit come from a registry record."""

    #: The registry name of the method (set by each subclass).
    method: ClassVar[str]
    #: Parameters only the estimator has (not run-config keys), with defaults.
    extra_params: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "method" not in cls.__dict__:
            return
        signature = _signature(cls)
        defaults = {p.name: p.default for p in signature.parameters.values() if p.name != "self"}

        def __init__(self, **params: Any) -> None:
            unknown = sorted(set(params) - set(defaults))
            if unknown:
                raise TypeError(
                    f"{type(self).__name__} got unknown parameter {unknown[0]!r}; "
                    f"allowed: {sorted(defaults)}"
                )
            for name, default in defaults.items():
                setattr(self, name, params.get(name, default))

        __init__.__signature__ = signature  # what get_params, clone and help() read
        __init__.__doc__ = f"Parameters: {', '.join(defaults)} (module docstring)."
        __init__.__qualname__ = f"{cls.__name__}.__init__"
        cls.__init__ = __init__
        cls._multi_class = get_method(cls.method).multiclass

    @property
    def method_record(self) -> Method:
        return get_method(self.method)

    def _config(self) -> Any:
        """The method's configuration from this estimator's parameters, strictly typed."""
        m = self.method_record
        values = {k: getattr(self, k) for k in m.config_fields}
        return config_from_values(m, values, spell=str)

    def _check_run_params(self) -> None:
        try:
            check_run_values({k: getattr(self, k) for k in RUN_PARAMS})
        except (TypeError, ValueError) as exc:
            raise SettingError(str(exc)) from None

    def _context_extra(self) -> dict[str, Any]:
        return {}

    def _handler(self) -> Any:
        return self.method_record.client_handler()

    def _after_fit(self, strategy: Any) -> None:
        """Keep method-specific fitted attributes (none by default)."""

    def fit(
        self,
        data: TabularDataset | np.ndarray,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
    ):
        """Train on ``part`` of a dataset (``"train"``, or ``"train+val"`` once tuned)
        or on arrays ``X, y``; returns ``self``."""
        config = self._config()  # every parameter checked before any data is touched
        self._check_run_params()
        self._shared_ledger()
        X, yy, partition = self._training_data(data, y, partition, part)
        context = StrategyContext(
            schema=data.schema if isinstance(data, TabularDataset) else None,
            n_features=X.shape[1],
            n_records=int(sum(len(p) for p in partition)),  # public under the trust model
            n_classes=int(self.classes_.size),
            participation=self.participation,
            extra=self._context_extra(),
        )
        strategy = self.method_record.build_strategy(config, context)
        strategy = self._fit_on(
            X,
            yy,
            partition,
            handler=self._handler(),
            strategy=strategy,
            participation=self.participation,
            rounds_planned=config.rounds,
        )
        self._after_fit(strategy)
        return self


class DPBoostingClassifier(MethodEstimator):
    """DP federated gradient boosting with random trees (benchmark paper §3.4).

    Settings: :class:`strategies.boosting.BoostingConfig`; run parameters:
    module docstring.
    """

    method = "boosting"


class DPLogisticClassifier(MethodEstimator):
    """DP-SGD logistic regression, federated (benchmark paper §3.5).

    Settings: :class:`strategies.dpsgd.LogisticConfig`; run parameters: module
    docstring. ``module``: a user's torch module instead of the built-in model
    (``backend="opacus"`` only).
    """

    method = "logistic"
    extra_params: ClassVar[dict[str, Any]] = {"module": None}

    def _context_extra(self) -> dict[str, Any]:
        if self.module is None:
            return {}
        from fedpriv.models.opacus_backend import TorchSpec

        return {"custom_spec": TorchSpec(self.module)}

    def _handler(self) -> Any:
        from clients.dpsgd import DPSGDClient

        return DPSGDClient(module=self.module)


class DPMLPClassifier(DPLogisticClassifier):
    """DP-SGD one-hidden-layer MLP, federated (benchmark paper §3.5).

    Settings: :class:`strategies.dpsgd.MLPConfig`; otherwise as
    :class:`DPLogisticClassifier`.
    """

    method = "mlp"


# The forests subclass MethodEstimator, so they are imported after it.
from server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier  # noqa: E402

__all__ = [
    "DPBoostingClassifier",
    "DPLogisticClassifier",
    "DPMLPClassifier",
    "DPRandomForestClassifier",
    "LumberjackClassifier",
    "MethodEstimator",
]
