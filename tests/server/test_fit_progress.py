"""The estimators' public progress callback: ``fit(..., on_round=f)``."""

from __future__ import annotations

import numpy as np
from fedpriv.server.estimators import DPBoostingClassifier

from fedpriv.federation.engine import RoundDone
from tests.keys import key_for


def _data():
    rng = np.random.default_rng(0)
    X = rng.random((400, 4))
    return X, (X[:, 0] + X[:, 1] > 1.0).astype(int)


def test_on_round_reports_every_round_with_the_fits_ledger():
    X, y = _data()
    seen: list[RoundDone] = []
    est = DPBoostingClassifier(
        rounds=4, depth=2, epsilon=2.0, num_clients=2, max_records=300, secret_key=key_for(1)
    )
    est.fit(X, y, on_round=seen.append)
    assert [d.round for d in seen] == [0, 1, 2, 3]
    assert all(d.released for d in seen) and est.run_outcome_.rounds_released == 4
    assert all(d.ledger is est.ledger_ for d in seen)  # the fit's own ledger
    bound = seen[-1].ledger.epsilon_upper_bound()  # what a bar shows: ε spent ≤ bound
    assert est.epsilon_spent_ <= bound <= 2.0 + 1e-3
    # The callback observes only: the same key gives the same model with or without it.
    plain = DPBoostingClassifier(**est.get_params()).fit(X, y)
    np.testing.assert_array_equal(plain.predict_proba(X), est.predict_proba(X))


def test_a_non_private_fit_reports_no_ledger():
    X, y = _data()
    seen: list[RoundDone] = []
    DPBoostingClassifier(rounds=2, depth=2, epsilon=float("inf"), num_clients=2).fit(
        X, y, on_round=seen.append
    )
    assert [(d.round, d.ledger) for d in seen] == [(0, None), (1, None)]
