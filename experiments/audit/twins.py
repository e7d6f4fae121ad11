"""The audited learners' broken twins: the same learner with a privacy bug.

Each twin breaks its learner *after* the honest calibration and budget
reservation, so its ledger still claims the honest ε (what a real bug looks
like from the outside): a Gaussian with a fraction of its noise
(:func:`noise_cut`), or leaf counts released exactly (:class:`ExactCountForest`,
:class:`ExactCountLumberjack`). The audits that must catch them are in
:mod:`fedpriv.experiments.audit.learners`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from fedpriv.strategies.lumberjack import LumberjackStrategy
from fedpriv.strategies.random_forest import RandomForestStrategy

from fedpriv.privacy import GaussianMechanism, Mechanism


# -- broken twins --------------------------------------------------------------
@dataclass(frozen=True)
class UnderNoised:
    """Claims ``claimed``'s DpEvent but adds ``1/factor`` of its noise (a twin's bug):
    :meth:`real` is the mechanism it really runs."""

    claimed: Any
    factor: float

    @property
    def dp_event(self):
        return self.claimed.dp_event

    def real(self) -> Mechanism:
        raise NotImplementedError

    def apply(self, value, *, rng: np.random.Generator) -> np.ndarray:
        return self.real().apply(value, rng=rng)


class UnderNoisedGaussian(UnderNoised):
    """A Gaussian twin; ``std`` is the noise it really adds (the range check's margin)."""

    @property
    def std(self) -> float:
        return self.claimed.std / self.factor

    def real(self) -> GaussianMechanism:
        z = self.claimed.noise_multiplier / self.factor
        return GaussianMechanism(l2_sensitivity=self.claimed.l2_sensitivity, noise_multiplier=z)


@dataclass(frozen=True)
class ExactRelease:
    """Claims ``claimed``'s DpEvent but releases its input exactly (the exact-count leak)."""

    claimed: Mechanism

    @property
    def dp_event(self):
        return self.claimed.dp_event

    std = 0.0  # no noise at all: the range check's margin is nil

    def apply(self, value, *, rng: np.random.Generator) -> np.ndarray:
        return np.array(value, dtype=np.float64)


def _cut_noise(strategy: Any, factor: float) -> None:
    # The noise stage keeps its calibrated event (the ledger says the honest ε)
    # and releases through a mechanism with 1/factor of the noise.
    stage = strategy._noise
    strategy._noise = replace(stage, mechanism=UnderNoisedGaussian(stage.mechanism, factor))


def noise_cut(cls: type, factor: float) -> type:
    """``cls`` (a strategy with a Gaussian noise stage) whose noise is divided by
    ``factor`` after calibration: the ledger still says the honest ε (a twin's bug)."""

    class NoiseCut(cls):
        def begin(self, **kwargs: Any) -> None:
            super().begin(**kwargs)
            _cut_noise(self, factor)

    NoiseCut.__name__ = NoiseCut.__qualname__ = f"NoiseCut{cls.__name__}"
    return NoiseCut


def honest_or_twin(cls: type, factor: float, *args: Any, **kwargs: Any):
    """``make_strategy(twin)`` of an audit: ``cls(*args, **kwargs)``, or its noise-cut twin."""
    twin_cls = noise_cut(cls, factor)
    return lambda twin: (twin_cls if twin else cls)(*args, **kwargs)


class ExactCountForest(RandomForestStrategy):
    """Random forest releasing exact leaf counts; the ledger records the Gaussian (Laplace)."""

    def begin(self, **kwargs: Any) -> None:
        super().begin(**kwargs)
        self._mechanism = ExactRelease(self._mechanism)


class ExactCountLumberjack(LumberjackStrategy):
    """Lumberjack releasing exact leaf counts; the ledger records the Gaussian leaves."""

    def begin(self, **kwargs: Any) -> None:
        super().begin(**kwargs)
        self.leaf_std_ = 0.0  # noise skipped: rint(0 · N) = 0 on the grid
