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
    check_release,
    gaussian_margin,
)
from tests.federation.hostile import (
    ATTACK_ROUND,
    CASES,
    HOSTILE,
    PLAIN_CASES,
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
