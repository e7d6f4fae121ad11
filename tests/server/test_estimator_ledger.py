"""Fitting twice on the same rows: a shared ``ledger=`` chains the spend; without one, the
report's scope says it covers one fit and a refit warns."""

import logging
import math

import numpy as np
import pytest
from fedpriv.server.estimator_base import SCOPE_SHARED, SCOPE_THIS_FIT
from fedpriv.server.estimators import DPRandomForestClassifier
from sklearn.base import clone

from fedpriv.privacy import (
    GaussianMechanism,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
)
from fedpriv.privacy.record_count import COUNT_LABEL
from tests.keys import key_for

RNG = np.random.default_rng(0)
X = RNG.random((120, 3))
Y = (X[:, 0] > 0.5).astype(int)


def _forest(**kw):
    # One Gaussian leaf release calibrated to exactly (ε, δ) = (1, 1e-6).
    args = {"trees": 3, "depth": 2, "epsilon": 1.0, "delta": 1e-6, "secret_key": key_for(1)}
    return DPRandomForestClassifier(**{**args, **kw})


def _shared(eps):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=1e-6))


def test_without_a_ledger_the_report_covers_this_fit_only_and_a_refit_warns(caplog):
    est = _forest()
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        est.fit(X, Y)
        assert "refitted" not in caplog.text
        assert est.privacy_report_.to_dict()["scope"] == SCOPE_THIS_FIT
        est.fit(X, Y)
    assert "DPRandomForestClassifier refitted without ledger=" in caplog.text


def test_fits_chain_onto_a_shared_ledger_and_one_past_it_raises_before_any_noise(
    monkeypatch, caplog
):
    shared = _shared(1.2)  # one fit's ε = 1 fits; two compose to more than 1.2
    est = _forest(ledger=shared)
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        est.fit(X, Y)
    assert "refitted" not in caplog.text
    assert est.privacy_report_.to_dict()["scope"] == SCOPE_SHARED
    assert est.ledger_ is not shared and est.ledger_.entries == shared.entries
    assert est.epsilon_spent_ == pytest.approx(shared.epsilon())
    assert est.epsilon_spent_ <= 1.0
    spent = shared.entries

    def no_noise(self, value, *, rng):
        raise AssertionError("noise drawn")

    monkeypatch.setattr(GaussianMechanism, "apply", no_noise)
    again = clone(est)  # clone shares the ledger: cross-validation on the rows is charged too
    assert again.get_params()["ledger"] is shared
    with pytest.raises(PrivacyBudgetExceededError, match="charged to the shared ledger"):
        again.fit(X, Y)
    # No learner noise drawn; only the fit's record count (max_records undeclared), which
    # fitted the shared budget, was released, and it stays charged.
    (count,) = shared.entries[len(spent) :]
    assert shared.entries[: len(spent)] == spent and count.label == COUNT_LABEL


def test_a_non_private_fit_is_charged_as_a_non_private_event():
    with pytest.raises(PrivacyBudgetExceededError):
        _forest(epsilon=math.inf, ledger=_shared(10.0)).fit(X, Y)
    unlimited = _shared(math.inf)
    _forest(epsilon=math.inf, ledger=unlimited).fit(X, Y)
    assert [type(e.event).__name__ for e in unlimited.entries] == ["NonPrivateDpEvent"]


def test_the_ledger_parameter_must_be_a_privacy_ledger():
    with pytest.raises(TypeError, match=r"ledger must be a fedpriv\.privacy\.PrivacyLedger"):
        _forest(ledger={"epsilon": 1.0}).fit(np.full((2, 3), np.nan), [0, 1])  # before the rows


def test_a_callers_public_size_decides_the_fit_and_no_count_is_released():
    """``fit(public_size=)``: the caller's bounds are the fit's public n (no count
    released, nothing read from the rows' count); a client over its bound is refused."""
    from fedpriv.server.fit_size import PublicSize

    from fedpriv.data import DataError

    ledger = _shared(1.0)
    est = _forest(ledger=ledger).fit(X, Y, public_size=PublicSize(n_records=500, max_records=200))
    assert est.context_.n_records == 500  # not 120 (the rows), not a released bound
    assert COUNT_LABEL not in [e.label for e in ledger.entries]
    # The twin: without it the same fit releases the count first.
    other = _shared(1.0)
    _forest(ledger=other).fit(X, Y)
    assert other.entries[0].label == COUNT_LABEL
    with pytest.raises(DataError, match="max-records = 10"):
        _forest().fit(X, Y, public_size=PublicSize(n_records=40, max_records=10))
