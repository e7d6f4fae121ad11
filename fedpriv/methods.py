"""The method registry: one record per learner, from which everything dispatches.

A :class:`Method` names the learner's parts, each as an import path resolved
only when needed (the Flower ClientApp never imports the server half, the
ServerApp never imports torch for boosting): its configuration dataclass,
the strategy factory (server half), the client handler (client half), the
kernels to compile before round 1, the scikit-learn estimator and the module
holding its maths. Everything else derives from these records:

* the ServerApp builds ``get_method(name).build_strategy(config, context)``;
* the ClientApp answers a :class:`~fedpriv.federation.protocol.Query` with
  ``get_method(query.method).client()``;
* the run-config keys of a method are its configuration's fields
  (:mod:`fedpriv.federation.settings`), their defaults and ranges are the
  dataclass's, stated once there;
* the estimators' parameters are the same fields plus the run's own
  (``fedpriv.server.estimator_base``);
* the benchmark's learner lists, ``--help`` and the README's method table.

Adding a learner is one :func:`register_method` call plus its three files
(strategy, client, maths). The built-in learners are registered at the end of
this module. A learner outside the package registers itself in a module named
by ``$FEDPRIV_PLUGINS`` (comma-separated import names), which every process
of a run (launcher, ServerApp, ClientApps) imports on first lookup, so a
``flwr run`` federation finds it too.

This module imports nothing from the layers above it: the parts are import
paths, in the manner of packaging entry points.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

#: Environment variable naming modules that register further methods.
PLUGINS_ENV = "FEDPRIV_PLUGINS"


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
        ``"module:Class"`` of the client handler (no-argument constructor).
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
        every round, one Gaussian release per round (DP-EBM).
    """

    name: str
    summary: str
    config: str
    strategy: str
    client: str
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

    def build_strategy(self, config: Any, context: StrategyContext) -> Any:
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{self.name} needs a {self.config_class.__name__}; got {type(config).__name__}"
            )
        return resolve(self.strategy)(config, context)

    def client_handler(self) -> Any:
        return resolve(self.client)()

    def warm_up(self) -> None:
        importlib.import_module(self.kernels).warm_up()

    @cached_property
    def estimator_class(self) -> type:
        return resolve(self.estimator)

    def module_of(self, path: str) -> str:
        return path.partition(":")[0]


_REGISTRY: dict[str, Method] = {}
_plugins_loaded: set[str] = set()


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the registry (``replace=True`` to redefine a name)."""
    if not method.name.isidentifier():
        raise ValueError(f"method name must be an identifier; got {method.name!r}")
    if method.name in _REGISTRY and not replace and _REGISTRY[method.name] != method:
        raise ValueError(f"method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_plugins() -> None:
    for name in filter(None, (s.strip() for s in os.environ.get(PLUGINS_ENV, "").split(","))):
        if name not in _plugins_loaded:
            _plugins_loaded.add(name)
            importlib.import_module(name)


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


# -- the built-in learners ----------------------------------------------------
register_method(
    Method(
        name="boosting",
        summary="DP federated gradient boosting with random trees",
        config="fedpriv.strategies.boosting:BoostingConfig",
        strategy="fedpriv.strategies.boosting:build",
        client="fedpriv.clients.boosting:BoostingClient",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.estimators:DPBoostingClassifier",
        maths="fedpriv.models.trees",
        multiclass=True,
    )
)
register_method(
    Method(
        name="logistic",
        summary="DP-SGD logistic regression",
        config="fedpriv.strategies.dpsgd:LogisticConfig",
        strategy="fedpriv.strategies.dpsgd:build",
        client="fedpriv.clients.dpsgd:DPSGDClient",
        kernels="fedpriv.models._sgd_kernels",
        estimator="fedpriv.server.estimators:DPLogisticClassifier",
        maths="fedpriv.models.networks",
        multiclass=True,
    )
)
register_method(
    Method(
        name="mlp",
        summary="DP-SGD one-hidden-layer MLP",
        config="fedpriv.strategies.dpsgd:MLPConfig",
        strategy="fedpriv.strategies.dpsgd:build",
        client="fedpriv.clients.dpsgd:DPSGDClient",
        kernels="fedpriv.models._sgd_kernels",
        estimator="fedpriv.server.estimators:DPMLPClassifier",
        maths="fedpriv.models.networks",
        multiclass=True,
    )
)
register_method(
    Method(
        name="lumberjack",
        summary="Lumberjack: DP random forests grown by sparse-threshold heavy hitters",
        config="fedpriv.strategies.lumberjack:LumberjackConfig",
        strategy="fedpriv.strategies.lumberjack:build",
        client="fedpriv.clients.lumberjack:LumberjackClient",
        kernels="fedpriv.models._forest_kernels",
        estimator="fedpriv.server.forest_estimators:LumberjackClassifier",
        maths="fedpriv.models.lumberjack",
        delta=1e-6,
        multiclass=True,
        family="forest",
    )
)
register_method(
    Method(
        name="random_forest",
        summary="DP random forest of complete random trees (noisy leaf counts)",
        config="fedpriv.strategies.random_forest:RandomForestConfig",
        strategy="fedpriv.strategies.random_forest:build",
        client="fedpriv.clients.random_forest:RandomForestClient",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.forest_estimators:DPRandomForestClassifier",
        maths="fedpriv.models.heavy_hitters",
        delta=1e-6,
        multiclass=True,
        distributed=True,  # its Gaussian leaf counts (leaf-mechanism = "gaussian")
        family="forest",
    )
)
register_method(
    Method(
        name="dp_gam",
        summary="DP histogram boosting of one-column trees (DP-EBM)",
        config="fedpriv.strategies.gam:GAMConfig",
        strategy="fedpriv.strategies.gam:build",
        client="fedpriv.clients.gam:GAMClient",
        kernels="fedpriv.models.gam",
        estimator="fedpriv.server.estimators:DPGAMClassifier",
        maths="fedpriv.models.gam",
        multiclass=True,
        family="histogram",
    )
)
register_method(
    Method(
        name="bdpe",
        summary="bdpe_α: boosted DP greedy trees, M_α loss, exponential-mechanism splits",
        config="fedpriv.strategies.bdpe:BDPEConfig",
        strategy="fedpriv.strategies.bdpe:build",
        client="fedpriv.clients.bdpe:BDPEClient",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.estimators:BDPEClassifier",
        maths="fedpriv.models.bdpe",
        family="pure",
    )
)
