"""A forged sum from a hostile client, caught by the range guard at the sampling rate.

The review's row: a hostile client adds a large value to its masked upload at
boosting's default q = 0.05. An honest coordinate of the round's sum is bounded by
the per-record bound times a Poisson(q) sample's records (the binomial's upper
quantile at the guard's false-alarm rate, :func:`fedpriv.privacy.range_guard.
binomial_upper`), not times every record; a sum an order of magnitude past that is
discarded (spent, nothing derived released). The hostile transport is
``tests/federation/hostile.py`` (case ``inflated``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.data import load_heart
from fedpriv.privacy.range_guard import binomial_upper
from tests.federation.hostile import ATTACK_ROUND, RANGE_CASES
from tests.federation.test_hostile import ROUNDS, honest_sum, run


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
    import fedpriv.strategies.boosting as boosting

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
