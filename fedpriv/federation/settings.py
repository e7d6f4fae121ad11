"""Run settings shared by the Flower ServerApp, the ClientApp and the launcher.

They mirror ``[tool.flwr.app.config]`` in ``pyproject.toml`` (kebab-case keys
there, snake_case here). Flower-free, so every layer can read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from fedpriv.models.lumberjack import lumberjack_rounds
from fedpriv.validation import check_count, check_positive, check_probability

#: Values of ``participation-accounting`` (:mod:`fedpriv.privacy.participation`;
#: "paper" is not a valid guarantee, comparison only). Spelled out here so the
#: ClientApp's settings do not import the accountants.
PARTICIPATION_ACCOUNTINGS = ("valid", "tight", "paper")

METHODS = ("boosting", "logistic", "mlp", "lumberjack", "random_forest")
#: Settings each method's paper configuration changes from the boosting defaults
#: of ``[tool.flwr.app.config]`` (benchmark paper, Table 5). The launchers
#: (``server.simulate``, ``server.deploy``) apply them for ``--set method=...``
#: unless the same keys are set too; a bare ``flwr run`` must pass them itself.
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "boosting": {},
    "logistic": {"rounds": 800, "learning-rate": 2.0, "sampling-rate": 0.02},
    "mlp": {"rounds": 800, "learning-rate": 3.0, "sampling-rate": 0.02},
    # Lumberjack §6: 30 trees, δ = 1e-6; depth 49 = 7 stages of 7 levels, one
    # round each, then the leaf round (strategies/lumberjack.py).
    "lumberjack": {"rounds": lumberjack_rounds(49), "depth": 49, "delta": 1e-6},
    # The fully random forest: one round of leaf counts.
    "random_forest": {"rounds": 1, "depth": 8, "delta": 1e-6, "trees": 10},
}


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One federated run. ``epsilon = 0`` means the non-private reference.

    ``rounds``, ``learning_rate`` and ``sampling_rate`` are the method's own:
    boosting rounds (trees) or DP-SGD steps. ``depth`` and ``split_features``
    apply to boosting; ``clip_norm``, ``hidden``, ``backend`` and ``standardise``
    to DP-SGD; ``trees``, ``depth`` (``rounds`` = its stages + 1, see
    :func:`fedpriv.models.lumberjack.lumberjack_rounds`), ``structure_fraction``
    and ``leaf_mechanism`` to Lumberjack.
    """

    method: str = "boosting"
    dataset: str = "diabetes130"
    num_clients: int = 5
    epsilon: float = 2.0
    delta: float = 1e-5
    rounds: int = 75
    depth: int = 5
    learning_rate: float = 0.4
    sampling_rate: float = 0.05
    participation: float = 1.0
    participation_accounting: str = "valid"  # "valid", "tight" or "paper" (not valid)
    seed: int = 0
    split_seed: int = 0
    out_dir: str = ""
    secure_aggregation: bool = True
    secagg_threshold: float = 0.5  # Shamir t = max(2, ⌊secagg_threshold·n⌋ + 1) of n per round
    split_features: str = "columns"
    round_timeout: float = 300.0
    node_wait_timeout: float = 300.0
    ping_rounds: int = 0  # empty rounds timed before training (a same-run baseline)
    poll_interval: float = 0.1  # seconds between the server's pulls for replies
    #: Write per-round wall times (communication.json) and the run time (log). They
    #: track the clients' work on their rows, a release no mechanism accounts for,
    #: so the privacy report then says ``certified: false``. For benchmarks only.
    timings: bool = False
    clip_norm: float = 3.0  # DP-SGD: per-example L2 clipping bound C
    hidden: int = 16  # DP-SGD MLP width
    backend: str = "fast"  # DP-SGD per-example gradients: "fast" or "opacus"
    standardise: bool = True  # DP-SGD: public box standardisation of numeric features
    trees: int = 30  # Lumberjack: number of trees k
    structure_fraction: float = 0.75  # Lumberjack: ε₁/ε for the structure
    leaf_mechanism: str = "gaussian"  # forests: "gaussian" (pooled counts) or "exponential"
    forest_mode: str = "all"  # random forest: "all" (composition) or "disjoint" (parallel)
    forest_split_features: str = "columns"  # forests: "columns" first, or "uniform" features

    def __post_init__(self) -> None:
        check_count("num_clients", self.num_clients)
        check_count("rounds", self.rounds)
        check_count("depth", self.depth)
        check_count("ping_rounds", self.ping_rounds, minimum=0)
        check_positive("learning_rate", self.learning_rate)
        if not 0.0 < self.poll_interval <= 10.0:
            raise ValueError(f"poll_interval must lie in (0, 10] seconds; got {self.poll_interval}")
        check_probability("sampling_rate", self.sampling_rate)
        check_probability("participation", self.participation)
        if not 0.0 <= self.secagg_threshold < 1.0:
            raise ValueError(f"secagg_threshold must lie in [0, 1); got {self.secagg_threshold}")
        if self.participation_accounting not in PARTICIPATION_ACCOUNTINGS:
            raise ValueError(
                f"participation_accounting must be one of {list(PARTICIPATION_ACCOUNTINGS)}; "
                f"got {self.participation_accounting!r}"
            )
        if self.epsilon < 0:
            raise ValueError(f"epsilon must lie in [0, inf) (0 = non-private); got {self.epsilon}")
        if self.split_features not in ("columns", "uniform"):
            raise ValueError(
                f"split_features must be 'columns' or 'uniform'; got {self.split_features!r}"
            )
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}; got {self.method!r}")
        check_positive("clip_norm", self.clip_norm)
        check_count("trees", self.trees)
        if not 0.0 < self.structure_fraction < 1.0:
            raise ValueError(
                f"structure_fraction must lie in (0, 1); got {self.structure_fraction}"
            )
        if self.forest_split_features not in ("uniform", "columns"):
            raise ValueError(
                f"forest_split_features must be 'uniform' or 'columns'; "
                f"got {self.forest_split_features!r}"
            )
        if self.forest_mode not in ("all", "disjoint"):
            raise ValueError(f"forest_mode must be 'all' or 'disjoint'; got {self.forest_mode!r}")
        if self.method == "random_forest" and self.rounds != 1:
            raise ValueError(f"random_forest takes one round; got rounds={self.rounds}")
        if self.method == "lumberjack" and self.rounds != lumberjack_rounds(self.depth):
            raise ValueError(
                f"lumberjack takes one round per stage of its depth, then the leaf round: "
                f"rounds must be {lumberjack_rounds(self.depth)} for depth={self.depth}; "
                f"got rounds={self.rounds}"
            )
        check_count("hidden", self.hidden)
        if self.backend not in ("fast", "opacus"):
            raise ValueError(f"backend must be 'fast' or 'opacus'; got {self.backend!r}")

    @property
    def private(self) -> bool:
        return self.epsilon > 0

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> RunSettings:
        """Build from a Flower run config (``num-clients`` → ``num_clients``)."""
        known = {f.name: f.type for f in fields(cls)}
        kwargs = {}
        for key, value in config.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown run-config key {key!r}; known: {sorted(known)}")
            kwargs[name] = value
        casts = {"int": int, "float": float, "bool": bool, "str": str}
        for name, value in kwargs.items():
            kwargs[name] = casts[str(known[name])](value)
        return cls(**kwargs)

    @staticmethod
    def with_method_defaults(config: Mapping[str, Any], explicit: Mapping[str, Any]) -> dict:
        """``config`` with the method's :data:`METHOD_DEFAULTS` for keys not in ``explicit``."""
        method = str(explicit.get("method", config.get("method", "boosting")))
        extra = {k: v for k, v in METHOD_DEFAULTS.get(method, {}).items() if k not in explicit}
        return {**config, **extra}

    def to_run_config(self) -> dict[str, Any]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}
