"""`flwr run` simulation of K hospitals: same model as in process, real exit codes, no daemons.

The test starts a real Flower 1.42 SuperLink and simulation (≈ 30 s, mostly
Ray start-up) through ``server.simulate``: one run that must release the
in-process model bit for bit. A run that fails is not given a second ~30 s
simulation here: the launchers share ``follow`` and ``exit_code``
(``server.launch``), whose reading of a failed run's status is checked
against a real failed run on the deployment engine (``test_deploy.py``, a node
with bad local data: exit 1) and case by case in ``tests/federation/test_status.py``.
The test injects one secret key into the launched processes
(``$FEDPRIV_SECRET_KEY``, which the ServerApp and every ClientApp read) and
into the in-process estimator, so both draw the same noise and Poisson coins.
The other methods' ServerApp and ClientApp are checked against their
in-process fits in ``test_flower_loopback.py``, in one process.
"""

import json

import numpy as np
import pytest

from fedpriv.artefact import load_model
from fedpriv.data import load_heart
from fedpriv.privacy.randomness import KEY_ENV
from server.estimators import DPBoostingClassifier
from server.simulate import simulate
from tests.keys import key_for, key_hex

SMALL = {"dataset": "heart", "num-clients": 4, "rounds": 3, "depth": 3, "epsilon": 2.0, "seed": 5}
PINGS = 2  # empty rounds timed before training (the same-run Flower baseline)
KEY = 5  # test key injected into both runtimes


@pytest.fixture
def injected_key(monkeypatch):
    """The launched Flower processes inherit ``$FEDPRIV_SECRET_KEY`` = test key ``KEY``."""
    monkeypatch.setenv(KEY_ENV, key_hex(KEY))
    return key_for(KEY)


def test_simulation_releases_the_in_process_model(tmp_path, injected_key):
    code, out = simulate(
        {**SMALL, "out-dir": str(tmp_path), "ping-rounds": PINGS}, timeout=600, quiet=True
    )
    assert code == 0
    saved = load_model(out / "model.fedpriv.npz").model.to_arrays()
    ref = DPBoostingClassifier(rounds=3, depth=3, epsilon=2.0, seed=5, secret_key=injected_key).fit(
        load_heart()
    )
    np.testing.assert_array_equal(saved["feature"], [t.feature for t in ref.model_.trees])
    np.testing.assert_array_equal(saved["threshold"], [t.threshold for t in ref.model_.trees])
    # Fixed-point sums are exact integers in both runtimes: leaf values agree bit for bit.
    np.testing.assert_array_equal(saved["leaf_values"], np.array(ref.model_.leaf_values))
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_)
    assert privacy["epsilon"] <= 2.0
    comm = json.loads((out / "communication.json").read_text())
    assert comm["floats_uploaded_per_client"] == [3 * 16] * 4
    # Key exchange (keys + pinned key book), then per round the query and the unmask.
    assert comm["round_trips"] == 2 + 2 * 3
    assert comm["dropout_recoveries"] == 0
    assert comm["mean_empty_round_seconds"] > 0  # the pings ran, outside the training rounds
    assert set(json.loads((out / "metrics.json").read_text())) >= {"auc", "auprc", "brier"}
    # The ServerApp ran the method as a Flower Strategy: Flower's own round loop
    # (Strategy.start) collected one MetricRecord per round.
    rounds = json.loads((out / "rounds.json").read_text())
    assert sorted(rounds, key=int) == ["1", "2", "3"]
    assert [rounds[r]["replies"] for r in ("1", "2", "3")] == [4, 4, 4]
    bounds = [rounds[r]["epsilon_upper_bound"] for r in ("1", "2", "3")]
    assert bounds == sorted(bounds) and bounds[-1] >= privacy["epsilon"] - 1e-9
