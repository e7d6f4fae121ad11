"""`flwr run` simulation of K hospitals: same model as in process, real exit codes, no daemons.

Each test starts a real Flower 1.42 SuperLink and simulation (≈ 30 s, mostly
Ray start-up) through ``server.simulate``. The equality tests inject one
secret key into the launched processes (``$FEDPRIV_SECRET_KEY``, which the
ServerApp and every ClientApp read) and into the in-process estimator, so
both draw the same noise, Poisson coins and tree assignment.
"""

import json

import numpy as np
import pytest

from fedpriv.data import load_heart
from fedpriv.models.networks import NetworkModel
from fedpriv.privacy.randomness import KEY_ENV
from server.estimators import (
    DPBoostingClassifier,
    DPRandomForestClassifier,
    DPSGDClassifier,
    LumberjackClassifier,
)
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
    saved = np.load(out / "model.npz")
    ref = DPBoostingClassifier(
        n_rounds=3, depth=3, epsilon=2.0, seed=5, secret_key=injected_key
    ).fit(load_heart())
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


def test_a_failed_run_exits_non_zero(tmp_path):
    code, _ = simulate(
        {**SMALL, "dataset": "no-such-dataset", "out-dir": str(tmp_path)}, timeout=600, quiet=True
    )
    assert code == 1


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_dpsgd_simulation_releases_the_in_process_parameters(tmp_path, model, injected_key):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": model,
        "rounds": 6,
        "sampling-rate": 0.1,
        "hidden": 4,
        "epsilon": 2.0,
        "seed": 5,
    }
    code, out = simulate({**job, "out-dir": str(tmp_path)}, timeout=600, quiet=True)
    assert code == 0
    saved = NetworkModel.from_arrays(dict(np.load(out / "model.npz")))
    ref = DPSGDClassifier(
        model=model,
        hidden=4,
        n_steps=6,
        sampling_rate=0.1,
        epsilon=2.0,
        seed=5,
        secret_key=injected_key,
    ).fit(load_heart())
    # Same samples, same fixed-point sums, same noise draws: the same floats.
    np.testing.assert_array_equal(saved.params, ref.model_.params)
    np.testing.assert_array_equal(saved.input_map.shift, ref.model_.input_map.shift)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 2.0
    assert privacy["n_releases"] == 6
    comm = json.loads((out / "communication.json").read_text())
    assert comm["floats_uploaded_per_client"] == [6 * saved.spec.n_params] * 4
    assert comm["round_trips"] == 2 + 2 * 6
    config = json.loads((out / "config.json").read_text())
    assert config["learning-rate"] == {"logistic": 2.0, "mlp": 3.0}[model]  # the paper's


def test_lumberjack_simulation_releases_the_in_process_forest(tmp_path, injected_key):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "lumberjack",
        "rounds": 3,  # stages of 7 and 1 levels, then the leaf round
        "depth": 8,
        "trees": 3,
        "epsilon": 4.0,
        "seed": 5,
    }
    code, out = simulate({**job, "out-dir": str(tmp_path)}, timeout=600, quiet=True)
    assert code == 0
    saved = np.load(out / "model.npz")
    ref = LumberjackClassifier(
        n_trees=3,
        max_depth=8,
        epsilon=4.0,
        seed=5,
        secure_aggregation=True,
        secret_key=injected_key,
    ).fit(load_heart())
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 4.0
    assert privacy["delta"] == 1e-6  # the paper's δ, the launcher's default for the method
    comm = json.loads((out / "communication.json").read_text())
    # key exchange (keys, key book) + a query and an unmask for two stages and the leaves
    assert comm["round_trips"] == 2 + 2 * 3


def test_random_forest_simulation_releases_the_in_process_forest(tmp_path, injected_key):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "random_forest",
        "depth": 4,
        "trees": 3,
        "forest-mode": "disjoint",
        "epsilon": 2.0,
        "seed": 5,
    }
    code, out = simulate({**job, "out-dir": str(tmp_path)}, timeout=600, quiet=True)
    assert code == 0
    saved = np.load(out / "model.npz")
    ref = DPRandomForestClassifier(
        n_trees=3,
        depth=4,
        epsilon=2.0,
        seed=5,
        mode="disjoint",
        secure_aggregation=True,
        secret_key=injected_key,
    ).fit(load_heart())
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
