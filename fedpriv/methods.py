"""The method registry: one record per learner, from which everything dispatches.

A :class:`Method` names the learner's parts, each as an import path resolved
only when needed (the Flower ClientApp never imports the server half, the
ServerApp never imports torch for boosting): its configuration dataclass,
the strategy factory (server half), the client handler (client half), the
class of its released model, the kernels to compile before round 1, the
scikit-learn estimator and the module holding its maths. The record is the
only place a method is described; everything else derives from it:

* the ServerApp builds ``get_method(name).build_strategy(config, context)``;
* the ClientApp answers a :class:`~fedpriv.federation.protocol.Query` with
  ``get_method(query.method).client()``;
* the DP evaluation's nodes rebuild a released model with its method's
  ``model`` class, and a model file may name exactly the registered
  methods' model classes (:mod:`fedpriv.clients.evaluation`,
  :mod:`fedpriv.artefact`);
* the run-config keys of a method are its configuration's fields
  (:mod:`fedpriv.federation.settings`), their defaults and ranges are the
  dataclass's, stated once there; the Flower App declares them all
  (:mod:`fedpriv.server.flower_project`);
* the estimators' parameters are the same fields plus the run's own
  (``fedpriv.server.estimator_base``);
* the benchmark's learner lists, ``--help`` and the README's method table.

Adding a learner is one :func:`register_method` call plus its three files
(strategy, client, maths). Registration checks the whole contract
(:mod:`fedpriv.method_check`): every part imports and implements its
abstract base class, so a missing part fails there, naming it, never
mid-run. The built-in learners are registered at the end of this module
(unchecked at import, which would import every layer; a test checks them
with the same checker). A learner outside the package is a plugin: an
installed distribution's entry point in the group :data:`ENTRY_POINT_GROUP`
names a module whose import registers methods, or a callable that does.
Every process of a run (launcher, ServerApp, ClientApps) loads the plugins
once, on its first registry lookup, so a ``flwr run`` federation finds them
too.

This module imports nothing from the layers above it: the parts are import
paths, in the manner of packaging entry points.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

#: The entry-point group of plugins: each names a module whose import registers
#: methods, or a callable that registers them (``[project.entry-points."fedpriv.methods"]``).
ENTRY_POINT_GROUP = "fedpriv.methods"
#: The learner families (:attr:`Method.family`).
FAMILIES = ("gaussian-rounds", "forest", "histogram", "pure")

log = logging.getLogger(__name__)


def resolve(path: str) -> Any:
    """The object at ``"package.module:attribute"``."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"import path must be 'module:attribute'; got {path!r}")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class StrategyContext:
    """What the run knows publicly when it builds a strategy.

    Attributes
    ----------
    schema : fedpriv.data.Schema or None
        The public schema (feature box, column widths, label set); ``None`` for
        bare arrays, whose features then lie in the public box [0, 1].
    n_features : int
        Encoded feature count.
    n_records : int
        Public total number of training records (DP-SGD's fixed denominator).
    n_classes : int
        Size of the public label set.
    participation : float
        Per-round client participation ρ.
    """

    schema: Any
    n_features: int
    n_records: int
    n_classes: int = 2
    participation: float = 1.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def unit_records(self) -> int:
        """m: the records of one unit a sensitivity covers (the schema's
        ``max_records_per_unit``; 1, one record, without units or a schema)."""
        return 1 if self.schema is None else int(getattr(self.schema, "unit_records", 1))


@dataclass(frozen=True, kw_only=True)
class Method:
    """One learner: its name and where its parts live.

    Attributes
    ----------
    name : str
        The run-config ``method``, :attr:`Query.method` and registry key.
    summary : str
        One line for ``--help`` and the README.
    config : str
        ``"module:Class"`` of its frozen, keyword-only configuration dataclass;
        the field defaults are the paper's settings.
    strategy : str
        ``"module:function"`` building the server half:
        ``build(config, context: StrategyContext) -> Strategy``.
    client : str
        ``"module:Class"`` of the client handler
        (:class:`~fedpriv.federation.protocol.ClientHandler`, no-argument constructor).
    model : str
        ``"module:Class"`` of its released model
        (:class:`~fedpriv.models.base.ReleasedModel`): the DP evaluation's nodes
        rebuild it with ``from_arrays``, and model files may name it.
    kernels : str
        Import name of the module whose ``warm_up()`` compiles the client's
        kernels (the ClientApp calls it at the key exchange, not in round 1).
    estimator : str
        ``"module:Class"`` of its scikit-learn estimator.
    maths : str
        Import name of the module holding its formulas (documentation).
    delta : float
        The paper's δ for this learner (the run's default δ).
    multiclass : bool
        Whether it learns more than two classes.
    family : str
        ``"gaussian-rounds"``: every round is one Poisson-subsampled Gaussian
        release (the matched-accounting benchmark's learners); ``"forest"``:
        a DP forest (the forest benchmark's); ``"histogram"``: every record in
        every round, one Gaussian release per round (DP-EBM); ``"pure"``:
        pure ε-DP mechanisms (exponential, Laplace), no Gaussian rounds.
    """

    name: str
    summary: str
    config: str
    strategy: str
    client: str
    model: str
    kernels: str
    estimator: str
    maths: str
    delta: float = 1e-5
    multiclass: bool = False
    family: str = "gaussian-rounds"
    #: Whether it has a distributed-noise form (:mod:`fedpriv.privacy.distributed`);
    #: ``None``: exactly when every round is one Gaussian release (its family says so).
    distributed: bool | None = None

    @property
    def distributed_noise(self) -> bool:
        """Whether ``noise = "distributed"`` applies to it."""
        return self.family == "gaussian-rounds" if self.distributed is None else self.distributed

    @cached_property
    def config_class(self) -> type:
        return resolve(self.config)

    @property
    def config_fields(self) -> tuple[str, ...]:
        """The configuration's field names: the method's run-config keys (snake_case)."""
        return tuple(f.name for f in fields(self.config_class))

    def make_config(self, **values: Any) -> Any:
        return self.config_class(**values)

    def resolve_config(
        self,
        config: Any,
        *,
        epsilon: float | None,
        delta: float | None,
        n_records: float | None,
        released_count: float | None = None,
    ) -> Any:
        """``config`` with its automatic settings fixed from the run's public facts: the
        learner's (ε, δ) (``None``: non-private), the public bound on all records and,
        when that bound is a released count's upper bound, the released count ñ
        (``released_count``; ``None`` when the bound was declared).

        A configuration with a ``resolved(epsilon=, delta=, n_records=)`` method is
        resolved by it (DP-SGD's rounds, sampling rate and learning rate from n,
        :mod:`fedpriv.strategies.dpsgd_schedule`; Lumberjack's trees and depth from
        (ε, δ) and n, :mod:`fedpriv.models.lumberjack_sizes`); any other is returned as
        is. ``released_count`` is passed on only to a ``resolved`` that takes it
        (Lumberjack's; a plugin's contract is unchanged). The run counts its rounds on
        the result: the one resolution every entry point (estimators, launchers, the
        ServerApp, the strategies) goes through."""
        resolved = getattr(config, "resolved", None)
        if resolved is None:
            return config
        extra = {}
        if (
            released_count is not None
            and "released_count" in inspect.signature(resolved).parameters
        ):
            extra["released_count"] = released_count
        return resolved(epsilon=epsilon, delta=delta, n_records=n_records, **extra)

    @staticmethod
    def _resolved_like(config: Any, kept: Any) -> Any:
        """``config`` with the fields it leaves automatic (0) taken from ``kept``: equal
        to ``kept`` exactly when ``kept`` changed nothing but automatic settings."""
        auto = {
            f.name: getattr(kept, f.name)
            for f in fields(config)
            if getattr(config, f.name) == 0 and not isinstance(getattr(config, f.name), bool)
        }
        return dataclasses.replace(config, **auto) if auto else config

    def build_strategy(self, config: Any, context: StrategyContext) -> Any:
        """The server half for ``config``; refused (before anything is spent) unless it
        is a :class:`~fedpriv.federation.protocol.Strategy` whose ``method`` is this
        method's name and whose ``config`` is ``config`` or its resolution (automatic
        settings fixed, every set one kept)."""
        from fedpriv.federation.protocol import Strategy

        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{self.name} needs a {self.config_class.__name__}; got {type(config).__name__}"
            )
        strategy = resolve(self.strategy)(config, context)
        if not isinstance(strategy, Strategy):
            raise TypeError(
                f"method {self.name!r}: strategy {self.strategy!r} built a "
                f"{type(strategy).__name__}, not a fedpriv.federation.protocol.Strategy"
            )
        # Its queries' method names the client half every node dispatches to.
        kept = getattr(strategy, "config", None)
        # Its config is the one given, or that one's resolution (automatic settings fixed
        # from the strategy's public n): the same class, never another method's.
        if getattr(strategy, "method", None) != self.name or not (
            kept == config
            or (type(kept) is type(config) and kept == self._resolved_like(config, kept))
        ):
            raise TypeError(
                f"method {self.name!r}: strategy {self.strategy!r} built a "
                f"{type(strategy).__name__} whose method is {getattr(strategy, 'method', None)!r} "
                "(its queries' method must be the registry name) or that does not keep its config"
            )
        return strategy

    def client_handler(self) -> Any:
        return resolve(self.client)()

    def warm_up(self) -> None:
        importlib.import_module(self.kernels).warm_up()

    @cached_property
    def estimator_class(self) -> type:
        return resolve(self.estimator)

    @cached_property
    def model_class(self) -> type:
        """Its released model's class (``from_arrays`` rebuilds a model from its arrays)."""
        return resolve(self.model)

    def module_of(self, path: str) -> str:
        return path.partition(":")[0]


_REGISTRY: dict[str, Method] = {}
#: Plugin loading: ``"no"``, ``"loading"`` (a lookup from a plugin's own import or
#: check sees the registry as it stands) or ``"done"``; once per process.
_plugins = {"state": "no"}


def register_method(method: Method, *, replace: bool = False, check: bool = True) -> Method:
    """Add ``method`` to the registry (``replace=True`` to redefine a name).

    ``check`` (the default; the built-ins pass ``False``): then import every
    part and verify its contract (:func:`fedpriv.method_check.check_method`),
    raising :class:`~fedpriv.method_check.MethodContractError` naming the
    part. The record is in the registry while its parts are checked (an
    estimator class derives its parameters from it when defined) and is taken
    out again if the check fails.
    """
    if not method.name.isidentifier():
        raise ValueError(f"method name must be an identifier; got {method.name!r}")
    previous = _REGISTRY.get(method.name)
    if previous is not None and not replace and previous != method:
        raise ValueError(f"method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    if check:
        from fedpriv.method_check import check_method

        try:
            check_method(method)
        except BaseException:
            if previous is None:
                del _REGISTRY[method.name]
            else:
                _REGISTRY[method.name] = previous
            raise
    return method


def unregister_method(name: str) -> None:
    _REGISTRY.pop(name, None)


def plugin_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of :data:`ENTRY_POINT_GROUP`, by name."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return sorted(found, key=lambda ep: (ep.name, ep.value))


def _load_plugins() -> None:
    """Load every plugin once per process (module docstring). A plugin that fails to
    load (or whose method fails its check) raises, with a note naming its entry
    point, on every lookup until it loads: a run never goes on without it."""
    if _plugins["state"] != "no":
        return
    _plugins["state"] = "loading"
    try:
        for ep in plugin_entry_points():
            try:
                loaded = ep.load()
                if callable(loaded):
                    loaded()
            except Exception as exc:
                exc.add_note(f"while loading fedpriv plugin {ep.name} = {ep.value!r}")
                raise
            log.debug("loaded fedpriv plugin %s = %s", ep.name, ep.value)
    except BaseException:
        _plugins["state"] = "no"
        raise
    _plugins["state"] = "done"


def get_method(name: str) -> Method:
    """The registered method ``name``; the error lists the registered ones."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"method must be one of {method_names()}; got {name!r}") from None


def method_names() -> list[str]:
    _load_plugins()
    return list(_REGISTRY)


def methods() -> list[Method]:
    _load_plugins()
    return list(_REGISTRY.values())


def model_classes() -> frozenset[str]:
    """Every registered method's model class (``"module:Class"``)."""
    return frozenset(m.model for m in methods())


# -- the built-in learners: their records (fedpriv.builtin_methods), registered on import
from fedpriv.builtin_methods import BUILT_INS  # noqa: E402 (after the registry exists)

for _method in BUILT_INS:
    register_method(_method, check=False)  # unchecked here: every part's import is deferred
