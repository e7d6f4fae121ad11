"""Scoped ledgers: one fit's ledger inside a shared one; both budgets, one account."""

import copy

import numpy as np
import pytest
from dp_accounting import dp_event

from fedpriv.privacy import (
    GaussianMechanism,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
)
from tests.keys import private_rng

MECH = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=6.0)  # ε = 0.87 for 2, 1.27 for 4


def _shared(eps):
    return PrivacyLedger(budget=PrivacyBudget(epsilon=eps, delta=1e-5))


def _fit(shared, eps=1.0, releases=2):
    """One 'fit': a child with its own budget, a reservation, then the releases."""
    child = shared.scope(PrivacyBudget(epsilon=eps, delta=1e-5))
    child.reserve(MECH.dp_event, releases)
    for i in range(releases):
        child.release(MECH, np.zeros(2), rng=private_rng(i), label=f"r{i}")
    return child


def test_a_child_records_in_both_and_the_parent_accounts_every_fit():
    shared = _shared(10.0)
    first, second = _fit(shared), _fit(shared)
    assert len(first.entries) == len(second.entries) == 2
    assert [e.label for e in shared.entries] == ["r0", "r1", "r0", "r1"]
    # The parent composes all four releases: more than either fit, less than their sum.
    assert first.epsilon() < shared.epsilon() < first.epsilon() + second.epsilon()


def test_a_fit_past_the_shared_budget_raises_before_any_noise(monkeypatch):
    shared = _shared(1.0)
    first = _fit(shared)
    assert first.epsilon() <= 1.0
    entries = shared.entries

    def no_noise(self, value, *, rng):
        raise AssertionError("noise drawn")

    monkeypatch.setattr(GaussianMechanism, "apply", no_noise)
    with pytest.raises(PrivacyBudgetExceededError, match="charged to the shared ledger"):
        _fit(shared)  # within its own ε = 1, over the shared 1.0 together with the first
    assert shared.entries == entries
    # An unreserved release is refused the same way, before the mechanism runs.
    child = shared.scope(PrivacyBudget(epsilon=1.0, delta=1e-5))
    with pytest.raises(PrivacyBudgetExceededError):
        for i in range(3):
            child.release(MECH, np.zeros(2), rng=private_rng(i))
    assert shared.entries == entries


def test_cancelled_child_reservations_leave_the_parent():
    shared = _shared(3.0)
    child = shared.scope(PrivacyBudget(epsilon=1.0, delta=1e-5))
    child.reserve(MECH.dp_event, 2)
    assert shared.report().reserved == ((MECH.dp_event, 2),)
    child.cancel_reservations()
    assert shared.report().reserved == ()
    _fit(shared)  # the freed budget is usable again


def test_a_childs_caveat_voids_the_shared_account():
    shared = _shared(3.0)
    shared.scope(PrivacyBudget(epsilon=1.0, delta=1e-5)).mark_uncertified("debug key")
    assert not shared.report().certified


def test_a_ledger_copies_to_itself_and_a_non_private_spend_needs_an_infinite_budget():
    shared = _shared(3.0)
    assert copy.copy(shared) is shared
    assert copy.deepcopy({"ledger": shared})["ledger"] is shared
    with pytest.raises(PrivacyBudgetExceededError):
        shared.spend(dp_event.NonPrivateDpEvent())
    assert "releases=0" in repr(shared)
