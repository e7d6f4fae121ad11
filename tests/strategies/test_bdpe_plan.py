"""bdpe_α's plan spends its budget: the paper's shares at one calibrated scale."""

import functools
import logging

import numpy as np
import pytest
from fedpriv.strategies import bdpe_plan
from fedpriv.strategies.bdpe import BDPEConfig, BDPEStrategy
from fedpriv.strategies.bdpe_plan import releases, shares

from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.calibration_plan import calibrate_pure_plan
from tests.keys import private_rng

DELTA = 1e-5


def _begun(config: BDPEConfig, epsilon: float) -> tuple[BDPEStrategy, PrivacyLedger]:
    s = BDPEStrategy(config, numeric=np.ones(3, bool), n_records=1000)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=DELTA))
    s.begin(n_features=3, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng(7))
    return s, ledger


def _spends(ledger: PrivacyLedger, epsilon: float) -> bool:
    """The whole reserved plan, as the ledger certifies it, in [0.99 ε, ε]."""
    return 0.99 * epsilon <= ledger.planned_epsilon() <= epsilon


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
def test_the_default_plan_spends_its_budget_at_the_runs_delta(epsilon):
    s, ledger = _begun(BDPEConfig(), epsilon)
    assert _spends(ledger, epsilon), ledger.planned_epsilon()
    plan = s.plan_
    assert plan.scale.reached and plan.scale.shortfall == ""
    # One scale x over the paper's shares: ε_level : ε_pred : ε_cal unchanged.
    level, pred, cal = shares(trees=20, depth=4, beta_tree=0.5, calibrate_share=0.1)
    x = s.epsilon_level_ / (level * epsilon)
    assert x > 1.5  # 80 levels and 21 Laplace releases compose far below their sum
    assert s.epsilon_pred_ == pytest.approx(x * pred * epsilon, rel=1e-8)
    assert s.epsilon_calibration_ == pytest.approx(x * cal * epsilon, rel=1e-8)


@pytest.mark.parametrize("epsilon", [0.5, 8.0])
def test_twin_the_basic_composition_split_fails_the_same_check(epsilon):
    # The split whose pure ε's sum to ε (scale 1): what bdpe planned before. Under the
    # ledger's accountants at δ it spends about half the budget, and the check refutes it.
    config = BDPEConfig()
    split, leaves, counts = releases(config, epsilon)
    assert split.epsilon * 80 + leaves.epsilon * 20 + counts.epsilon == pytest.approx(epsilon)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=DELTA))
    ledger.reserve(split, 80)
    ledger.reserve(leaves.dp_event, 20)
    ledger.reserve(counts.dp_event, 1)
    assert not _spends(ledger, epsilon)
    assert ledger.planned_epsilon() < 0.6 * epsilon


def test_a_plan_of_few_releases_keeps_the_basic_split():
    # One tree of depth 1: three releases, whose composition at δ = 1e-5 is their sum.
    s, ledger = _begun(BDPEConfig(trees=1, depth=1), 2.0)
    assert _spends(ledger, 2.0)
    assert s.plan_.scale.scale == pytest.approx(1.0, abs=1e-9)


def test_a_plan_that_cannot_spend_its_budget_says_why(monkeypatch, caplog):
    capped = functools.partial(calibrate_pure_plan, max_scale=1.2)
    monkeypatch.setattr(bdpe_plan, "calibrate_pure_plan", capped)
    with caplog.at_level(logging.WARNING, logger="fedpriv.strategies.bdpe_plan"):
        s, ledger = _begun(BDPEConfig(trees=5, depth=2), 2.0)
    assert not s.plan_.scale.reached and ledger.planned_epsilon() < 0.99 * 2.0
    assert "largest scale allowed, 1.2" in s.plan_.scale.shortfall
    assert any("the rest of the budget is not spent" in r.message for r in caplog.records)
