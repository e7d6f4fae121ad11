"""The ledger's journal: privacy.json rewritten at every release, so a crash leaves the truth."""

import json

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy

from fedpriv.data import iid
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import (
    GaussianMechanism,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
    event_from_dict,
)
from fedpriv.privacy.ledger import JOURNAL_DISCRETIZATION
from tests.keys import key_for, private_rng

GAUSS = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=3.0)


def _journal(path):
    return json.loads(path.read_text())


def test_every_release_is_on_disk_before_its_output_returns(tmp_path):
    path = tmp_path / "privacy.json"
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5), journal=path)
    assert _journal(path)["n_releases"] == 0 and _journal(path)["complete"] is False
    rng = private_rng(0)
    for k in range(1, 4):
        ledger.release(GAUSS, np.zeros(2), rng=rng, sampling_probability=0.2, label=f"r{k}")
        j = _journal(path)  # read back right after the release returned
        assert j["n_releases"] == k and [e["label"] for e in j["events"]][-1] == f"r{k}"
        assert j["complete"] is False
        # In progress: a coarser PLD grid, still an upper bound on the exact figure.
        assert j["pld_value_discretization"] == JOURNAL_DISCRETIZATION
        assert ledger.epsilon() <= j["epsilon"] <= ledger.epsilon() * 1.05
    assert sorted(p.name for p in tmp_path.iterdir()) == ["privacy.json"]  # no temp files
    final = ledger.close()
    assert _journal(path) == final and final["complete"] is True
    assert final["epsilon"] == ledger.epsilon()  # the final report, at the ledger's 1e-4
    assert final["pld_value_discretization"] == 1e-4


def test_a_refused_release_is_not_journalled_and_reservations_are():
    seen = []  # a callable journal gets every entry
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=4.0, delta=1e-5), journal=seen.append)
    ledger.reserve(GAUSS.dp_event, 1)
    assert seen[-1]["unused_reservations"][0]["count"] == 1
    ledger.release(GAUSS, np.zeros(2), rng=private_rng(1), label="fits")
    assert seen[-1]["n_releases"] == 1 and seen[-1]["unused_reservations"] == []
    writes = len(seen)
    with pytest.raises(PrivacyBudgetExceededError):
        for _ in range(50):
            ledger.release(GAUSS, np.zeros(2), rng=private_rng(1), label="more")
    assert 1 < len(ledger.entries) < 51
    assert seen[-1]["n_releases"] == len(ledger.entries)  # only what was released
    assert len(seen) == writes + len(ledger.entries) - 1  # one write per release, none refused


def test_a_run_crashing_in_round_3_leaves_a_journal_of_exactly_its_releases(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.random((300, 4))
    y = (X[:, 0] > 0.5).astype(float)
    clients = make_clients(X, y, iid(300, n_clients=3, rng=np.random.default_rng(1)))
    path = tmp_path / "privacy.json"
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5), journal=path)
    strategy = DPBoostingStrategy(BoostingConfig(rounds=6, depth=2, sampling_rate=0.2))
    update = strategy.update

    def crash_in_round_3(query, aggregate):
        if query.round == 2:
            raise RuntimeError("strategy bug in round 3")
        return update(query, aggregate)

    strategy.update = crash_in_round_3
    runtime = InProcessRuntime(
        clients=clients, handler=BoostingClient(), seed=0, secret_key=key_for(2)
    )
    with pytest.raises(RuntimeError, match="round 3"):
        runtime.run(strategy, ledger=ledger)
    j = _journal(path)
    assert j["complete"] is False
    assert j["n_releases"] == len(ledger.entries) == 2  # rounds 1 and 2, nothing after
    assert [event_from_dict(e["event"]) for e in j["events"]] == [e.event for e in ledger.entries]
    assert ledger.epsilon() <= j["epsilon"] <= 2.0
