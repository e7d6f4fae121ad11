"""Hostile participants in process: every tampered upload has its asserted outcome.

One client of four tampers with its round-1 upload (``tests/federation/hostile.py``)
in a DP boosting run under secure aggregation. Whatever it sends, the run finishes;
the round is released from the honest survivors alone (``dropout``), not released
and not spent (``aborted``), or spent and discarded by the range check
(``discarded``). Never is a forged value part of the released model. The same
cases over Flower messages are in ``tests/server/test_hostile_flower.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.data import load_heart
from fedpriv.federation.engine import RoundEngine, client_key
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.secagg import SecAggConfig
from fedpriv.methods import StrategyContext, get_method
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.range_guard import (
    ReleaseOutOfRange,
    binomial_upper,
    check_release,
    gaussian_margin,
)
from tests.federation.hostile import (
    ATTACK_ROUND,
    CASES,
    HOSTILE,
    PLAIN_CASES,
    RANGE_CASES,
    VICTIM,
    HostileTransport,
)
from tests.keys import key_for

K = 4
ROUNDS = 3


class Recorder:
    """The strategy, keeping each round's aggregate as the engine hands it over."""

    def __init__(self, strategy) -> None:
        self.strategy, self.got = strategy, {}

    def __getattr__(self, name):
        return getattr(self.strategy, name)

    def update(self, query, aggregate) -> None:
        self.got.setdefault(query.round, aggregate)  # the first hand-over of the round
        self.strategy.update(query, aggregate)


def run(
    case: str | None,
    method: str = "boosting",
    *,
    secure: bool = True,
    rounds_override: int | None = None,
    **config,
):
    ds = load_heart()
    X, y = ds.xy("train")
    clients = [
        ClientData(client_id=i, X=X[rows], y=y[rows])
        for i, rows in enumerate(ds.client_partition(K))
    ]
    record = get_method(method)
    if method == "boosting":  # round r grows tree r: no intercept round
        config = {"intercept": False, **config}
    cfg = record.config_class(rounds=rounds_override or ROUNDS, **config)
    context = StrategyContext(
        schema=ds.schema, n_features=X.shape[1], n_records=int(y.size), n_classes=2
    )
    strategy = Recorder(record.build_strategy(cfg, context))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=record.delta))
    key = key_for(11)
    transport = HostileTransport(
        case or "replay",  # an unused case when honest
        clients=clients,
        handler=record.client_handler(),
        client_keys=[client_key(key, c.client_id) for c in clients],
        secure_aggregation=secure,
        secagg=SecAggConfig(),
        vectorised=False,
    )
    if case is None:
        transport.case = "honest"
    engine = RoundEngine(
        transport, n_clients=K, max_records=max(c.n for c in clients), secure_aggregation=secure
    )
    engine.begin(strategy, n_features=X.shape[1], ledger=ledger, seed=3, secret_key=key)
    if secure:
        engine.setup_keys()
    engine.run(strategy)
    return strategy, transport, engine.communication, ledger


def honest_sum(transport, round_id: int, without: set[int]) -> np.ndarray:
    return sum(v for c, v in transport.honest[round_id].items() if c not in without)


def test_an_honest_run_releases_every_round_exactly():
    strategy, transport, comm, ledger = run(None)
    assert comm.rounds_released == ROUNDS and comm.rejected_replies == comm.client_errors == 0
    for r in range(ROUNDS):
        np.testing.assert_allclose(strategy.got[r], honest_sum(transport, r, set()), atol=1e-8)
    assert len(ledger.entries) == ROUNDS


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_upload_never_enters_the_model(case):
    outcome = CASES[case]
    strategy, transport, comm, ledger = run(case)
    got = strategy.got[ATTACK_ROUND]
    values = strategy.strategy.model().leaf_values
    assert comm.rounds == ROUNDS  # the run went on to its end
    for r in set(range(ROUNDS)) - {ATTACK_ROUND}:  # the other rounds are untouched
        np.testing.assert_allclose(strategy.got[r], honest_sum(transport, r, set()), atol=1e-8)
        assert np.any(values[r] != 0.0)
    if outcome == "dropout":
        # Exactly the honest survivors' sum: the forged upload is not a summand.
        np.testing.assert_allclose(got, honest_sum(transport, ATTACK_ROUND, {HOSTILE}), atol=1e-8)
        assert comm.rounds_aborted == 0 and comm.recoveries == 1
        # Refused by the server's checks, failed at the client, or simply lost.
        assert comm.client_errors == (case == "nan")
        assert comm.rejected_replies == (case not in ("nan", "straggler"))
        assert len(ledger.entries) == ROUNDS
    elif outcome == "aborted":
        assert got is None and comm.rounds_aborted == 1 and comm.rounds_discarded == 0
        assert len(ledger.entries) == ROUNDS - 1  # nothing released, nothing spent
        assert np.all(values[ATTACK_ROUND] == 0.0)
    else:
        assert outcome == "discarded"
        # The attack bites: the unmasked sum is far beyond any honest one ...
        assert np.abs(got).max() > 1e6
        # ... and its release was spent, then discarded: the tree adds nothing.
        assert comm.rounds_aborted == comm.rounds_discarded == 1
        assert len(ledger.entries) == ROUNDS
        assert np.all(values[ATTACK_ROUND] == 0.0)
    assert np.abs(np.concatenate(values)).max() < 5.0  # honest leaves are a few logits


@pytest.mark.parametrize("case", sorted(PLAIN_CASES))
def test_plain_sums_refuse_a_forged_vector_as_its_senders_dropout(case):
    strategy, transport, comm, ledger = run(case, secure=False)
    assert comm.rejected_replies == 1 and comm.rounds_aborted == 0
    without = honest_sum(transport, ATTACK_ROUND, {HOSTILE})
    np.testing.assert_allclose(strategy.got[ATTACK_ROUND], without, atol=1e-8)
    assert len(ledger.entries) == ROUNDS


def test_the_victim_of_an_impersonation_is_not_a_summand_either():
    # The aborted round released nothing: neither the victim's nor the forger's values.
    strategy, *_ = run("impersonation")
    assert strategy.got[ATTACK_ROUND] is None and VICTIM != HOSTILE


def test_dpsgd_parameters_stay_bounded_under_a_wrapped_sum():
    ref, *_ = run(None, "logistic", sampling_rate=0.5, recalibrate_share=0.0)
    strategy, _, comm, ledger = run(
        "ring_wrap", "logistic", sampling_rate=0.5, recalibrate_share=0.0
    )
    assert comm.rounds_discarded == 1 and len(ledger.entries) == ROUNDS
    params = strategy.strategy.model().params
    # Without the range check one step moves θ by ~lr·2^31/batch (≈ 5e9 was seen).
    assert np.all(np.isfinite(params)) and np.abs(params).max() < 10.0
    assert np.abs(params - ref.strategy.model().params).max() > 0.0


def test_the_range_check_has_the_false_alarm_rate_it_states():
    # 2,000 honest noisy sums at the bound: a 1e-3 alarm rate must fire rarely, a
    # 0.5 rate often; the margin is a union bound, so the observed rate is below it.
    rng = np.random.default_rng(0)
    d, std, bound = 50, 3.0, 100.0
    fired = {p: 0 for p in (1e-3, 0.5)}
    for _ in range(2000):
        noisy = bound * rng.choice([-1.0, 1.0], size=d) + rng.normal(0.0, std, size=d)
        for p in fired:
            try:
                check_release(noisy, bound=bound, margin=gaussian_margin(std, d, p), label="t")
            except ReleaseOutOfRange:
                fired[p] += 1
    assert fired[1e-3] <= 2000 * 1e-3 + 6  # ≤ p (binomial slack)
    assert fired[0.5] >= 20  # the check is not vacuous
    with pytest.raises(ReleaseOutOfRange):
        check_release(np.array([np.nan]), bound=1.0, margin=1.0, label="t")


def _predictions(strategy) -> np.ndarray:
    X, _ = load_heart().xy("test")
    return strategy.strategy.model().predict_proba(X)


def test_a_sum_inflated_past_an_honest_sample_is_discarded_at_the_sampling_rate():
    """At boosting's q = 0.05 an honest sample holds ≈ 5 % of the records, so a forged
    sum of half record_bound · n is ≈ 10× any honest one: the check that knows q
    discards the round (spent, nothing derived released); the model is the honest
    run's without that tree."""
    assert RANGE_CASES["inflated"] == "discarded"
    strategy, transport, comm, ledger = run("inflated")
    assert strategy.strategy.config.sampling_rate == 0.05  # the default rate
    got = strategy.got[ATTACK_ROUND]
    assert np.abs(got).max() > 5.0 * np.abs(honest_sum(transport, ATTACK_ROUND, set())).max()
    assert comm.rounds_discarded == comm.rounds_aborted == 1
    assert len(ledger.entries) == ROUNDS  # spent, then discarded
    values = strategy.strategy.model().leaf_values
    assert np.all(values[ATTACK_ROUND] == 0.0)
    spread = _predictions(strategy)
    assert np.abs(spread - 0.5).max() < 0.2  # three honest-or-empty trees: near ½


def test_the_twin_bound_that_ignores_the_sampling_rate_lets_the_forgery_move_predictions(
    monkeypatch,
):
    """The same attack against the bound record_bound · n (q ignored): released."""
    import strategies.boosting as boosting

    def old(record_bound, n_records, *, sampling_rate):  # the twin ignores q
        return float(record_bound) * float(n_records)

    honest, *_ = run(None)
    guarded, *_ = run("inflated")
    monkeypatch.setattr(boosting, "sum_bound", old)
    strategy, _, comm, _ = run("inflated")
    assert comm.rounds_discarded == 0  # the forgery passed
    # The guarded run differs from the honest one by one missing tree (≈ 0.02 seen);
    # the forged tree moves every prediction (≈ 0.12 seen: all of them below ½).
    lost = np.abs(_predictions(guarded) - _predictions(honest)).max()
    moved = np.abs(_predictions(strategy) - _predictions(honest)).max()
    assert moved > 0.08 and moved > 3.0 * lost, (moved, lost)


def test_honest_sampled_rounds_are_not_discarded():
    """Thirty honest rounds at q = 0.05: the binomial bound raises no false alarm."""
    *_, comm, ledger = run(None, rounds_override=30)
    assert comm.rounds_discarded == comm.rounds_aborted == 0
    assert len(ledger.entries) == 30


@pytest.mark.parametrize("n, q", [(700, 0.05), (30_000, 0.02), (50, 0.5), (10, 1.0)])
def test_the_binomial_bound_holds_with_the_false_alarm_rate_and_is_not_vacuous(n, q):
    from scipy.stats import binom

    bound = binomial_upper(n, q)
    assert binom.sf(bound, n, q) <= 1e-9  # P(X > B) ≤ p: sound
    assert bound >= binom.isf(1e-9, n, q)
    if q < 1.0:
        assert bound < n  # and it uses q
    draws = np.random.default_rng(0).binomial(n, q, size=200_000)
    assert draws.max() <= bound
