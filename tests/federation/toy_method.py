"""A toy learner added through the method registry alone (``test_toy_method.py``).

The DP base rate: each round the clients return (Σ y, Σ 1) over their
Poisson(q) sample; the server adds Gaussian noise to the securely summed pair
(one record moves it by at most (1, 1): L2 sensitivity √2) and the model
predicts the ratio of the released sums. Its three parts (strategy, client,
maths) and its registry record are all here; nothing else in fedpriv names it.
Importing this module registers it; a federation finds it through
``$FEDPRIV_PLUGINS=tests.federation.toy_method``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.artefact import register_model_class
from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import Query, ReplySensitivity
from fedpriv.methods import Method, StrategyContext, register_method
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting
from fedpriv.validation import check_count, check_probability

NAME = "toy_base_rate"


# -- maths ---------------------------------------------------------------------
def base_rate(positives: float, records: float) -> float:
    """The released rate, clipped to [0, 1] (post-processing of the noisy sums)."""
    return float(np.clip(positives / records, 0.0, 1.0)) if records > 0 else 0.5


@dataclass(frozen=True)
class BaseRateModel:
    rate: float

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(X).shape[0], self.rate)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        p = min(max(self.rate, 1e-12), 1 - 1e-12)
        return np.full(np.asarray(X).shape[0], math.log(p / (1 - p)))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"rate": np.array([self.rate])}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> BaseRateModel:
        return cls(rate=float(arrays["rate"][0]))


# -- configuration (its fields are run-config keys already in pyproject) -------
@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    rounds: int = 2
    sampling_rate: float = 0.5

    def __post_init__(self) -> None:
        check_count("rounds", self.rounds)
        check_probability("sampling_rate", self.sampling_rate)


# -- server half ---------------------------------------------------------------
class ToyStrategy:
    method = NAME

    def __init__(self, config: ToyConfig, *, participation: float = 1.0) -> None:
        self.config, self.participation = config, participation
        self.noise_multiplier_ = None

    def begin(self, *, n_features, ledger, rng, secret_rng) -> None:
        self._t, self._sums = 0, np.zeros(2)
        self._noise = GaussianRounds.plan(
            ledger,
            l2_sensitivity=math.sqrt(2.0),
            sampling_rate=self.config.sampling_rate,
            rounds=self.config.rounds,
            participation=self.participation,
            accounting=ParticipationAccounting.VALID,
            rng=secret_rng,
        )
        if self._noise is not None:
            self.noise_multiplier_ = self._noise.noise_multiplier

    def next_query(self) -> Query | None:
        if self._t >= self.config.rounds:
            return None
        return Query(
            round=self._t,
            method=NAME,
            sampling_rate=self.config.sampling_rate,
            reply_length=2,
            record_bound=1.0,
            arrays={},
            config={},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        if aggregate is not None:
            if self._noise is not None:
                aggregate = self._noise.release(aggregate, label=f"round {self._t}: (Σy, n)")
            self._sums = self._sums + aggregate
        self._t += 1

    def model(self) -> BaseRateModel:
        return BaseRateModel(base_rate(*self._sums))

    def node_stages(self) -> list[NodeStage]:
        """What the hospitals' nodes enforce: every round one Gaussian (Σy, n)."""
        if self._noise is None:
            return []
        return [self._noise.node_stage(name="sums", method=NAME, reply_length=2, record_bound=1.0)]


def build(config: ToyConfig, context: StrategyContext) -> ToyStrategy:
    return ToyStrategy(config, participation=context.participation)


# -- client half ---------------------------------------------------------------
class ToyClient:
    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """One record moves (Σy, n) by at most (1, 1), whatever the query."""
        if query.method != NAME:
            raise ValueError(f"not a {NAME} query: {query.method!r}")
        return ReplySensitivity(stage="sums", l1=2.0, l2=math.sqrt(2.0))

    def answer(self, query, data, sample, state, key=None) -> np.ndarray:
        y = np.clip(data.y[sample], 0.0, 1.0)  # clipped where computed: (1, 1) per record
        return np.array([float(y.sum()), float(sample.size)])


def warm_up() -> None:
    """Nothing to compile."""


METHOD = Method(
    name=NAME,
    summary="toy: the DP base rate (tests only)",
    config=f"{__name__}:ToyConfig",
    strategy=f"{__name__}:build",
    client=f"{__name__}:ToyClient",
    kernels=__name__,
    estimator=f"{__name__}:ToyClassifier",
    maths=__name__,
)
register_method(METHOD, replace=True)
register_model_class(f"{__name__}:BaseRateModel")  # its model file (fedpriv.artefact)

from fedpriv.server.estimators import MethodEstimator  # noqa: E402  (the registry record comes first)


class ToyClassifier(MethodEstimator):
    """The toy's scikit-learn estimator: every parameter derived from the registry."""

    method = NAME
