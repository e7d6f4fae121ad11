"""The estimator built from a registry record: its signature and its fit.

:class:`MethodEstimator` derives an estimator's keyword-only parameters from a
method's settings dataclass and the run's settings (:data:`RUN_PARAMS`), and
fits by building the method's strategy and client from the registry
(:mod:`fedpriv.methods`). The parameters are documented once, in
:mod:`fedpriv.server.estimators`; every estimator class (there and in
:mod:`fedpriv.server.forest_estimators`) subclasses this one.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from fedpriv.server.estimator_base import Estimator
from fedpriv.server.fit_size import PublicSize
from fedpriv.server.training_data import unit_partition

from fedpriv import logs
from fedpriv.data import TabularDataset
from fedpriv.federation.engine import RoundDone
from fedpriv.federation.settings import (
    RunSettings,
    SettingError,
    check_run_values,
    config_from_values,
    method_defaults,
    typed_value,
)
from fedpriv.methods import Method, StrategyContext, get_method
from fedpriv.privacy.randomness import SecretKey

log = logs.get_logger(__name__)

#: The run settings an estimator takes, under their run-config names.
RUN_PARAMS = (
    "epsilon",
    "delta",
    "participation",
    "num_clients",
    "secure_aggregation",
    "noise",
    "tolerated_dropouts",
    "seed",
    "max_aborted_share",
)


def _plain(value: Any) -> Any:
    """A setting as an estimator parameter holds it: a choice as its plain string."""
    return value.value if isinstance(value, Enum) else value


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
        default = getattr(default, "value", default)  # an Enum as its plain string
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    extra = {
        **cls.extra_params,
        "classes": None,
        "secret_key": None,
        "ledger": None,
        "max_records": None,
    }
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
        __init__.__doc__ = f"Parameters: {', '.join(defaults)} (fedpriv.server.estimators)."
        __init__.__qualname__ = f"{cls.__name__}.__init__"
        cls.__init__ = __init__
        cls._multi_class = get_method(cls.method).multiclass

    @property
    def method_record(self) -> Method:
        return get_method(self.method)

    # -- the run's settings: the same RunSettings every entry point resolves ----------
    @classmethod
    def from_settings(cls, settings: RunSettings, **params: Any) -> MethodEstimator:
        """The estimator of ``settings.method`` (this class's, or any registered one's
        when called on :class:`MethodEstimator`) with the method's configuration and the
        run's own parameters of ``settings`` (K and ``max_records`` included), typed
        values as they are (a choice as its plain string); ``params``: more (e.g.
        ``secret_key``, ``ledger``). :meth:`run_settings` gives them back."""
        target = get_method(settings.method).estimator_class
        if not issubclass(target, cls):
            raise TypeError(f"settings of method {settings.method!r} make a {target.__name__}")
        values = {f.name: _plain(getattr(settings.config, f.name)) for f in fields(settings.config)}
        values |= {k: _plain(getattr(settings, k)) for k in (*RUN_PARAMS, "max_records")}
        return target(**{**values, **params})

    @classmethod
    def from_preset(cls, preset: str, **params: Any) -> MethodEstimator:
        """This estimator at ``preset``'s settings (:mod:`fedpriv.federation.presets`:
        its run keys, and its method keys for its own method), then ``params``."""
        from fedpriv.federation.presets import compose

        if not hasattr(cls, "method"):
            raise TypeError("from_preset needs an estimator class of one method")
        settings = RunSettings.from_run_config(compose({"method": cls.method}, preset))
        return cls.from_settings(settings, **params)

    def run_settings(self, base: RunSettings | None = None) -> RunSettings:
        """This estimator's parameters as the run's settings: ``base`` (default: the
        defaults) with this method, its configuration and the run parameters set here,
        each strictly checked as a run config's."""
        hints = typing.get_type_hints(RunSettings)
        run = {}
        for key in (*RUN_PARAMS, "max_records"):
            value = getattr(self, key)
            if value is not None:
                tp = hints[key]
                if typing.get_origin(tp) in (typing.Union, types.UnionType):
                    (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
                value = typed_value(key, tp, value)
            run[key] = value
        base = base if base is not None else RunSettings(method=self.method)
        try:
            return dataclasses.replace(base, method=self.method, config=self._config(), **run)
        except (TypeError, ValueError) as exc:
            raise SettingError(str(exc)) from None

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

    def _note_status(self, strategy: Any) -> None:
        """What the strategy says of its released model (``status_notes()``: a degenerate
        recalibration, a forest of single leaves) degrades the run's status, with a
        warning (:func:`fedpriv.federation.status.with_notes`)."""
        from fedpriv.federation.status import strategy_notes, with_notes

        notes = strategy_notes(strategy)
        if notes:
            self.run_outcome_ = with_notes(self.run_outcome_, notes)
            self.run_status_ = self.run_outcome_.status
            log.warning("%s: %s", type(self).__name__, self.run_outcome_.line())

    def fit(
        self,
        data: TabularDataset | np.ndarray,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
        on_round: Callable[[RoundDone], None] | None = None,
        public_size: PublicSize | None = None,
    ):
        """Train on ``part`` of a dataset (``"train"``, or ``"train+val"`` once tuned)
        or on arrays ``X, y``; returns ``self``.

        ``on_round``: a progress callback, called after each round with its
        :class:`~fedpriv.federation.engine.RoundDone` (public facts: the round's index,
        whether it released, and this fit's ledger, whose ``epsilon_upper_bound()`` bounds
        ε spent so far); it may not change the fit. ``public_size``: public bounds on this
        fit's records (:class:`~fedpriv.server.fit_size.PublicSize`) declared by the
        caller, e.g. the whole table's for each cross-validation fold; ``None``: clients ×
        ``max_records``, or a released count's bound."""
        config = self._config()  # every parameter checked before any data is touched
        self._check_run_params()
        self._shared_ledger()
        X, yy, partition = self._training_data(data, y, partition, part)
        # Unit-level privacy: every client's units bounded with its own key, before any
        # count is taken (fedpriv.privacy.units); arrays and record-level data as given.
        key = SecretKey.coerce(self.secret_key)  # None: fresh OS entropy, once per fit
        partition, units = unit_partition(data, partition, part, key)
        # The public n: clients × the declared max_records (as a Flower run uses it), or
        # the upper bound of a released count; never the rows' exact count (_fit_size).
        schema = data.schema if isinstance(data, TabularDataset) else None
        size = self._fit_size(partition, public_size, key=key, schema=schema)
        # Automatic sizes (Lumberjack's trees and depth) from the learner's budget and that
        # public n (Lumberjack: the released count itself when there is one), before the
        # rounds are counted; the strategy then keeps them.
        budget = None if size.learner is None else size.learner.budget
        config = self.config_ = self.method_record.resolve_config(
            config,
            epsilon=None if budget is None else budget.epsilon,
            delta=None if budget is None else budget.delta,
            n_records=size.n_records,
            released_count=size.released_count,
        )
        context = StrategyContext(
            schema=data.schema if isinstance(data, TabularDataset) else None,
            n_features=X.shape[1],
            n_records=size.n_records,
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
            size=size,
            on_round=on_round,
            units=units,
        )
        self.context_ = context  # public facts of the fit (schema, record count) for save()
        self.config_ = config  # the settings the fit ran (automatic ones resolved)
        self._after_fit(strategy)
        self._note_status(strategy)
        return self

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted estimator to one model file (``fedpriv.server.estimator_artefact``)."""
        from fedpriv.server.estimator_artefact import save_estimator

        return save_estimator(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, schema: Any = None) -> MethodEstimator:
        """A fitted estimator from a file :meth:`save` wrote; it predicts as the saved one.

        ``schema``: the schema the caller encodes rows with, refused unless the
        file's digest matches. ``cls`` may be :class:`MethodEstimator` (any method)
        or the file's own class.
        """
        from fedpriv.server.estimator_artefact import load_estimator

        return load_estimator(cls, path, schema=schema)
