"""participation_accounting wired through both learners, the estimators and the run config."""

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.server.estimators import DPBoostingClassifier, DPLogisticClassifier
from fedpriv.strategies.boosting import BoostingConfig
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig

from fedpriv.data.corpora import schema as public_schema
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy import (
    EffectiveRateDpEvent,
    ParticipationAccounting,
    ParticipationDpEvent,
    calibrate_participation_noise_multiplier,
)
from tests.keys import key_for

RHO = 0.5
EVENT_TYPE = {
    "valid": dp_event.PoissonSampledDpEvent,
    "tight": ParticipationDpEvent,
    "paper": EffectiveRateDpEvent,
}


def _data(n=400, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = (X[:, 0] + 0.3 * rng.standard_normal(n) > 0.5).astype(float)
    return X, y


def _boosting(mode, participation=RHO):
    return DPBoostingClassifier(
        rounds=6,
        depth=3,
        sampling_rate=0.2,
        epsilon=2.0,
        participation=participation,
        participation_accounting=mode,
        num_clients=4,
        max_records=100,  # 400 rows over 4 clients: declared, nothing counted
        max_aborted_share=1.0,  # the accounting is under test, not the status
        seed=1,
        secret_key=key_for(1),  # fixed participation and Poisson coins
    )


def _dpsgd(mode):
    return DPLogisticClassifier(
        centre_share=0.0,  # the steps' accounting alone
        recalibrate_share=0.0,
        rounds=8,
        sampling_rate=0.2,
        epsilon=2.0,
        participation=RHO,
        participation_accounting=mode,
        num_clients=4,
        max_records=100,  # 400 rows over 4 clients: declared, nothing counted
        max_aborted_share=1.0,  # the accounting is under test, not the status
        seed=1,
        secret_key=key_for(1),  # fixed participation and Poisson coins
    )


@pytest.mark.parametrize("make", [_boosting, _dpsgd], ids=["boosting", "dpsgd"])
def test_each_mode_calibrates_records_and_reports_as_documented(make):
    X, y = _data()
    z = {}
    for mode in ParticipationAccounting:
        clf = make(mode).fit(X, y)
        cfg = clf._config()
        steps = cfg.rounds
        expected = calibrate_participation_noise_multiplier(
            target_epsilon=2.0,
            target_delta=1e-5,
            sampling_probability=0.2,
            participation=RHO,
            steps=steps,
            accounting=mode,
        )
        z[mode] = clf.noise_multiplier_
        assert z[mode] == expected.noise_multiplier
        events = {entry.event for entry in clf.ledger_.entries}
        assert len(events) == 1 and isinstance(events.pop(), EVENT_TYPE[mode])
        assert clf.epsilon_spent_ <= 2.0
        assert clf.privacy_report_.certified is (mode != "paper")
    assert z["paper"] < z["tight"] < z["valid"]


def test_default_is_valid_and_full_participation_makes_modes_agree():
    assert BoostingConfig().participation_accounting is ParticipationAccounting.VALID
    assert LogisticConfig().participation_accounting is ParticipationAccounting.VALID
    assert DPBoostingClassifier().participation_accounting == "valid"
    X, y = _data()
    full = {mode: _boosting(mode, participation=1.0).fit(X, y) for mode in ("valid", "paper")}
    assert full["valid"].noise_multiplier_ == full["paper"].noise_multiplier_
    assert full["paper"].privacy_report_.certified


def test_config_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match=r"must be one of \['valid', 'tight', 'paper'\]; got 'x'"):
        BoostingConfig(participation_accounting="x")
    with pytest.raises(ValueError, match=r"must be one of \['valid', 'tight', 'paper'\]; got 'x'"):
        LogisticConfig(participation_accounting="x")


@pytest.mark.parametrize("mode", list(ParticipationAccounting))
def test_dpsgd_divides_by_the_expected_batch_in_every_mode(mode):
    cfg = LogisticConfig(sampling_rate=0.05, participation_accounting=mode)
    strategy = DPSGDStrategy(cfg, n_records=1000, participation=0.25)
    assert strategy.expected_batch == pytest.approx(0.25 * 0.05 * 1000)


def test_flower_server_builds_strategies_from_the_run_config_key():
    pytest.importorskip("flwr")
    from fedpriv.server.app import build_strategy

    schema = public_schema("heart")
    for method in ("boosting", "logistic"):
        s = RunSettings.from_run_config(
            {
                "method": method,
                "participation": 0.25,
                "participation-accounting": "tight",
                "rounds": 5,
            }
        )
        strategy = build_strategy(s, schema, n_records=500, n_features=schema.n_features)
        assert strategy.config.participation_accounting is ParticipationAccounting.TIGHT
        assert strategy.participation == 0.25
