"""A learner added through the registry alone runs in process and under ``flwr run``.

``toy_method.py`` registers a method none of fedpriv's modules names. The
in-process estimator, the run-config parser and the launchers, the ServerApp
and the ClientApps must all find it through the registry (a ``flwr run``
federation imports it from ``$FEDPRIV_PLUGINS``), and the Flower run must
release the in-process model bit for bit under one injected key.
"""

import importlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from fedpriv.artefact import load_model
from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.methods import (
    PLUGINS_ENV,
    get_method,
    method_names,
    register_method,
    unregister_method,
)
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.federation.toy_method"
NAME = "toy_base_rate"


@pytest.fixture(scope="module")
def toy():
    """The toy registered for this module's tests only (the registry is per process)."""
    module = importlib.import_module(TOY)
    register_method(module.METHOD, replace=True)
    yield module
    unregister_method(NAME)


def test_the_registry_alone_makes_the_toy_a_full_method(toy):
    assert NAME in method_names()
    m = get_method(NAME)
    assert m.config_fields == ("rounds", "sampling_rate")
    # Estimator parameters: the toy's settings, then the run's, defaults from one place.
    params = toy.ToyClassifier().get_params()
    assert params["rounds"] == 2 and params["sampling_rate"] == 0.5
    assert params["epsilon"] == RunSettings.epsilon and params["delta"] == m.delta
    # Run config: the toy's keys parse; another method's do not apply.
    s = RunSettings.from_run_config(
        {"method": NAME, "rounds": 3, "dataset": "heart", "num-clients": 4}
    )
    assert s.config == toy.ToyConfig(rounds=3) and s.rounds == 3
    with pytest.raises(SettingError, match="'trees' does not apply to method 'toy_base_rate'"):
        RunSettings.from_run_config({"method": NAME, "trees": 3})


def test_the_toy_fits_in_process_with_its_ledger(toy):
    ToyClassifier = toy.ToyClassifier
    rng = np.random.default_rng(0)
    X, y = rng.random((400, 3)), (rng.random(400) < 0.3).astype(int)
    clf = ToyClassifier(
        rounds=3, epsilon=1.0, num_clients=4, secret_key=key_for(1), max_records=100
    ).fit(X, y)
    assert clf.epsilon_spent_ <= 1.0
    assert len(clf.ledger_.report().entries) == 3
    assert abs(clf.model_.rate - 0.3) < 0.15  # σ ≈ 5 on sums of ≈ 200: the rate is close
    exact = ToyClassifier(rounds=3, epsilon=math.inf, num_clients=4).fit(X, y)
    assert exact.privacy_report_ is None


@pytest.mark.processes
def test_the_toy_runs_under_flwr_run_and_releases_the_in_process_model(toy, tmp_path, monkeypatch):
    """The suite's one real ``flwr run`` simulation (≈ 30 s, mostly Ray start-up).

    Besides the plugin, it checks what only launched processes show: the key
    reaches the ServerApp and every ClientApp through ``$FEDPRIV_SECRET_KEY`` (shared
    with the nodes on request: ``share_secret_key``),
    the pings run outside training, Flower's own round loop collects one
    MetricRecord per round, the exit code, and no process is left. Every built-in
    method's ServerApp and ClientApp are checked against their in-process fits over
    Flower's encoding in ``tests/server/test_flower_loopback.py``, and boosting over
    real processes in the deployment of ``tests/server/test_own_data_walkthrough.py``.
    """
    from fedpriv.server.simulate import simulate

    monkeypatch.setenv(PLUGINS_ENV, TOY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(KEY_ENV, key_hex(7))
    run = {
        "method": NAME,
        "dataset": "heart",
        "num-clients": 4,
        "rounds": 2,
        "epsilon": 2.0,
        "seed": 3,
        "ping-rounds": 2,
        "out-dir": str(tmp_path),
    }
    # The key reaches the simulation (server and virtual nodes) only when shared.
    code, out = simulate(run, timeout=600, quiet=True, share_secret_key=True)
    assert code == 0
    # The launcher's public bound for heart (its largest hospital), as the Flower run uses.
    bound = declared_max_records("heart", 4, 0)
    ref = toy.ToyClassifier(
        rounds=2, epsilon=2.0, seed=3, secret_key=key_for(7), max_records=bound
    ).fit(load_heart())
    saved = load_model(out / "model.fedpriv.npz")
    assert saved.method == NAME and saved.model.rate == ref.model_.rate
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 2.0
    assert json.loads((out / "config.json").read_text())["method"] == NAME
    comm = json.loads((out / "communication.json").read_text())
    assert comm["floats_uploaded_per_client"] == [2 * 2] * 4  # 2 rounds × reply length 2
    # Keys (with the plan), key book; query, consistency and unmask per round.
    assert comm["round_trips"] == 2 + 3 * 2
    assert comm["dropout_recoveries"] == 0
    assert comm["mean_empty_round_seconds"] > 0  # the pings ran, outside the training rounds
    rounds = json.loads((out / "rounds.json").read_text())
    assert sorted(rounds, key=int) == ["1", "2"]
    assert [rounds[r]["replies"] for r in ("1", "2")] == [4, 4]
    bounds = [rounds[r]["epsilon_upper_bound"] for r in ("1", "2")]
    assert bounds == sorted(bounds) and bounds[-1] >= privacy["epsilon"] - 1e-9
    assert json.loads((out / "status.json").read_text())["status"] == "completed"
