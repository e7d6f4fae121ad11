"""Private selection: exponential mechanism, permute-and-flip, report-noisy-max.

Each selects an index from a vector of scores ``u`` whose entries change by at
most ``sensitivity`` (Δ) when one record is added or removed. With
``monotone=True`` the caller asserts that, between neighbours, all scores move
in the same direction (counts do); this halves the sensitivity term
(Lumberjack, App. J; McKenna & Sheldon 2020, §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from fedpriv.privacy.events import BoundedRangeDpEvent, PureDpEvent
from fedpriv.privacy.randomness import check_private, gaussian_on_grid, rounding_margin
from fedpriv.validation import check_finite_array, check_positive


def _scale(epsilon: float, sensitivity: float, monotone: bool) -> float:
    # exp(ε u/(2Δ)) in general; exp(ε u/Δ) for monotone scores.
    return epsilon / (sensitivity if monotone else 2.0 * sensitivity)


@dataclass(frozen=True, kw_only=True)
class ExponentialMechanism:
    """Exponential mechanism ``P[i] ∝ exp(ε u_i / (2Δ))`` (McSherry & Talwar 2007).

    ε-DP and ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021); released
    under :class:`~fedpriv.privacy.events.BoundedRangeDpEvent`. With
    ``monotone=True`` it samples ``exp(ε u_i / Δ)`` with the same guarantee.

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    sensitivity : float
        Δ, in (0, inf).
    monotone : bool
        Whether the scores are monotone in the data.
    """

    epsilon: float
    sensitivity: float = 1.0
    monotone: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def dp_event(self) -> BoundedRangeDpEvent:
        return BoundedRangeDpEvent(self.epsilon)

    def probabilities(self, scores) -> np.ndarray:
        """Exact selection probabilities for ``scores``."""
        u = check_finite_array("scores", scores, ndim=1)
        logits = _scale(self.epsilon, self.sensitivity, self.monotone) * (u - u.max())
        w = np.exp(logits)
        return w / w.sum()

    def apply(self, scores, *, rng: np.random.Generator) -> int:
        """Sample an index; Gumbel-max keeps it exact and overflow-free."""
        u = check_finite_array("scores", scores, ndim=1)
        check_private("rng", rng)
        logits = _scale(self.epsilon, self.sensitivity, self.monotone) * u
        return int(np.argmax(logits + rng.gumbel(size=u.shape)))


@dataclass(frozen=True, kw_only=True)
class PermuteAndFlip:
    """Permute-and-flip (McKenna & Sheldon 2020, Alg. 1): ε-DP selection.

    Visit candidates in random order and accept ``i`` with probability
    ``exp(ε (u_i − u*) / (2Δ))`` (``/Δ`` when monotone); never worse in expected
    score than the exponential mechanism (ibid., Thm. 2). Released under
    :class:`~fedpriv.privacy.events.PureDpEvent`.
    """

    epsilon: float
    sensitivity: float = 1.0
    monotone: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def dp_event(self) -> PureDpEvent:
        return PureDpEvent(self.epsilon)

    def acceptance_probabilities(self, scores) -> np.ndarray:
        """Per-candidate coin probabilities ``exp(scale·(u_i − u*))``."""
        u = check_finite_array("scores", scores, ndim=1)
        return np.exp(_scale(self.epsilon, self.sensitivity, self.monotone) * (u - u.max()))

    def apply(self, scores, *, rng: np.random.Generator) -> int:
        """Sample an index. The arg-max candidate accepts surely, so this halts."""
        check_private("rng", rng)
        p = self.acceptance_probabilities(scores)
        order = rng.permutation(p.size)
        accepted = rng.random(p.size) < p[order]
        return int(order[np.argmax(accepted)])


@dataclass(frozen=True, kw_only=True)
class GaussianReportNoisyMax:
    """Report-noisy-max with Gaussian noise: ``argmax(u + N(0, (z·Δ₂)² I))``.

    Post-processing of the Gaussian mechanism on the whole score vector, so it
    is accounted exactly as a ``GaussianDpEvent(z)`` with ``Δ₂`` the L2
    sensitivity of the vector (1 for a histogram under add/remove-one).
    """

    l2_sensitivity: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "l2_sensitivity", check_positive("l2_sensitivity", self.l2_sensitivity)
        )
        object.__setattr__(
            self, "noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier)
        )

    @property
    def dp_event(self) -> dp_event.GaussianDpEvent:
        return dp_event.GaussianDpEvent(self.noise_multiplier)

    def apply(self, scores, *, rng: np.random.Generator) -> int:
        """Index of the largest noisy score."""
        u = check_finite_array("scores", scores, ndim=1)
        check_private("rng", rng)
        std = self.noise_multiplier * (self.l2_sensitivity + rounding_margin(u.size, "l2"))
        return int(np.argmax(gaussian_on_grid(u, std, rng)))
