"""Additive-noise mechanisms: Gaussian (vector, L2) and Laplace (vector, L1).

Each mechanism is a frozen, keyword-only dataclass that validates its
parameters at construction, names the ``dp_accounting`` DpEvent it releases
(``dp_event``) and adds noise with an injected *private* generator
(``apply``; :mod:`fedpriv.privacy.randomness`: ChaCha20 under a secret key,
never a seeded PCG64). The noisy value is released on the grid 2^-32ℤ, safe
against the floating-point attack of Mironov (2012); the grid's rounding
margin is added to the sensitivity, so the recorded event is exact. Learners do
not call ``apply`` directly: they call
:meth:`fedpriv.privacy.ledger.PrivacyLedger.release`, which checks the budget
and records the event before any noise is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from dp_accounting import dp_event

from fedpriv.privacy.randomness import gaussian_on_grid, laplace_on_grid, rounding_margin
from fedpriv.validation import check_finite_array, check_positive


@runtime_checkable
class Mechanism(Protocol):
    """What the ledger needs of a mechanism: its event and a randomiser."""

    @property
    def dp_event(self) -> dp_event.DpEvent: ...

    def apply(self, value, *, rng: np.random.Generator): ...


@dataclass(frozen=True, kw_only=True)
class GaussianMechanism:
    """Gaussian mechanism on a vector: ``x + N(0, (z·Δ₂)² I)``.

    Parameters
    ----------
    l2_sensitivity : float
        Δ₂, the largest L2 change of the released vector when one record is
        added or removed, in (0, inf).
    noise_multiplier : float
        z = σ/Δ₂, in (0, inf). Its privacy follows from the PLD of the Gaussian
        mechanism (Balle & Wang 2018, Thm. 8); use :meth:`for_budget` for the
        exact single-release calibration.
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

    @classmethod
    def for_budget(
        cls, *, epsilon: float, delta: float, l2_sensitivity: float
    ) -> GaussianMechanism:
        """Smallest-noise Gaussian mechanism that is (ε, δ)-DP for one release.

        Uses the analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8 / Alg. 1),
        then raises z by the hair the ledger's pessimistic PLD discretisation
        needs to certify (ε, δ) itself (at ε ≥ 4 the exact z read 4.0000…1 and
        the release was refused).
        """
        from fedpriv.privacy.calibration import (
            analytic_gaussian_noise_multiplier,
            largest_certified,
        )

        z = analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
        x = largest_certified(
            lambda x: [(dp_event.GaussianDpEvent(z / x), 1)],
            epsilon=epsilon,
            delta=delta,
            upper=1.0,
        )
        return cls(l2_sensitivity=l2_sensitivity, noise_multiplier=z / x)

    @property
    def std(self) -> float:
        """Standard deviation of each noise coordinate, z·Δ₂."""
        return self.noise_multiplier * self.l2_sensitivity

    @property
    def dp_event(self) -> dp_event.GaussianDpEvent:
        return dp_event.GaussianDpEvent(self.noise_multiplier)

    def apply(self, value, *, rng: np.random.Generator) -> np.ndarray:
        """Return ``value`` plus i.i.d. Gaussian noise, on the grid.

        The std is z·(Δ₂ + γ√d): the sensitivity grows by the grid's rounding
        margin (:func:`~fedpriv.privacy.randomness.rounding_margin`), so
        :attr:`dp_event` is exact for the rounded release.
        """
        x = check_finite_array("value", value)
        margin = rounding_margin(x.size, "l2")
        return gaussian_on_grid(x, self.noise_multiplier * (self.l2_sensitivity + margin), rng)


@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism:
    """Laplace mechanism on a vector: ``x + Lap(Δ₁/ε)`` per coordinate (ε-DP).

    Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm. 3.6.

    Parameters
    ----------
    l1_sensitivity : float
        Δ₁, largest L1 change of the vector under add/remove-one, in (0, inf).
    epsilon : float
        Pure-DP parameter, in (0, inf).
    """

    l1_sensitivity: float
    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "l1_sensitivity", check_positive("l1_sensitivity", self.l1_sensitivity)
        )
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))

    @property
    def scale(self) -> float:
        """Laplace scale b = Δ₁/ε."""
        return self.l1_sensitivity / self.epsilon

    @property
    def dp_event(self) -> dp_event.LaplaceDpEvent:
        # dp-accounting's Laplace noise_multiplier is b/Δ₁ = 1/ε.
        return dp_event.LaplaceDpEvent(1.0 / self.epsilon)

    def apply(self, value, *, rng: np.random.Generator) -> np.ndarray:
        """Return ``value`` plus i.i.d. Laplace noise of scale (Δ₁ + γd)/ε, on the grid."""
        x = check_finite_array("value", value)
        margin = rounding_margin(x.size, "l1")
        return laplace_on_grid(x, (self.l1_sensitivity + margin) / self.epsilon, rng)
