"""Run settings shared by the Flower ServerApp, the ClientApp and the launcher.

They mirror ``[tool.flwr.app.config]`` in ``pyproject.toml`` (kebab-case keys
there, snake_case here). Flower-free, so every layer can read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from fedpriv.privacy._validation import check_count, check_positive, check_probability


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One federated run. ``epsilon = 0`` means the non-private reference."""

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
    seed: int = 0
    split_seed: int = 0
    out_dir: str = ""
    secure_aggregation: bool = True
    split_features: str = "columns"
    round_timeout: float = 300.0
    node_wait_timeout: float = 300.0
    ping_rounds: int = 0  # empty rounds timed before training (a same-run baseline)
    poll_interval: float = 0.1  # seconds between the server's pulls for replies

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
        if self.epsilon < 0:
            raise ValueError(f"epsilon must lie in [0, inf) (0 = non-private); got {self.epsilon}")
        if self.split_features not in ("columns", "uniform"):
            raise ValueError(
                f"split_features must be 'columns' or 'uniform'; got {self.split_features!r}"
            )
        if self.method != "boosting":
            raise ValueError(f"method must be one of ['boosting']; got {self.method!r}")

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

    def to_run_config(self) -> dict[str, Any]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}
