"""DP-SGD's automatic schedule: q, T and η from the public record bound; explicit values win."""

import math

import numpy as np
import pytest
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.server.estimators import DPLogisticClassifier, DPMLPClassifier
from fedpriv.strategies import dpsgd_schedule as sch
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig

from fedpriv.federation.protocol import ClientData
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for, private_rng

#: The public bounds n = K × max-records of the bundled corpora at their default K
#: (Adult, BRFSS, Diabetes 130-US: the matched benchmark's tables) and Heart's.
LARGE = (26_050, 38_400, 146_290)
HEART = 640


def _rule(n: int, paper_lr: float) -> tuple[int, float, float]:
    """The module docstring's rule, written out: q = max(0.02, min(1, 500/n)), T = 16/q,
    η = η₀·√(0.02/q)."""
    q = max(0.02, min(1.0, 500 / n))
    return round(16 / q), q, paper_lr * math.sqrt(0.02 / q)


@pytest.mark.parametrize("config", [LogisticConfig, MLPConfig])
@pytest.mark.parametrize("n", [1, 100, 499, 500, 501, HEART, 2_750, 6_879, 24_999])
def test_small_tables_follow_the_batch_floor_rule(config, n):
    c = config().for_records(n)
    t, q, lr = _rule(n, config.paper_learning_rate)
    assert (c.rounds, c.sampling_rate) == (t, pytest.approx(q, rel=1e-15))
    assert c.learning_rate == pytest.approx(lr, rel=1e-12)
    assert c.sampling_rate * n >= min(n, 500) * (1 - 1e-12)  # the expected batch's floor
    assert c.rounds * c.sampling_rate == pytest.approx(16, abs=0.5 * c.sampling_rate)


@pytest.mark.parametrize("config", [LogisticConfig, MLPConfig])
@pytest.mark.parametrize("n", [25_000, *LARGE, 10**7])
def test_large_tables_keep_the_papers_settings_exactly(config, n):
    c = config().for_records(n)
    assert (c.rounds, c.sampling_rate, c.learning_rate) == (800, 0.02, config.paper_learning_rate)
    assert not c.automatic and c.for_records(640) is c  # resolved once: a fixed point


def test_heart_gets_large_batches_and_few_steps():
    c = LogisticConfig().for_records(HEART)
    assert (c.rounds, c.sampling_rate) == (20, 500 / 640)
    assert c.learning_rate == pytest.approx(2.0 * math.sqrt(0.02 * 640 / 500))


def test_explicit_settings_win_and_the_rest_follow_the_run_q():
    n = HEART
    q_auto = 500 / n
    c = LogisticConfig(rounds=50).for_records(n)
    assert (c.rounds, c.sampling_rate) == (50, q_auto)
    c = LogisticConfig(sampling_rate=0.3).for_records(n)
    assert (c.rounds, c.sampling_rate) == (53, 0.3)  # round(16 / 0.3)
    assert c.learning_rate == pytest.approx(2.0 * math.sqrt(0.02 / 0.3))
    c = MLPConfig(learning_rate=0.7).for_records(n)
    assert (c.rounds, c.sampling_rate, c.learning_rate) == (20, q_auto, 0.7)
    explicit = LogisticConfig(rounds=800, sampling_rate=0.02, learning_rate=2.0)
    assert explicit.for_records(n) is explicit and not explicit.automatic
    # An explicit q on a large table keeps it, and T follows it, not the paper's 800.
    assert LogisticConfig(sampling_rate=0.1).for_records(LARGE[0]).rounds == 160


def test_automatic_rounds_cover_the_centring_and_recalibration_rounds():
    # q = 1: T = 16, more than the 1 + 2 + 1 rounds a plan needs; an explicit q near 1
    # with T = round(16/q) never drops below them.
    c = MLPConfig(sampling_rate=1.0).for_records(10)
    assert c.rounds == 16 >= c.least_rounds == 4
    assert sch.auto_rounds(1.0, least=40) == 40


def test_the_strategy_resolves_from_its_public_n_not_the_rows():
    # 60 rows held, a public bound of 640: q, T and the queries follow the bound.
    rng = np.random.default_rng(0)
    X, y = rng.random((60, 4)), (rng.random(60) < 0.4).astype(float)
    strategy = DPSGDStrategy(LogisticConfig(), n_records=HEART)
    assert (strategy.rounds, strategy.config.sampling_rate) == (20, 500 / 640)
    assert strategy.expected_batch == pytest.approx(500.0)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    strategy.begin(
        n_features=4, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    stages = {s.name: s for s in strategy.node_stages()}
    assert stages["step"].sampling_rate == 500 / 640
    assert sum(s.rounds for s in stages.values()) == 20  # centring, 17 steps, 2 recal
    data, client, rates = ClientData(client_id=0, X=X, y=y), DPSGDClient(), []
    while (q := strategy.next_query()) is not None:
        rates.append(q.sampling_rate)
        strategy.update(q, client.answer(q, data, np.arange(data.n), {}))
    assert len(rates) == 20 and rates.count(500 / 640) == 17
    assert 0.99 <= ledger.report().epsilon <= 1.0  # the plan, resolved, spends ε


def test_the_estimator_plans_the_resolved_rounds_from_the_declared_bound():
    rng = np.random.default_rng(1)
    X, y = rng.random((90, 3)), (rng.random(90) < 0.5).astype(int)
    # K = 3 clients × a declared 100 records: n = 300, not the 90 rows held.
    est = DPLogisticClassifier(
        epsilon=2.0, num_clients=3, max_records=100, secret_key=key_for(3),
        secure_aggregation=False,
    ).fit(X, y)  # fmt: skip
    assert est.rounds == 0 and est.sampling_rate == 0.0  # the parameters stay automatic
    assert (est.config_.rounds, est.config_.sampling_rate) == (16, 1.0)  # 500/300 → 1
    assert est.run_outcome_.rounds_planned == est.communication_.rounds == 16
    mlp = DPMLPClassifier(
        epsilon=2.0, num_clients=3, max_records=100, rounds=6, secret_key=key_for(3),
        secure_aggregation=False,
    ).fit(X, y)  # fmt: skip
    assert (mlp.config_.rounds, mlp.run_outcome_.rounds_planned) == (6, 6)  # explicit wins


def test_run_settings_resolve_from_num_clients_times_max_records():
    s = RunSettings(method="mlp", dataset="heart", num_clients=4, max_records=160)
    with pytest.raises(SettingError, match=r"rounds of method 'mlp' is automatic \(0\)"):
        _ = s.rounds  # a 0 must never reach Flower's num_rounds
    r = s.for_records(s.public_records)
    assert s.public_records == HEART
    assert (r.rounds, r.config.sampling_rate) == (20, 500 / 640)
    config = r.to_run_config()
    assert (config["rounds"], config["sampling-rate"]) == (20, 500 / 640)
    # The run config a launcher writes parses back to the same, explicit, settings.
    again = RunSettings.from_run_config(config)
    assert again.config == r.config and again.for_records(10**6) == again
    boosting = RunSettings(method="boosting")
    assert boosting.for_records(10) is boosting and boosting.rounds == boosting.config.rounds


def test_the_launcher_writes_the_resolved_schedule_into_the_run_config():
    from fedpriv.server.resolve import resolve

    run = resolve({"dataset": "heart", "method": "logistic"})
    settings, config = run.settings, run.run_config
    n = settings.num_clients * settings.max_records  # the ServerApp's own public n
    assert (config["rounds"], config["sampling-rate"]) == (
        LogisticConfig().for_records(n).rounds,
        LogisticConfig().for_records(n).sampling_rate,
    )
    assert config["rounds"] == settings.rounds < 800 and config["learning-rate"] < 2.0
    explicit = resolve({"dataset": "heart", "method": "logistic", "rounds": 30}).run_config
    assert explicit["rounds"] == 30
