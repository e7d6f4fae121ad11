"""The noise stage of a learner whose every round is one subsampled Gaussian release.

Boosting (benchmark paper §3.4) and DP-SGD (§3.5; Abadi et al. 2016, Alg. 1)
release, in each of T rounds, the securely aggregated sum of a Poisson(q)
sample's clipped statistics plus N(0, (zΔ)² I). The sequence is the same for
both, so it lives here once:

1. **calibrate** z so that T such events fit the ledger's (ε, δ), accounting
   client participation ρ as chosen
   (:func:`~fedpriv.privacy.participation.calibrate_participation_noise_multiplier`);
2. build the **mechanism** (L2 sensitivity Δ, multiplier z);
3. **reserve** the whole plan in the ledger, so a plan over budget raises
   before any noise is drawn;
4. each round, **release** the sum through the ledger as the round's event, then
   **range-check** the noisy value against the public bound on an honest sum
   (:mod:`fedpriv.privacy.range_guard`): a far-out value is discarded.

The budget is the ledger's: a stage reads (ε, δ) from it and from nowhere
else. A run without a ledger is the non-private reference and gets no stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from fedpriv.privacy.calibration import largest_certified
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.mechanisms import GaussianMechanism
from fedpriv.privacy.participation import (
    ParticipationAccounting,
    calibrate_participation_noise_multiplier,
    participation_event,
)
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import check_release, noise_margin


def certified_gaussian(*, epsilon: float, delta: float, l2_sensitivity: float) -> GaussianMechanism:
    """One Gaussian release at (ε, δ), at any ε.

    The analytic Gaussian (Balle & Wang 2018), widened if the ledger's
    pessimistic PLD puts it a hair above ε (fitted on 1/z, so no PLD search
    over tiny z is needed at huge ε).
    """
    z0 = GaussianMechanism.for_budget(
        epsilon=epsilon, delta=delta, l2_sensitivity=l2_sensitivity
    ).noise_multiplier
    inv_z = largest_certified(
        lambda x: [(dp_event.GaussianDpEvent(1.0 / x), 1)],
        epsilon=epsilon,
        delta=delta,
        upper=1.0 / z0,
    )
    return GaussianMechanism(l2_sensitivity=l2_sensitivity, noise_multiplier=1.0 / inv_z)


def budget_of(ledger: PrivacyLedger | None) -> PrivacyBudget | None:
    """The (ε, δ) a strategy must meet: its ledger's, or ``None`` for a non-private run
    (no ledger, or a ledger whose ε is infinite)."""
    if ledger is None or math.isinf(ledger.budget.epsilon):
        return None
    return ledger.budget


@dataclass(frozen=True)
class GaussianRounds:
    """T Poisson-subsampled Gaussian releases, calibrated to and reserved in a ledger.

    Build with :meth:`plan`; call :meth:`release` once per round.
    """

    ledger: PrivacyLedger
    mechanism: GaussianMechanism
    event: dp_event.DpEvent
    sampling_rate: float
    rounds: int
    rng: np.random.Generator
    #: Public bound on |each coordinate| of an honest sum (``None``: no range check).
    sum_bound: float | None = None

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.noise_multiplier

    @classmethod
    def plan(
        cls,
        ledger: PrivacyLedger | None,
        *,
        l2_sensitivity: float,
        sampling_rate: float,
        rounds: int,
        participation: float,
        accounting: ParticipationAccounting,
        rng: np.random.Generator,
        sum_bound: float | None = None,
        share: float = 1.0,
    ) -> GaussianRounds | None:
        """Calibrate z for ``rounds`` events on the ledger's budget and reserve them.

        ``sum_bound``: public bound on |each coordinate| of an honest round's sum
        (:func:`fedpriv.privacy.range_guard.sum_bound`). ``share`` s in (0, 1]:
        calibrate for (s·ε, s·δ), one stage of a run whose stages' shares add
        up to 1 (the ledger composes them all and checks the whole budget).
        Returns ``None`` without a ledger (the non-private reference).
        """
        budget = budget_of(ledger)
        if budget is None:
            return None
        if not 0 < share <= 1:
            raise ValueError(f"share must lie in (0, 1]; got {share!r}")
        if share < 1:
            budget = PrivacyBudget(epsilon=share * budget.epsilon, delta=share * budget.delta)
        check_private("rng", rng)
        cal = calibrate_participation_noise_multiplier(
            target_epsilon=budget.epsilon,
            target_delta=budget.delta,
            sampling_probability=sampling_rate,
            participation=participation,
            steps=rounds,
            accounting=accounting,
        )
        mechanism = GaussianMechanism(
            l2_sensitivity=l2_sensitivity, noise_multiplier=cal.noise_multiplier
        )
        event = participation_event(
            mechanism.dp_event,
            sampling_probability=sampling_rate,
            participation=participation,
            accounting=accounting,
        )
        ledger.reserve(event, rounds)
        return cls(ledger, mechanism, event, sampling_rate, rounds, rng, sum_bound)

    @classmethod
    def single(
        cls,
        ledger: PrivacyLedger | None,
        *,
        l2_sensitivity: float,
        rng: np.random.Generator,
        share: float,
        sum_bound: float | None = None,
    ) -> GaussianRounds | None:
        """One release of every record at ``share``·(ε, δ) (:func:`certified_gaussian`),
        reserved now. ``None`` without a ledger (the non-private reference)."""
        budget = budget_of(ledger)
        if budget is None:
            return None
        if not 0 < share <= 1:
            raise ValueError(f"share must lie in (0, 1]; got {share!r}")
        check_private("rng", rng)
        mechanism = certified_gaussian(
            epsilon=share * budget.epsilon,
            delta=share * budget.delta,
            l2_sensitivity=l2_sensitivity,
        )
        ledger.reserve(mechanism.dp_event, 1)
        return cls(ledger, mechanism, mechanism.dp_event, 1.0, 1, rng, sum_bound)

    def release(self, aggregate: np.ndarray, *, label: str) -> np.ndarray:
        """The noisy ``aggregate``, recorded in the ledger as one round's event.

        Raises
        ------
        ReleaseOutOfRange
            The noisy sum lies beyond what honest clients can produce; the event
            stays recorded (its noise was drawn) and the value must be discarded.
        """
        noisy = self.ledger.release(
            self.mechanism,
            aggregate,
            rng=self.rng,
            sampling_probability=self.sampling_rate,
            event=self.event,
            label=label,
        )
        margin = noise_margin(self.mechanism, noisy.size)
        check_release(noisy, bound=self.sum_bound, margin=margin, label=label)
        return noisy
