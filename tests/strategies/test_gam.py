"""DP-EBM server half: its plan of Gaussian events, the released steps, aborted rounds."""

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.gam import GAMClient
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig

from fedpriv.federation.protocol import ClientData
from fedpriv.models.gam import INTERCEPT_SENSITIVITY, L2_SENSITIVITY, Terms, newton_bin_updates
from fedpriv.models.gam_smooth import smoothing_matrix
from fedpriv.privacy import PrivacyBudget, PrivacyLedger, calibrate_gaussian_noise_multiplier
from fedpriv.privacy.ledger import PrivacyBudgetExceededError
from tests.keys import private_rng

DELTA = 1e-5


def _clients(n=80, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = (rng.random(n) < 0.2 + 0.6 * X[:, 0]).astype(float)
    half = n // 2
    return [ClientData(client_id=0, X=X[:half], y=y[:half]), ClientData(1, X[half:], y[half:])]


def _start(config, clients, *, ledger=None, seed=0):
    strategy = DPGAMStrategy(config, n_records=sum(c.n for c in clients))
    strategy.begin(
        n_features=clients[0].X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(seed),
        secret_rng=private_rng(seed),
    )
    return strategy


def _run(strategy, clients, *, abort=()):
    handler, states = GAMClient(), [{} for _ in clients]
    while (q := strategy.next_query()) is not None:
        if q.round in abort:
            strategy.update(q, None)
            continue
        replies = [
            handler.answer(q, c, np.arange(c.n), s) for c, s in zip(clients, states, strict=True)
        ]
        strategy.update(q, np.sum(replies, axis=0))
    return strategy


def test_config_ranges_are_checked_and_every_record_counts():
    cfg = GAMConfig()
    assert (cfg.rounds, cfg.bins, cfg.quantile_bins, cfg.sampling_rate) == (71, 16, True, 1.0)
    with pytest.raises(ValueError, match=r"rounds must be an integer in \[2, inf\); got 1"):
        GAMConfig(rounds=1)
    with pytest.raises(ValueError, match=r"bins must be an integer in \[2, 256\]; got 300"):
        GAMConfig(bins=300)
    with pytest.raises(ValueError, match=r"lam must lie in \[0, inf\); got -1"):
        GAMConfig(lam=-1.0)
    with pytest.raises(ValueError, match="max_update must lie in"):
        GAMConfig(max_update=0.0)


@pytest.mark.parametrize("sketch", [True, False])
def test_ledger_holds_one_gaussian_per_release_within_budget(sketch):
    clients = _clients()
    cfg = GAMConfig(rounds=7, bins=4, quantile_bins=sketch)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=DELTA))
    strategy = _run(_start(cfg, clients, ledger=ledger), clients)
    n_events = 7 + sketch
    z = calibrate_gaussian_noise_multiplier(
        target_epsilon=1.0, target_delta=DELTA, sampling_probability=1.0, steps=n_events
    ).noise_multiplier
    assert strategy.noise_multiplier_ == z
    assert [e.event for e in ledger.entries] == [dp_event.GaussianDpEvent(z)] * n_events
    labels = [e.label for e in ledger.entries]
    assert labels[0] == "round 0: intercept (Σg, Σh)"
    assert (labels[1] == "round 0: numeric columns' fine histograms") == sketch
    assert labels[-6:] == [f"round {t}: term {(t - 1) % 3} bin (Σg, Σh)" for t in range(1, 7)]
    report = ledger.report()
    assert report.epsilon <= 1.0 and not report.reserved  # the plan spent exactly
    model = strategy.model()
    if sketch:  # the cuts are the sketch's: at most bins − 1, on the fine grid
        for cuts in model.terms.cuts:
            assert cuts.size <= 3 and np.all(np.isclose(cuts * 256, np.round(cuts * 256)))
    else:
        for cuts in model.terms.cuts:
            np.testing.assert_array_equal(cuts, [0.25, 0.5, 0.75])


def test_a_plan_over_the_remaining_budget_raises_before_any_noise():
    clients = _clients()
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=DELTA))
    ledger.spend(dp_event.GaussianDpEvent(10.0), label="earlier release")
    with pytest.raises(PrivacyBudgetExceededError):
        _start(GAMConfig(rounds=5), clients, ledger=ledger)
    assert [e.label for e in ledger.entries] == ["earlier release"]


def test_non_private_steps_are_exact_newton_steps_with_the_floor_lambda():
    clients = _clients()
    cfg = GAMConfig(rounds=2, bins=4, quantile_bins=False, learning_rate=0.7, reg_lambda=2.0)
    strategy = _run(_start(cfg, clients), clients)
    y = np.concatenate([c.y for c in clients])
    X = np.vstack([c.X for c in clients])
    G, H = np.sum(0.5 - y), 0.25 * y.size
    b = -G / (H + 2.0)
    model = strategy.model()
    assert model.base == pytest.approx(b, rel=1e-12)
    p = 1 / (1 + np.exp(-b))
    bins = np.minimum((X[:, 0] * 4).astype(int), 3)
    g = np.bincount(bins, weights=p - y, minlength=4)
    h = np.bincount(bins, weights=np.full(y.size, p * (1 - p)), minlength=4)
    step = newton_bin_updates(g, h, learning_rate=0.7, reg_lambda=2.0, max_update=2.0)
    np.testing.assert_allclose(model.shapes[0], step, rtol=1e-9)
    assert all(np.all(s == 0) for s in model.shapes[1:])


def test_lambda_is_relative_to_the_noise_std_and_aborted_rounds_release_nothing():
    clients = _clients()
    cfg = GAMConfig(rounds=4, bins=4, lam=3.0, reg_lambda=1.0)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=DELTA))
    strategy = _start(cfg, clients, ledger=ledger)
    z = strategy.noise_multiplier_
    assert strategy._lambda(L2_SENSITIVITY) == pytest.approx(3.0 * z * L2_SENSITIVITY)
    assert strategy._lambda(INTERCEPT_SENSITIVITY) == pytest.approx(3.0 * z * INTERCEPT_SENSITIVITY)
    _run(strategy, clients, abort={2})
    assert len(ledger.entries) == 4  # intercept, sketch, rounds 1 and 3 (round 2 aborted)
    model = strategy.model()
    assert np.any(model.shapes[0] != 0) and np.all(model.shapes[1] == 0)
    assert np.any(model.shapes[2] != 0)
    # The bin steps are bounded whatever the noise.
    assert max(np.abs(s).max() for s in model.shapes) <= cfg.max_update


def test_gain_order_revisits_the_informative_column_and_cyclic_never_does():
    # Only column 0 carries signal (_clients): after one cyclic pass, the gain order
    # keeps returning to it; the cyclic order visits every column in turn.
    clients = _clients(n=400, d=3)
    half = {"rounds": 13, "learning_rate": 0.5}  # a half step leaves gain where there is signal
    gain = _run(_start(GAMConfig(column_order="gain", **half), clients), clients)
    cyclic = _run(_start(GAMConfig(**half), clients), clients)
    order = [gain._visits[t] for t in sorted(gain._visits)]
    assert order[:3] == [0, 1, 2] and list(cyclic._visits.values()) == [0, 1, 2] * 4
    later = order[3:]
    assert later.count(0) >= 4 and later.count(0) > max(later.count(1), later.count(2))
    with pytest.raises(ValueError, match="column_order must be one of"):
        GAMConfig(column_order="random")


def test_smoothing_acts_on_a_numeric_terms_value_bins_only():
    # Term 0: numeric, 4 value bins and a missing-value bin (feature 2 its indicator);
    # term 1: binary (feature 1 cut at ½).
    terms = Terms([0, 1], [0, 0], [2, -1], [True, False], ([0.25, 0.5, 0.75], [0.5]))
    strategy = DPGAMStrategy(GAMConfig(rounds=2, quantile_bins=False, smooth=2.0), terms=terms)
    strategy.begin(
        n_features=3, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    g, h = np.array([5.0, -2.0, 1.0, 3.0, 9.0]), np.array([4.0, 6.0, 5.0, 7.0, 2.0])
    # Noise far above the bin-to-bin differences: the widest kernel; none: as released.
    gs, hs = strategy.smooth(0, g, h, sigma=1e4)
    W = smoothing_matrix(4, 2.0)
    np.testing.assert_allclose(gs, np.append(W @ g[:4], 9.0), rtol=1e-12)
    np.testing.assert_allclose(hs, np.append(W @ h[:4], 2.0), rtol=1e-12)
    np.testing.assert_array_equal(strategy.smooth(0, g, h, sigma=0.0)[0], g)
    g2, h2 = np.array([1.0, -3.0]), np.array([2.0, 5.0])
    out = strategy.smooth(1, g2, h2, sigma=1e4)  # a binary term: as released
    assert out[0] is g2 and out[1] is h2
    off = DPGAMStrategy(GAMConfig(smooth=0.0), terms=terms)
    off.begin(n_features=3, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0))
    assert off.smooth(0, g, h, sigma=1e4)[0] is g
    with pytest.raises(ValueError, match=r"smooth must lie in \[0, inf\) bins; got -1"):
        GAMConfig(smooth=-1.0)
