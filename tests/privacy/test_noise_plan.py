"""A joint plan of Gaussian stages: the shares' ratios kept, the whole ε spent, never more."""

import numpy as np
import pytest
from dp_accounting import dp_event

from fedpriv.privacy.accounting import account
from fedpriv.privacy.distributed import DistributedNoise
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyBudgetExceededError, PrivacyLedger
from fedpriv.privacy.noise_plan import StagePlan, joint_multipliers, plan_stages
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import (
    calibrate_participation_noise_multiplier,
    participation_event,
)
from fedpriv.privacy.pld import flatten
from tests.keys import private_rng

DELTA = 1e-5
# DP-SGD's shape, shortened: a centring round, the steps, two recalibration rounds.
STAGES = [
    StagePlan(share=0.05, l2_sensitivity=4.0, sampling_rate=1.0, rounds=1, dims=8),
    StagePlan(share=0.85, l2_sensitivity=3.0, sampling_rate=0.05, rounds=100, dims=20),
    StagePlan(share=0.1, l2_sensitivity=2.0, sampling_rate=1.0, rounds=2, dims=6),
]


def _ledger(eps, **kw):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=DELTA), **kw)


def _alone(stage, eps, rho=1.0, accounting="valid"):
    return calibrate_participation_noise_multiplier(
        target_epsilon=stage.share * eps,
        target_delta=stage.share * DELTA,
        sampling_probability=stage.sampling_rate,
        participation=rho,
        steps=stage.rounds,
        accounting=accounting,
    ).noise_multiplier


def _spent(zs, stages=STAGES, rho=1.0, accounting="valid"):
    groups = []
    for z, s in zip(zs, stages, strict=True):
        one = participation_event(
            dp_event.GaussianDpEvent(z),
            sampling_probability=s.sampling_rate,
            participation=rho,
            accounting=accounting,
        )
        groups += flatten(one, s.rounds)
    return account(groups, DELTA).epsilon_pld


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_the_plan_spends_the_whole_budget_at_the_shares_ratios(eps):
    ledger = _ledger(eps)
    planned = plan_stages(ledger, STAGES, participation=1.0, accounting="valid", rng=private_rng(0))
    zs = [p.noise_multiplier for p in planned]
    alone = [_alone(s, eps) for s in STAGES]
    # One scale on every stage: the ratios are the separate calibrations'.
    np.testing.assert_allclose(np.array(zs) / np.array(alone), zs[0] / alone[0], rtol=1e-12)
    assert 0.99 * eps <= ledger.planned_epsilon() <= eps
    assert [p.rounds for p in planned] == [1, 100, 2]
    assert [p.mechanism.l2_sensitivity for p in planned] == [4.0, 3.0, 2.0]
    # The twin: calibrated each alone for its share, the same plan leaves ε unspent.
    assert _spent(alone) < 0.95 * eps
    assert ledger.planned_epsilon() == pytest.approx(_spent(zs), rel=1e-9)


def test_tight_participation_is_kept_in_every_stage():
    ledger = _ledger(1.0)
    planned = plan_stages(ledger, STAGES, participation=0.5, accounting="tight", rng=private_rng(0))
    assert all(p.participation == 0.5 and p.accounting == "tight" for p in planned)
    zs = [p.noise_multiplier for p in planned]
    assert 0.99 <= _spent(zs, rho=0.5, accounting="tight") <= 1.0


def test_one_stage_is_its_own_calibration():
    stage = StagePlan(share=1.0, l2_sensitivity=3.0, sampling_rate=0.05, rounds=100, dims=20)
    joint = plan_stages(
        _ledger(2.0), [stage], participation=1.0, accounting="valid", rng=private_rng(0)
    )
    alone = GaussianRounds.plan(
        _ledger(2.0), l2_sensitivity=3.0, sampling_rate=0.05, rounds=100, participation=1.0,
        accounting="valid", rng=private_rng(0),
    )  # fmt: skip
    assert joint[0].noise_multiplier == alone.noise_multiplier
    assert joint[0].event == alone.event
    # Only the shares' ratios matter: one stage at share 0.3 gets the whole budget too.
    lone = StagePlan(share=0.3, l2_sensitivity=1.0, sampling_rate=0.05, rounds=100)
    assert joint_multipliers(
        [lone], epsilon=2.0, delta=DELTA, participation=1.0, accounting="valid"
    ) == (alone.noise_multiplier,)


def test_a_plan_that_does_not_fit_reserves_nothing():
    ledger = _ledger(1.0)
    ledger.spend(dp_event.GaussianDpEvent(8.0), label="an earlier release")
    before = ledger.planned_items()
    with pytest.raises(PrivacyBudgetExceededError, match="nothing was released"):
        plan_stages(ledger, STAGES, participation=1.0, accounting="valid", rng=private_rng(0))
    assert ledger.planned_items() == before


def test_no_ledger_is_the_non_private_reference():
    assert plan_stages(None, STAGES, participation=1.0, accounting="valid", rng=None) is None
    inf = PrivacyLedger(budget=PrivacyBudget(epsilon=float("inf"), delta=DELTA))
    assert plan_stages(inf, STAGES, participation=1.0, accounting="valid", rng=None) is None


def test_distributed_noise_charges_the_plans_slack_and_stays_within_budget():
    ledger = _ledger(2.0)
    ledger.use_distributed_noise(DistributedNoise(dropouts=1, max_parties=4))
    planned = plan_stages(ledger, STAGES, participation=0.5, accounting="tight", rng=private_rng(0))
    # No amplification from the server's own participation coins.
    assert all(p.participation == 1.0 for p in planned)
    assert ledger.report().slack > 0
    assert 0.99 * 2.0 <= ledger.planned_epsilon() <= 2.0
    with pytest.raises(ValueError, match="dims"):
        plan_stages(
            _distributed_ledger(),
            [StagePlan(share=1.0, l2_sensitivity=1.0, sampling_rate=1.0, rounds=1)] * 2,
            participation=1.0, accounting="valid", rng=private_rng(0),
        )  # fmt: skip


def _distributed_ledger():
    ledger = _ledger(2.0)
    ledger.use_distributed_noise(DistributedNoise(dropouts=1, max_parties=4))
    return ledger


def test_a_stage_is_checked():
    with pytest.raises(ValueError, match="share must lie in"):
        StagePlan(share=0.0, l2_sensitivity=1.0, sampling_rate=1.0, rounds=1)
    with pytest.raises(ValueError, match="sampling_rate"):
        StagePlan(share=0.5, l2_sensitivity=1.0, sampling_rate=1.5, rounds=1)
