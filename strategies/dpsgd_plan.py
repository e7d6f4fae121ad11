"""The noise plan of a DP-SGD run: its stages, calibrated jointly to the run's budget.

A run has up to three stages (:mod:`fedpriv.strategies.dpsgd`): the centring round
(one Gaussian sum over every record, ``centre_share``), the T − 1 − 2 steps
(Poisson(q)-subsampled Gaussian sums, the rest of the budget) and the two
recalibration rounds (Gaussian sums over every record,
``recalibrate_share``). The shares set the stages' relative noise and one
scale on all of them spends the whole (ε, δ) under the PLD accountant
(:mod:`fedpriv.privacy.noise_plan`): calibrated separately, each for its
share, the default plan spent 0.45 / 1.79 / 7.18 of ε = 0.5 / 2 / 8 (logistic
regression) and 0.42 / 1.70 / 6.80 (the MLP); jointly, ε within 5e-4·ε below
the target, the steps' noise multiplier 0.91 / 0.93 / 0.96 (logistic regression)
and 0.86 / 0.90 / 0.94 (the MLP, whose larger recalibration share costs more
apart) of the separate one (800 rounds, q = 0.02, δ = 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.strategies.dpsgd_recalibration import RecalibrationRounds, noise_walk, resolve

from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import NetworkSpec
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_plan import StagePlan, joint_multipliers, plan_stages
from fedpriv.privacy.noise_stage import GaussianRounds, budget_of
from fedpriv.privacy.range_guard import sum_bound


@dataclass(frozen=True, kw_only=True)
class SGDShape:
    """The public shape of a run: what its stages release and how often."""

    spec: NetworkSpec
    n_records: int  # the public n (sum bounds, the linear map's count bound)
    participation: float  # ρ: the steps' expected batch is ρ·q·n
    steps: int
    sensitivity: float  # Δ₂ of a step's reply
    row_bound: float  # Δ₂ of the centring round's reply
    n_features: int
    centring: bool
    recalibrating: bool
    unit_records: int = 1  # m: the recalibration sums' unit (steps and centring clip per unit)


@dataclass(frozen=True)
class SGDNoise:
    """The planned stages (``None`` where a stage is absent or the run non-private) and
    the steps' noise walk (:func:`~fedpriv.strategies.dpsgd_recalibration.noise_walk`)."""

    centre: GaussianRounds | None
    steps: GaussianRounds | None
    recalibration: RecalibrationRounds | None
    walk: float


def plan_noise(config, shape: SGDShape, ledger: PrivacyLedger | None, *, rng) -> SGDNoise:
    """Plan, calibrate jointly and reserve the run's stages (``config``: the run's
    :class:`~fedpriv.strategies.dpsgd_config.LogisticConfig`); no ledger: the non-private
    reference."""
    cfg, s = config, shape
    batch = s.participation * cfg.sampling_rate * s.n_records

    def walk(z: float) -> float:
        return noise_walk(
            steps=s.steps, learning_rate=cfg.learning_rate, noise_std=z * s.sensitivity,
            batch=batch,
        )  # fmt: skip

    plans = [
        StagePlan(
            share=1.0 - cfg.centre_share - cfg.recalibrate_share * s.recalibrating,
            l2_sensitivity=s.sensitivity,
            sampling_rate=cfg.sampling_rate,
            rounds=s.steps,
            sum_bound=sum_bound(s.sensitivity, s.n_records, sampling_rate=cfg.sampling_rate),
            dims=s.spec.n_params,
        )
    ]
    if s.centring:
        centre = StagePlan(
            share=cfg.centre_share,
            l2_sensitivity=s.row_bound,
            sampling_rate=1.0,
            rounds=1,
            sum_bound=sum_bound(s.row_bound, s.n_records, sampling_rate=1.0),
            dims=s.n_features,
        )
        plans.insert(0, centre)
    stage = int(s.centring)  # the steps' index in the plan
    rounds = None
    if s.recalibrating:
        # The mode follows the steps' noise walk in the joint plan (a public function of
        # the plan: a stage's multiplier does not depend on its sensitivity).
        w, budget = 0.0, budget_of(ledger)
        if budget is not None:
            ratio = StagePlan(
                share=cfg.recalibrate_share, l2_sensitivity=1.0, sampling_rate=1.0,
                rounds=recal.ROUNDS,
            )  # fmt: skip
            z = joint_multipliers(
                [*plans, ratio],
                epsilon=budget.epsilon,
                delta=budget.delta,
                participation=s.participation,
                accounting=cfg.participation_accounting,
            )[stage]
            w = walk(z)
        n = s.participation * s.n_records
        rounds = RecalibrationRounds(
            resolve(cfg.recalibration, w), s.spec, n, n_bound=s.n_records,
            unit_records=s.unit_records,
        )  # fmt: skip
        plans.append(rounds.stage_plan(share=cfg.recalibrate_share, n_bound=s.n_records))
    noises = plan_stages(
        ledger,
        plans,
        participation=s.participation,
        accounting=cfg.participation_accounting,
        rng=rng,
    ) or [None] * len(plans)
    if rounds is not None:
        rounds.use(noises[-1])
    steps = noises[stage]
    return SGDNoise(
        centre=noises[0] if s.centring else None,
        steps=steps,
        recalibration=rounds,
        walk=0.0 if steps is None else walk(steps.noise_multiplier),
    )
