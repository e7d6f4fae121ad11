"""No exact row count in an estimator's control flow: declared, or released and accounted.

Before, an undeclared ``max_records`` made the rows' exact count public: the random
forest's automatic depth was 1 at 127 rows and 2 at 128 (ε ≥ 1), a perfect membership
test. Now the fit releases a Laplace count through its ledger (1 % of ε, the learner
gets the rest) and every size-dependent choice follows the count's upper bound; or the
caller declares ``max_records`` and nothing is counted. The twin restores the exact
count and the membership test is perfect again.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.server.forest_estimators import DPRandomForestClassifier

import fedpriv.privacy.record_count as record_count
from fedpriv.privacy.record_count import (
    COUNT_LABEL,
    COUNT_SHARE,
    COUNT_TAIL,
    count_mechanism,
    count_upper_bound,
)
from tests.keys import key_for

EPS = 1.0
KEYS = range(10)


def _rows(n: int):
    rng = np.random.default_rng(0)
    X, y = rng.random((128, 3)), (rng.random(128) < 0.5).astype(int)
    y[:2] = [0, 1]  # both classes among the first 127 rows
    return X[:n], y[:n]


def _forest(n: int, key: int, **params) -> DPRandomForestClassifier:
    return DPRandomForestClassifier(
        epsilon=EPS, secret_key=key_for(key), num_clients=2, **params
    ).fit(*_rows(n))


def _depth(clf) -> int:
    return clf.model_.trees[0].depth


def test_the_forest_depth_no_longer_tells_127_rows_from_128():
    same = sum(_depth(_forest(127, k)) == _depth(_forest(128, k)) for k in KEYS)
    assert same >= len(KEYS) - 1  # a membership advantage of at most 0.1 over 10 keys


def test_the_count_is_released_through_the_fit_ledger_within_epsilon():
    clf = _forest(127, 0)
    labels = [e.label for e in clf.ledger_.entries]
    assert labels[0] == COUNT_LABEL and len(labels) == 2  # the count, then the leaves
    count = clf.ledger_.entries[0].event
    assert (count.epsilon, count.delta) == (pytest.approx(COUNT_SHARE * EPS), 0.0)
    assert clf.epsilon_spent_ <= EPS + 1e-9
    # The saved public facts hold the released bound, not the rows' count.
    assert clf.context_.n_records > 127


def test_twin_with_the_exact_count_the_depth_is_a_perfect_membership_test(monkeypatch):
    monkeypatch.setattr(record_count, "release_count", lambda ledger, n, **_: (float(n), int(n)))
    depths = {(n, k): _depth(_forest(n, k)) for n in (127, 128) for k in KEYS}
    assert {depths[127, k] for k in KEYS} == {1} and {depths[128, k] for k in KEYS} == {2}


def test_a_declared_bound_fixes_the_depth_and_counts_nothing():
    a, b = _forest(127, 0, max_records=64), _forest(128, 0, max_records=64)
    assert _depth(a) == _depth(b)
    assert all(e.label != COUNT_LABEL for e in a.ledger_.entries)
    assert a.context_.n_records == 2 * 64


def test_other_learners_charge_the_count_too():
    clf = DPBoostingClassifier(rounds=2, depth=2, epsilon=EPS, secret_key=key_for(1),
                               num_clients=2).fit(*_rows(128))  # fmt: skip
    assert clf.ledger_.entries[0].label == COUNT_LABEL
    assert clf.epsilon_spent_ <= EPS + 1e-9


def test_the_upper_bound_holds_with_its_tail_and_is_tight():
    mech = count_mechanism(0.01)
    rng = np.random.default_rng(1)
    n = 1000
    noisy = n + rng.laplace(0.0, mech.scale, size=200_000)
    upper = np.array([count_upper_bound(v, mech) for v in noisy[:2000]])
    assert (upper >= n).all()
    # The bound sits b·ln(1/2p) above the draw: ≈ 2,072 for b = 100, p = 1e-9.
    gap = upper - noisy[:2000]
    assert np.all(gap < mech.scale * math.log(1 / (2 * COUNT_TAIL)) + 2)
    assert (noisy.min() + mech.scale * math.log(1 / (2 * COUNT_TAIL))) >= n
