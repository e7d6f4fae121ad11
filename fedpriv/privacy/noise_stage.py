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

Distributed noise (the ledger's ``distributed`` setting,
:mod:`fedpriv.privacy.distributed`): the stage declares the std its rounds need
(:meth:`GaussianRounds.std`, which the engine turns into the clients' shares),
charges the plan's total-variation slack to δ before calibrating, plans without
participation amplification (the server draws those coins), and at each release
records the survivors' actual noise instead of drawing any.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event

from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.privacy.calibration import largest_certified
from fedpriv.privacy.distributed import DistributedSum, plan_slack
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyBudgetExceededError, PrivacyLedger
from fedpriv.privacy.mechanisms import GaussianMechanism
from fedpriv.privacy.participation import (
    ParticipationAccounting,
    calibrate_participation_noise_multiplier,
    participation_event,
)
from fedpriv.privacy.randomness import check_private, rounding_margin
from fedpriv.privacy.range_guard import check_release, noise_margin
from fedpriv.privacy.release_stage import ReleaseStage


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
    #: Participation ρ and its accounting, to rebuild the event at another noise level.
    participation: float = 1.0
    accounting: ParticipationAccounting = ParticipationAccounting.VALID

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.noise_multiplier

    @property
    def distributed(self) -> bool:
        """Whether the clients add the noise (the ledger's setting)."""
        return self.ledger.distributed is not None

    def std(self, dims: int) -> float:
        """The noise std one release of ``dims`` coordinates needs (value units):
        z·(Δ₂ + γ√d), as :meth:`GaussianMechanism.apply` draws it centrally."""
        return self.noise_multiplier * (self.mechanism.l2_sensitivity + rounding_margin(dims, "l2"))

    def node_stage(
        self,
        *,
        name: str,
        method: str,
        reply_length: int,
        record_bound: float,
        config: Mapping[str, Any] | None = None,
        rounds: int | None = None,
        l2_sensitivity: float | None = None,
        noise_multiplier: float | None = None,
    ) -> NodeStage:
        """These rounds (or ``rounds`` of them) as a node enforces them
        (:class:`~fedpriv.federation.node_stage.NodeStage`).

        Its q, participation and accounting are this plan's; ``rounds`` (default:
        all of them) may split one plan into stages of differently shaped queries
        (boosting's intercept and trees); the noise is the absolute std
        z·(Δ₂ + γ√d) at ``reply_length``, the stage's longest reply, from which the
        node derives z with its own Δ₂. ``config``: the queries' sensitivity-setting
        entries. ``l2_sensitivity`` Δ₂ and ``noise_multiplier`` z (default: the
        mechanism's) where a learner's queries of one stage differ from the plan's unit.
        """
        delta2 = self.mechanism.l2_sensitivity if l2_sensitivity is None else l2_sensitivity
        z = self.noise_multiplier if noise_multiplier is None else noise_multiplier
        return NodeStage(
            name=name,
            method=method,
            mechanism=StageMechanism.GAUSSIAN,
            rounds=self.rounds if rounds is None else operator.index(rounds),
            sampling_rate=float(self.sampling_rate),
            reply_length=operator.index(reply_length),  # a NumPy integer as an int
            record_bound=float(record_bound),
            config=dict(config or {}),
            noise=z * (delta2 + rounding_margin(reply_length, "l2")),
            participation=float(self.participation),
            accounting=str(self.accounting),
        )

    def _event_at(self, noise_multiplier: float) -> dp_event.DpEvent:
        inner = GaussianMechanism(
            l2_sensitivity=self.mechanism.l2_sensitivity, noise_multiplier=noise_multiplier
        ).dp_event
        return participation_event(
            inner,
            sampling_probability=self.sampling_rate,
            participation=self.participation,
            accounting=self.accounting,
        )

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
        dims: int | None = None,
    ) -> GaussianRounds | None:
        """Calibrate z for ``rounds`` events on the ledger's budget and reserve them.

        ``dims``: most coordinates of one release; required under distributed
        noise, whose slack grows with it (module docstring).

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

        def calibrate(delta: float) -> float:
            return calibrate_participation_noise_multiplier(
                target_epsilon=budget.epsilon,
                target_delta=delta,
                sampling_probability=sampling_rate,
                participation=participation,
                steps=rounds,
                accounting=accounting,
            ).noise_multiplier

        if ledger.distributed is not None:
            participation = 1.0  # the server's coins: no amplification against the server
            z = _distributed_z(
                ledger, budget, rounds=rounds, dims=dims, l2_sensitivity=l2_sensitivity,
                calibrate=calibrate,
            )  # fmt: skip
        else:
            z = calibrate(budget.delta)
        mechanism = GaussianMechanism(l2_sensitivity=l2_sensitivity, noise_multiplier=z)
        event = participation_event(
            mechanism.dp_event,
            sampling_probability=sampling_rate,
            participation=participation,
            accounting=accounting,
        )
        ledger.reserve(event, rounds)
        return cls(
            ledger, mechanism, event, sampling_rate, rounds, rng, sum_bound, participation,
            ParticipationAccounting(accounting),
        )  # fmt: skip

    @classmethod
    def single(
        cls,
        ledger: PrivacyLedger | None,
        *,
        l2_sensitivity: float,
        rng: np.random.Generator,
        share: float,
        sum_bound: float | None = None,
        dims: int | None = None,
    ) -> GaussianRounds | None:
        """One release of every record at ``share``·(ε, δ) (:func:`certified_gaussian`),
        reserved now. ``None`` without a ledger (the non-private reference)."""
        budget = budget_of(ledger)
        if budget is None:
            return None
        if not 0 < share <= 1:
            raise ValueError(f"share must lie in (0, 1]; got {share!r}")
        check_private("rng", rng)
        sub = PrivacyBudget(epsilon=share * budget.epsilon, delta=share * budget.delta)

        def calibrate(delta: float) -> float:
            return certified_gaussian(
                epsilon=sub.epsilon, delta=delta, l2_sensitivity=l2_sensitivity
            ).noise_multiplier

        if ledger.distributed is not None:
            z = _distributed_z(
                ledger, sub, rounds=1, dims=dims, l2_sensitivity=l2_sensitivity,
                calibrate=calibrate,
            )  # fmt: skip
        else:
            z = calibrate(sub.delta)
        mechanism = GaussianMechanism(l2_sensitivity=l2_sensitivity, noise_multiplier=z)
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
        mechanism = self.mechanism
        if self.distributed:
            if not isinstance(aggregate, DistributedSum):
                # An exact sum in a distributed run: releasing it noiseless, or adding
                # central noise the nodes never agreed to, are both wrong. Fail closed.
                raise TypeError(
                    f"{label}: distributed noise expects the survivors' noisy sum; got an "
                    "exact sum (refused, nothing released)"
                )
            z = self.noise_multiplier * aggregate.noise_ratio
            self.ledger.spend_instead(self.event, self._event_at(z), label=label)
            noisy = np.array(aggregate, dtype=np.float64)  # already on the grid
            mechanism = GaussianMechanism(
                l2_sensitivity=mechanism.l2_sensitivity, noise_multiplier=z
            )
            margin = noise_margin(mechanism, noisy.size)
            check_release(noisy, bound=self.sum_bound, margin=margin, label=label)
            return noisy
        stage = ReleaseStage(ledger=self.ledger, mechanism=self.mechanism, rng=self.rng,
                             bound=self.sum_bound, sampling_probability=self.sampling_rate,
                             event=self.event)  # fmt: skip
        return stage.release(aggregate, label=label)


#: Shares of a stage's δ tried, in turn, for the distributed-noise slack (module docstring).
SLACK_SHARES = (1e-6, 1e-3, 1e-1)


def _distributed_z(
    ledger: PrivacyLedger,
    budget: PrivacyBudget,
    *,
    rounds: int,
    dims: int | None,
    l2_sensitivity: float,
    calibrate,
) -> float:
    """z for a distributed plan: calibrated at δ·(1 − a), with the plan's slack H
    (:func:`~fedpriv.privacy.distributed.plan_slack` at that z) charged to the ledger
    once (1 + e^ε)·H ≤ a·δ, for the first a of :data:`SLACK_SHARES` that allows it."""
    if dims is None:
        raise ValueError("dims (coordinates per release) is required under distributed noise")
    factor = 1.0 + math.exp(min(budget.epsilon, 700.0))
    for a in SLACK_SHARES:
        z = calibrate(budget.delta * (1.0 - a))
        std = z * (l2_sensitivity + rounding_margin(dims, "l2"))
        tv = plan_slack(rounds=rounds, dims=dims, std=std, setting=ledger.distributed)
        if factor * tv <= a * budget.delta:
            ledger.reserve_slack(tv)
            return z
    raise PrivacyBudgetExceededError(
        f"distributed noise: the slack of {rounds} releases of {dims} coordinates costs over "
        f"{SLACK_SHARES[-1]:g}·δ; nothing was reserved"
    )


def gaussian_stages(strategy: object) -> list[GaussianRounds]:
    """The Gaussian stages a strategy holds (its attributes, and theirs one level down),
    for the plan it declares to the nodes (:mod:`fedpriv.privacy.node_budget`)."""
    found: list[GaussianRounds] = []
    for value in vars(strategy).values():
        inner = [value, *(vars(value).values() if hasattr(value, "__dict__") else ())]
        found += [v for v in inner if isinstance(v, GaussianRounds) and v not in found]
    return found
