"""A toy learner added through the method registry alone (``test_toy_method.py``).

The DP base rate: each round the clients return (Σ y, Σ 1) over their
Poisson(q) sample; the server adds Gaussian noise to the securely summed pair
(one record moves it by at most (1, 1): L2 sensitivity √2) and the model
predicts the ratio of the released sums. Its three parts (strategy, client,
maths), its model and its registry record are all here, its estimator in
``toy_estimator.py``; nothing in fedpriv names it.

It is a plugin: an installed distribution's entry point
``toy_base_rate = tests.federation.toy_method:register`` in the group
``fedpriv.methods`` (``test_toy_method.py`` installs one) makes every
process of a run register it on its first registry lookup, checked part by
part (:mod:`fedpriv.method_check`). The estimator lives in its own module
because its class derives its parameters from the registered record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import ClientHandler, Query, ReplySensitivity, Strategy
from fedpriv.methods import Method, StrategyContext, register_method
from fedpriv.models.base import ReleasedModel
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting
from fedpriv.validation import check_count, check_probability

NAME = "toy_base_rate"


# -- maths ---------------------------------------------------------------------
def base_rate(positives: float, records: float, prior: float = 0.5) -> float:
    """The released rate, clipped to [0, 1] (post-processing of the noisy sums);
    ``prior`` when the released count is not positive."""
    return float(np.clip(positives / records, 0.0, 1.0)) if records > 0 else prior


@dataclass(frozen=True)
class BaseRateModel(ReleasedModel):
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


# -- configuration (its fields become run-config keys by registration alone) ----
@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    rounds: int = 2
    sampling_rate: float = 0.5
    #: The rate predicted when the released count is not positive (public).
    prior_rate: float = 0.5

    def __post_init__(self) -> None:
        check_count("rounds", self.rounds)
        check_probability("sampling_rate", self.sampling_rate)
        check_probability("prior_rate", self.prior_rate)


# -- server half ---------------------------------------------------------------
class ToyStrategy(Strategy):
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

    def noise_std(self, query: Query) -> float | None:
        """The std the release of ``query``'s sum needs (its distributed-noise form)."""
        return None if self._noise is None else self._noise.std(query.reply_length)

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
        return BaseRateModel(base_rate(*self._sums, prior=self.config.prior_rate))

    def node_stages(self) -> list[NodeStage]:
        """What the hospitals' nodes enforce: every round one Gaussian (Σy, n)."""
        if self._noise is None:
            return []
        return [self._noise.node_stage(name="sums", method=NAME, reply_length=2, record_bound=1.0)]


def build(config: ToyConfig, context: StrategyContext) -> ToyStrategy:
    return ToyStrategy(config, participation=context.participation)


# -- client half ---------------------------------------------------------------
class ToyClient(ClientHandler):
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
    model=f"{__name__}:BaseRateModel",
    kernels=__name__,
    estimator="tests.federation.toy_estimator:ToyClassifier",
    maths=__name__,
)


def register() -> None:
    """The plugin's entry point: register the toy (checked: every part is imported)."""
    register_method(METHOD, replace=True)
