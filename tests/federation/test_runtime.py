"""In-process runtime: identical results on every path, participation, dropouts, accounting."""

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.boosting import BoostingClient
from fedpriv.strategies.boosting import L2_SENSITIVITY, BoostingConfig, DPBoostingStrategy

from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.federation.boosting_fits import assert_same_model, boosting_fit, toy_clients
from tests.keys import key_for


@pytest.fixture(scope="module")
def clients():
    return toy_clients(1500, 5)


def _run(clients, *, epsilon=None, rounds=12, **kw):
    return boosting_fit(clients, rounds=rounds, depth=3, sampling_rate=0.1, epsilon=epsilon, **kw)


@pytest.mark.parametrize("epsilon", [None, 2.0])
def test_secure_plain_vectorised_and_per_client_paths_release_the_same_model(clients, epsilon):
    ref = _run(clients, epsilon=epsilon)[0].model()
    for kw in (
        {"secure_aggregation": False},
        {"vectorised": False},
        {"secure_aggregation": False, "vectorised": False},
    ):
        assert_same_model(ref, _run(clients, epsilon=epsilon, **kw)[0].model())


def test_same_seed_and_key_same_model_other_key_or_seed_other_model(clients):
    a = _run(clients, epsilon=2.0)[0].model()
    assert_same_model(a, _run(clients, epsilon=2.0)[0].model())
    # Another key: the same public trees, other noise and Poisson coins.
    other_key = _run(clients, epsilon=2.0, secret_key=key_for(1))[0].model()
    for ta, tb in zip(a.trees, other_key.trees, strict=True):
        np.testing.assert_array_equal(ta.feature, tb.feature)
        np.testing.assert_array_equal(ta.threshold, tb.threshold)
    assert not np.allclose(a.leaf_values[0], other_key.leaf_values[0])
    # The same key under another public seed: other trees.
    other_seed = _run(clients, epsilon=2.0, seed=8)[0].model()
    assert not np.array_equal(a.trees[0].feature, other_seed.trees[0].feature) or not (
        np.array_equal(a.trees[0].threshold, other_seed.trees[0].threshold)
    )


def test_ledger_records_one_subsampled_gaussian_per_round(clients):
    strategy, _, ledger = _run(clients, epsilon=1.0, rounds=12)
    events = [e.event for e in ledger.entries]
    assert len(events) == 12
    z = strategy.noise_multiplier_
    assert set(events) == {dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(z))}
    assert ledger.epsilon() <= 1.0
    assert ledger.epsilon() > 0.99  # the plan spends the budget, no more
    assert L2_SENSITIVITY == pytest.approx(np.sqrt(1 + 0.25**2))


@pytest.mark.parametrize("rho", [0.3, 0.6])
def test_participation_never_lowers_the_noise(clients, rho):
    full, _, ledger_full = _run(clients, epsilon=1.0)
    part, rt, ledger_part = _run(clients, epsilon=1.0, participation=rho)
    assert part.noise_multiplier_ == full.noise_multiplier_
    # Accounted at the record rate q, not ρ·q.
    assert {e.event.sampling_probability for e in ledger_part.entries} == {0.1}
    assert ledger_part.epsilon() <= ledger_full.epsilon()
    sent = rt.communication.floats_uploaded
    assert sent.min() < sent.max() or sent.sum() < 5 * 12 * 16


def test_dropouts_are_recovered_and_unrecoverable_rounds_release_nothing(clients):
    _, rt, ledger = _run(clients, epsilon=2.0, dropout_rate=0.3)
    comm = rt.communication
    assert comm.recoveries > 0
    assert comm.rounds_aborted > 0  # fewer than t = 3 of 5 survived
    # Key exchange (keys, key book) + one query per round + one consistency exchange and
    # one unmask per unaborted round.
    assert comm.round_trips == 2 + comm.rounds + 2 * (comm.rounds - comm.rounds_aborted)
    released = len(ledger.entries)
    assert released == comm.rounds - comm.rounds_aborted
    assert ledger.epsilon() <= 2.0


def test_a_stricter_threshold_aborts_more_rounds_and_releases_only_the_rest(clients):
    from fedpriv.federation.secagg import SecAggConfig

    _, rt, _ = _run(clients, epsilon=2.0, dropout_rate=0.3)
    _, strict, ledger = _run(
        clients, epsilon=2.0, dropout_rate=0.3, secagg=SecAggConfig(threshold_fraction=0.8)
    )
    assert strict.communication.rounds_aborted > rt.communication.rounds_aborted
    assert len(ledger.entries) == strict.communication.rounds - strict.communication.rounds_aborted


def test_every_secure_round_has_one_unmask_exchange(clients):
    _, rt, _ = _run(clients, epsilon=2.0)
    comm = rt.communication
    assert comm.recoveries == 0
    # Key exchange; query, consistency and unmask per round.
    assert comm.round_trips == 2 + 3 * comm.rounds
    _, plain, _ = _run(clients, epsilon=2.0, secure_aggregation=False)
    assert plain.communication.round_trips == plain.communication.rounds  # untouched


def test_communication_counts_floats_and_bytes(clients):
    _, rt, _ = _run(clients, epsilon=None, rounds=10)
    comm = rt.communication.to_dict()
    assert comm["floats_uploaded_per_client"] == [10 * 16] * 5  # 2·2^D floats per round
    # Per round: the masked vector, the 64 B signature on the survivor list and the unmask
    # answer (5 shares of 40 B, no pair masks without dropouts); once: the public key and
    # the verify key, and one batch of seed shares sealed for each of the 4 other holders
    # (10 B header, a share of 40 B for each of the run's 10 rounds, 16 B tag): the batch
    # holds the rounds the strategy plans, not the 16 a batch may cover.
    batch = 4 * (10 + 10 * 40 + 16)
    assert comm["bytes_uploaded_per_client"] == [10 * (16 * 8 + 64 + 5 * 40) + batch + 64] * 5
    assert comm["rounds"] == 10


def test_single_participant_round_is_aborted_under_secure_aggregation():
    X = np.random.default_rng(0).random((50, 3))
    one = make_clients(X, np.zeros(50), [np.arange(50)])
    with pytest.raises(ValueError, match=r"secure aggregation needs at least 2 clients"):
        _run(one, epsilon=2.0, rounds=3)  # K = 1: every round would abort; refused up front
    # K = 2 at ρ = 0.3 (test key 0): the rounds asking fewer than two release nothing.
    two = make_clients(X, np.zeros(50), [np.arange(25), np.arange(25, 50)])
    _, rt, ledger = _run(two, epsilon=2.0, rounds=6, participation=0.3)
    aborted = rt.communication.rounds_aborted
    assert 0 < aborted <= 6 and len(ledger.entries) == 6 - aborted


def test_participation_has_one_source_a_strategy_planned_for_another_is_refused(clients):
    """ρ decides the strategy's accounting and the runtime's draws: one value. A strategy
    calibrated for ρ = 0.2 (tight accounting) on a runtime at ρ = 1 would report the
    ε of ρ = 0.2 while spending that of ρ = 1: refused before any round."""
    from fedpriv.privacy.participation import plan_event

    cfg = BoostingConfig(
        rounds=12, depth=3, sampling_rate=0.1, intercept=False, participation_accounting="tight"
    )
    runtime = dict(clients=clients, handler=BoostingClient(), seed=7, secret_key=key_for(0))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    rt = InProcessRuntime(**runtime, participation=1.0)
    with pytest.raises(ValueError, match=r"planned for participation 0\.2 .* draws clients at 1;"):
        rt.run(DPBoostingStrategy(cfg, participation=0.2), ledger=ledger)
    assert rt.communication.rounds == 0 and not ledger.entries  # nothing sent, nothing spent
    # Unset, the runtime takes the strategy's ρ: clients are drawn at 0.2, and the ledger
    # reports the ε of what ran.
    rt = InProcessRuntime(**runtime)
    strategy = rt.run(DPBoostingStrategy(cfg, participation=0.2), ledger=ledger)
    sent = rt.communication.floats_uploaded
    assert rt.communication.rounds == 12 and sent.sum() < 5 * 12 * 16  # not all every round
    assert 0.0 < ledger.epsilon() <= 1.0
    # What the refusal prevents: the same noise at ρ = 1 is due well over the budget.
    due = PrivacyLedger(budget=PrivacyBudget(epsilon=100.0, delta=1e-5))
    z = strategy.noise_multiplier_
    due.spend(plan_event(z, sampling_probability=0.1, participation=1.0, steps=12), label="ρ=1")
    assert due.epsilon() > 1.2


@pytest.mark.parametrize("frozen_before", [False, True])
def test_a_large_secure_run_sets_its_keys_aside_from_the_collector_and_thaws_them(
    clients, monkeypatch, frozen_before
):
    # A large run (here any, LARGE_RUN lowered) freezes what is alive once its keys are set
    # up and thaws it at its end: a garbage cycle from before is collected after the run,
    # nothing stays frozen. A process that froze objects itself is left as it is (the twin).
    import gc
    import weakref

    from fedpriv.federation import runtime
    from fedpriv.federation.engine import RoundEngine

    monkeypatch.setattr(runtime, "LARGE_RUN", 2)
    seen, run_round = [], RoundEngine.run_round
    monkeypatch.setattr(
        RoundEngine,
        "run_round",
        lambda e, q: (seen.append(gc.get_freeze_count()), run_round(e, q))[1],
    )

    class Node:
        pass

    cycle = Node()
    cycle.me = cycle  # garbage once dropped, freed only by the collector
    gone = weakref.ref(cycle)
    del cycle
    if frozen_before:
        gc.freeze()
    try:
        base = gc.get_freeze_count()
        _run(clients, rounds=3)
        after = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    if frozen_before:
        assert base > 0 and after > base // 2 and min(seen) > base // 2  # not thawed by it
    else:
        gc.collect()
        assert gone() is None  # thawed with the run's end: collected
        assert base == 0 and after == 0 and min(seen) > 0  # frozen during the rounds only
    # Nor does the process keep the run's latest round (its share layout, its list).
    from fedpriv.federation import secagg_consistency, secagg_server

    assert secagg_server._last_index[0] == () == secagg_consistency._last_view[0]
