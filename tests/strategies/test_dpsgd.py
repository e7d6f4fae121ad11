"""DP-SGD server half: the released step, its noise law, its accounting and an audit."""

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig
from scipy import stats

from fedpriv.federation.protocol import ClientData
from fedpriv.models.networks import InputMap
from fedpriv.privacy import (
    PrivacyBudget,
    PrivacyLedger,
    account,
    audit_epsilon,
    calibrate_gaussian_noise_multiplier,
    ks_noise_test,
)
from fedpriv.privacy.pld import flatten
from tests.keys import private_rng

DELTA = 1e-5


def _data(n=60, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return ClientData(client_id=0, X=rng.random((n, d)), y=(rng.random(n) < 0.4).astype(float))


def _ledger(eps):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=DELTA))


def _start(config, data, *, eps=None, seed=0, **kw):
    strategy = DPSGDStrategy(config, n_records=data.n, **kw)
    ledger = _ledger(eps) if eps is not None else None
    strategy.begin(
        n_features=data.X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(seed),
        secret_rng=private_rng(seed),
    )
    return strategy, ledger


def test_config_defaults_are_automatic_and_ranges_are_checked():
    # rounds, q and the learning rate are automatic (0): the paper's from n = 25,000
    # (fedpriv.strategies.dpsgd_schedule; tests/strategies/test_dpsgd_schedule.py).
    for config, lr in ((LogisticConfig(), 2.0), (MLPConfig(), 3.0)):
        assert (config.rounds, config.sampling_rate, config.learning_rate) == (0, 0.0, 0.0)
        paper = config.for_records(26_050)
        assert (paper.rounds, paper.sampling_rate, paper.learning_rate) == (800, 0.02, lr)
    cfg = LogisticConfig()
    assert (cfg.clip_norm, MLPConfig().hidden) == (3.0, 16)
    with pytest.raises(ValueError, match=r"clip_norm must lie in \(0, inf\); got -1"):
        LogisticConfig(clip_norm=-1)
    with pytest.raises(
        ValueError, match=r"^sampling_rate must lie in \(0, 1\] or 0 \(0: automatic\); got 1.5$"
    ):
        LogisticConfig(sampling_rate=1.5)
    with pytest.raises(
        ValueError, match=r"^learning_rate must lie in \(0, inf\) or 0 \(0: automatic\); got -2"
    ):
        LogisticConfig(learning_rate=-2)
    with pytest.raises(
        ValueError,
        match=r"^rounds must be 0 \(automatic\) or lie in \[4, inf\) \(centre_share=0.05 takes "
        r"the first and recalibrate_share=0.05 the last 2 of the rounds, and a step\); got 3$",
    ):
        LogisticConfig(rounds=3)
    with pytest.raises(
        TypeError,
        match=r"^sampling_rate must be a real .* \(0: automatic\); got True \(bool\)$",
    ):
        LogisticConfig(sampling_rate=True)
    with pytest.raises(ValueError, match="backend must be one of"):
        LogisticConfig(backend="jax")


def test_ledger_holds_one_subsampled_gaussian_per_step_within_budget():
    cfg = MLPConfig(hidden=3, rounds=20, sampling_rate=0.1, centre_share=0.0, recalibrate_share=0.0)
    data = _data()
    strategy, ledger = _start(cfg, data, eps=1.0)
    client = DPSGDClient()
    while (q := strategy.next_query()) is not None:
        strategy.update(q, client.answer(q, data, np.arange(0, data.n, 3), {}))
    z = calibrate_gaussian_noise_multiplier(
        target_epsilon=1.0, target_delta=DELTA, sampling_probability=0.1, steps=20
    ).noise_multiplier
    assert strategy.noise_multiplier_ == z
    expected = dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(z))
    assert [e.event for e in ledger.entries] == [expected] * 20
    report = ledger.report()
    assert report.epsilon <= 1.0
    assert report.epsilon == pytest.approx(account(flatten(expected, 20), DELTA).epsilon)
    assert not report.reserved  # the plan was spent exactly


@pytest.mark.parametrize("config", [LogisticConfig, MLPConfig])
def test_centring_round_and_steps_share_the_budget(config):
    # Round 0: one Gaussian on every record, then T − 1 steps; the shares s and 1 − s
    # set their noise's ratio (each calibrated alone for its share of (ε, δ)), and one
    # scale on both spends the whole ε (fedpriv.privacy.noise_plan).
    cfg = config(rounds=20, sampling_rate=0.1, centre_share=0.1, recalibrate_share=0.0)
    data = _data()
    strategy, ledger = _start(cfg, data, eps=1.0)
    client = DPSGDClient()
    while (q := strategy.next_query()) is not None:
        strategy.update(q, client.answer(q, data, np.arange(0, data.n, 3), {}))
    z0_alone = calibrate_gaussian_noise_multiplier(
        target_epsilon=0.1, target_delta=0.1 * DELTA, sampling_probability=1.0, steps=1
    ).noise_multiplier
    z_alone = calibrate_gaussian_noise_multiplier(
        target_epsilon=0.9, target_delta=0.9 * DELTA, sampling_probability=0.1, steps=19
    ).noise_multiplier
    z0, z = strategy._centre_noise.noise_multiplier, strategy.noise_multiplier_
    assert z0 / z == pytest.approx(z0_alone / z_alone, rel=1e-12)
    assert z < z_alone  # composed by the PLD, the two stages cost less than 0.1 + 0.9
    step = dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(z))
    assert [e.event for e in ledger.entries] == [dp_event.GaussianDpEvent(z0)] + [step] * 19
    report = ledger.report()
    assert 0.99 <= report.epsilon <= 1.0 and not report.reserved
    # Logistic regression clips its bias on its own (B = 1): sensitivity √(C² + 1).
    bound = np.hypot(cfg.clip_norm, 1.0) if config is LogisticConfig else cfg.clip_norm
    assert strategy.sensitivity == pytest.approx(bound)


def test_released_step_is_sum_plus_gaussian_noise_over_the_expected_batch():
    # θ_{t+1} = θ_t − η (Σ clip(g) + N(0, (zC)² I)) / (ρ q n): recover the noise and test its law.
    cfg = MLPConfig(
        hidden=8, rounds=60, sampling_rate=0.25, learning_rate=3.0, centre_share=0.0,
        recalibrate_share=0.0,
    )  # fmt: skip
    data = _data(d=10)
    strategy, _ = _start(cfg, data, eps=2.0, participation=0.5)
    client = DPSGDClient()
    noise = []
    while (q := strategy.next_query()) is not None:
        before = q.arrays["params"].copy()
        total = client.answer(q, data, np.arange(0, data.n, 2), {})
        strategy.update(q, total)
        after = strategy.model().params
        scale = cfg.learning_rate / (0.5 * 0.25 * data.n)
        noise.append((before - after) / scale - total)
    noise = np.concatenate(noise)
    sigma = strategy.noise_multiplier_ * cfg.clip_norm
    assert noise.size == 60 * strategy.spec.n_params
    assert ks_noise_test(noise, stats.norm(0, sigma)) > 1e-3
    assert np.std(noise) == pytest.approx(sigma, rel=0.03)
    # The same test rejects a law with 15 % less noise: it can fail.
    assert ks_noise_test(noise, stats.norm(0, 0.85 * sigma)) < 1e-4


def test_aborted_step_releases_nothing_and_keeps_the_parameters():
    cfg = LogisticConfig(rounds=2, centre_share=0.0, recalibrate_share=0.0)
    strategy, ledger = _start(cfg, _data(), eps=1.0)
    q = strategy.next_query()
    strategy.update(q, None)
    np.testing.assert_array_equal(strategy.model().params, q.arrays["params"])
    assert ledger.entries == ()
    with pytest.raises(ValueError, match="update for step 0, expected step 1"):
        strategy.update(q, np.zeros(5))


def test_non_private_mode_adds_no_noise_and_needs_no_ledger():
    cfg = LogisticConfig(
        rounds=3, sampling_rate=0.02, learning_rate=2.0, centre_share=0.0, recalibrate_share=0.0
    )
    data = _data()
    strategy, _ = _start(cfg, data)
    assert strategy.noise_multiplier_ is None
    q = strategy.next_query()
    total = DPSGDClient().answer(q, data, np.arange(data.n), {})
    strategy.update(q, total)
    np.testing.assert_allclose(strategy.model().params, -2.0 * total / (0.02 * data.n))
    # The budget is the ledger's (configs hold no ε): a finite-ε ledger always gets
    # calibrated noise with the whole plan reserved, and ε = ∞ is the non-private
    # reference like no ledger (this replaces the old "private config without a
    # ledger" refusal, which the design made impossible).
    private, ledger = _start(cfg, data, eps=2.0)
    assert private.noise_multiplier_ is not None and private.noise_multiplier_ > 0
    assert ledger.report().reserved
    reference, _ = _start(cfg, data, eps=float("inf"))
    assert reference.noise_multiplier_ is None


def test_divergence_is_reported_not_released_silently():
    cfg = LogisticConfig(rounds=2, learning_rate=1e308, centre_share=0.0, recalibrate_share=0.0)
    data = _data()
    strategy, _ = _start(cfg, data)
    q = strategy.next_query()
    with pytest.raises(FloatingPointError, match="parameters diverged"):
        strategy.update(q, np.full(q.reply_length, 1e10))


def _one_step_release(config, data, canary, clip_seen_by_client, secret_rng):
    """θ₁ of a one-step full-batch run on data (+ canary), as the server releases it.

    The noise comes from ``secret_rng``, the audit's private generator: each
    trial continues its stream, so trials draw independent noise.
    """
    rows = data if canary is None else canary
    start = np.array([0.0, 0.0, 0.0, 0.0, 5.0])  # σ(f) ≈ 1: the canary's |p − y| ≈ 1
    box = InputMap(np.full(4, 0.5), np.full(4, np.sqrt(12)))  # the schema's standardisation
    strategy = DPSGDStrategy(config, n_records=60, initial_params=start, input_map=box)
    strategy.begin(
        n_features=4,
        ledger=_ledger(2.0),  # ε = 2 (test below)
        rng=np.random.default_rng(0),  # public; unused: the initial parameters are given
        secret_rng=secret_rng,
    )
    q = strategy.next_query()
    shown = type(q)(**{**q.__dict__, "config": {**q.config, "clip_norm": clip_seen_by_client}})
    total = DPSGDClient().answer(shown, rows, np.arange(rows.n), {})
    strategy.update(q, total)
    return strategy.model().params


@pytest.mark.parametrize("broken", [False, True])
def test_audit_one_step_does_not_leak_more_than_claimed(broken):
    # D vs D + one canary (x = 1, y = 0; √3 per feature after the input map)
    # whose gradient, of norm ≈ √13 ≈ 3.6, is clipped to C = 1; the released
    # θ's projection on it is the distinguishing statistic. Broken: clients
    # clip at 4C while the noise is calibrated for C, so the canary moves the
    # sum by ≈ 3.6 C — the audit must catch that.
    # ε = 2: at ε = 1 a few thousand trials cannot resolve a bound worth testing.
    cfg = LogisticConfig(
        rounds=1, sampling_rate=1.0, clip_norm=1.0, centre_share=0.0, recalibrate_share=0.0
    )
    data = _data(n=59, d=4)
    canary = ClientData(
        client_id=0,
        X=np.vstack([data.X, np.ones((1, 4))]),
        y=np.append(data.y, 0.0),
    )
    clip = 4.0 if broken else 1.0
    res = audit_epsilon(
        lambda rng: _one_step_release(cfg, data, None, clip, rng),
        lambda rng: _one_step_release(cfg, data, canary, clip, rng),
        statistic=lambda theta: -(theta[:4].sum() + theta[4] / np.sqrt(3)),
        n_trials=4000,
        delta=DELTA,
        rng=private_rng(99),
    )
    if broken:
        assert res.epsilon_lower_bound > 2.0
    else:
        assert 0.5 < res.epsilon_lower_bound <= 2.0


@pytest.mark.parametrize("config", [LogisticConfig, MLPConfig])
def test_the_three_stage_plan_spends_the_whole_budget(config):
    # Centring, 57 steps and two recalibration rounds: calibrated each alone for its
    # share, they composed to 0.42–0.45 of ε = 0.5; jointly the plan spends ε.
    cfg = config(rounds=60, sampling_rate=0.1)
    strategy, ledger = _start(cfg, _data(), eps=0.5)
    stages = strategy.node_stages()
    assert [s.rounds for s in stages] == [1, 57, 2]
    assert 0.99 * 0.5 <= ledger.planned_epsilon() <= 0.5
    # Every stage's noise scaled by one factor below 1 from its separate calibration.
    alone = calibrate_gaussian_noise_multiplier(
        target_epsilon=0.5 * (1 - cfg.centre_share - cfg.recalibrate_share),
        target_delta=DELTA * (1 - cfg.centre_share - cfg.recalibrate_share),
        sampling_probability=0.1,
        steps=57,
    ).noise_multiplier
    assert 0.8 * alone < strategy.noise_multiplier_ < alone
