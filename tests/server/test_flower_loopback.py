"""The ServerApp and ClientApp of every method, in one process: same model as in process.

``fedpriv.server.app.main`` (the real ServerApp: run config, launcher defaults,
Flower's round loop, the files it writes) runs over a loopback grid whose
nodes are the real ClientApp handlers (``clients/app.py``, one ``Context``
per node), so a whole Flower run of a method takes about a second instead of
~30 s of Ray start-up. The launched processes' side (``flwr run``, SuperLink,
Ray, exit codes, no daemons) is tested once, bit for bit, in
``tests/federation/test_toy_method.py``; the key reaches both sides as there, through
``$FEDPRIV_SECRET_KEY``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fedpriv.server import app as server_app
from fedpriv.server.estimators import (
    DPLogisticClassifier,
    DPRandomForestClassifier,
    LumberjackClassifier,
)
from fedpriv.server.launch import default_config
from fedpriv.server.simulate import resolve_simulation
from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedpriv.artefact import load_model
from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.methods import get_method
from fedpriv.privacy.distributed import DERIVED_KEYS_CAVEAT
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex
from tests.server.loopback import RUN_ID, LoopbackGrid

KEY = 5  # test key injected into both runtimes
#: The launcher's default public bound for heart (its largest hospital), which both
#: runtimes then use for the codec and the public total n = 4 × the bound.
BOUND = declared_max_records("heart", 4, 0)


def run_app(monkeypatch, tmp_path, overrides: dict, *, tamper=None, node_config=None, forge=None):
    """``fedpriv.server.app.main`` as ``fedpriv.server.simulate`` configures it; returns the
    result folder."""
    monkeypatch.setattr(TaskIdentity, "_run_id", RUN_ID)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0, raising=False)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1, raising=False)
    monkeypatch.setenv(KEY_ENV, key_hex(KEY))
    overrides = {**overrides, "out-dir": str(tmp_path)}
    run = resolve_simulation(overrides)  # the launcher's preset: the main job's
    settings, resolved = run.settings, run.run_config
    config = {**default_config(), **resolved}  # as Flower fuses pyproject's keys and the run's
    grid = LoopbackGrid(
        config, settings.num_clients, tamper=tamper, node_config=node_config, forge=forge
    )
    context = Context(
        run_id=RUN_ID, node_id=0, node_config={}, state=RecordDict(), run_config=config
    )
    server_app.main(grid, context)
    return tmp_path / str(RUN_ID)


def _json(out, name):
    return json.loads((out / f"{name}.json").read_text())


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_dpsgd_app_releases_the_in_process_parameters(monkeypatch, tmp_path, model):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": model,
        "rounds": 6,
        "sampling-rate": 0.1,
        **({"hidden": 4} if model == "mlp" else {}),
        "epsilon": 2.0,
        "seed": 5,
    }
    out = run_app(monkeypatch, tmp_path, job)
    saved = load_model(out / "model.fedpriv.npz").model
    ref = (
        get_method(model)
        .estimator_class(
            **({"hidden": 4} if model == "mlp" else {}),
            rounds=6,
            sampling_rate=0.1,
            epsilon=2.0,
            seed=5,
            secret_key=key_for(KEY),
            max_records=BOUND,
        )
        .fit(load_heart())
    )
    # Same samples, same fixed-point sums, same noise draws: the same floats.
    np.testing.assert_array_equal(saved.params, ref.model_.params)
    np.testing.assert_array_equal(saved.input_map.shift, ref.model_.input_map.shift)
    privacy = _json(out, "privacy")
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 2.0
    assert privacy["n_releases"] == 6
    comm = _json(out, "communication")
    # Round 1 centres (d floats: a feature sum), then steps of P floats; the last
    # two rounds recalibrate the output bias (Σ(p − y), Σp: 2 floats each).
    spec = saved.spec
    expected = spec.n_features + 3 * spec.n_params + 2 * 2
    assert comm["floats_uploaded_per_client"] == [expected] * 4
    # Keys (with the plan), key book; query, consistency and unmask per round.
    assert comm["round_trips"] == 2 + 3 * 6
    # The automatic learning rate at the run's explicit q: the paper's × √(0.02 / q).
    paper = {"logistic": 2.0, "mlp": 3.0}[model]
    assert _json(out, "config")["learning-rate"] == pytest.approx(paper * (0.02 / 0.1) ** 0.5)
    rounds = _json(out, "rounds")
    assert sorted(rounds, key=int) == [str(r) for r in range(1, 7)]


def test_a_recalibration_that_shows_nothing_degrades_the_flower_run(monkeypatch, tmp_path):
    # 592 rows at ε 1: the linear map's sums show nothing above their noise, so its
    # slope sits at its floor. The Flower run says so in status.json, as the in-process
    # fit does (its twin at ε 4, informative and completed: tests/strategies).
    settings = {"hidden": 4, "rounds": 12, "sampling_rate": 0.2, "learning_rate": 3.0,
                "recalibration": "linear"}  # fmt: skip
    job = {"dataset": "heart", "num-clients": 4, "method": "mlp", "epsilon": 1.0, "seed": 5,
           **{k.replace("_", "-"): v for k, v in settings.items()}}  # fmt: skip
    out = run_app(monkeypatch, tmp_path, job)
    ref = (
        get_method("mlp")
        .estimator_class(
            **settings, epsilon=1.0, seed=5, secret_key=key_for(KEY), max_records=BOUND
        )
        .fit(load_heart())
    )
    saved = _json(out, "status")
    assert saved["status"] == str(ref.run_status_) == "degraded"
    assert saved["reason"] == ref.run_outcome_.reason
    assert saved["rounds_aborted"] == 0 and "slope is at its floor" in saved["reason"]


@pytest.mark.parametrize("launched", [True, False])
def test_the_automatic_schedule_is_what_every_part_of_the_run_sees(monkeypatch, tmp_path, launched):
    # Heart: n = 4 × the bound = 640 public records, so q = 500/640 and T = 20
    # (fedpriv.strategies.dpsgd_schedule). Launched, the run config carries them; as
    # `flwr run` on pyproject's "" defaults, the ServerApp resolves them itself.
    job = {"dataset": "heart", "num-clients": 4, "method": "logistic", "epsilon": 2.0, "seed": 5}
    if launched:
        out = run_app(monkeypatch, tmp_path, job)
    else:
        monkeypatch.setattr(TaskIdentity, "_run_id", RUN_ID)
        monkeypatch.setattr(TaskIdentity, "_node_id", 0, raising=False)
        monkeypatch.setattr(TaskIdentity, "_task_id", 1, raising=False)
        monkeypatch.setenv(KEY_ENV, key_hex(KEY))
        config = {**default_config(), **job, "out-dir": str(tmp_path)}
        assert config["rounds"] == config["sampling-rate"] == ""
        context = Context(
            run_id=RUN_ID, node_id=0, node_config={}, state=RecordDict(), run_config=config
        )
        server_app.main(LoopbackGrid(config, 4), context)
        out = tmp_path / str(RUN_ID)
    q, t = 500 / (4 * BOUND), 20
    written = _json(out, "config")
    assert (written["rounds"], written["sampling-rate"]) == (t, q)
    assert _json(out, "status")["rounds_planned"] == t
    assert sorted(_json(out, "rounds"), key=int) == [str(r) for r in range(1, t + 1)]
    assert _json(out, "privacy")["n_releases"] == t
    ref = DPLogisticClassifier(epsilon=2.0, seed=5, secret_key=key_for(KEY), max_records=BOUND).fit(
        load_heart()
    )
    assert (ref.config_.rounds, ref.config_.sampling_rate) == (t, q)
    saved = load_model(out / "model.fedpriv.npz").model
    np.testing.assert_array_equal(saved.params, ref.model_.params)  # the same run


def _lumberjack_on_heart(**settings):
    """The in-process fit a Lumberjack App run must equal (same key, bound and seed)."""
    return LumberjackClassifier(
        seed=5, secure_aggregation=True, secret_key=key_for(KEY), max_records=BOUND, **settings
    ).fit(load_heart())


def test_lumberjack_app_releases_the_in_process_forest(monkeypatch, tmp_path):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "lumberjack",
        "depth": 8,  # stages of 7 and 1 levels, then the leaf round: 3 rounds
        "trees": 3,
        "epsilon": 4.0,
        "seed": 5,
    }
    out = run_app(monkeypatch, tmp_path, job)
    saved = load_model(out / "model.fedpriv.npz").model.to_arrays()
    ref = _lumberjack_on_heart(trees=3, depth=8, epsilon=4.0)
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    privacy = _json(out, "privacy")
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 4.0
    assert privacy["delta"] == 1e-6  # the paper's δ, the launcher's default for the method
    # key exchange (keys, key book) + a query, a consistency exchange and an unmask for two
    # stages and the leaves
    assert _json(out, "communication")["round_trips"] == 2 + 3 * 3


def test_lumberjack_app_resolves_automatic_sizes_as_the_in_process_fit(monkeypatch, tmp_path):
    # trees and depth left automatic: the ServerApp resolves them from training's budget
    # and the public bound (4 × 160 records) before Flower counts the rounds, as the
    # estimator does; heart's bound at ε 2 affords one stage of 30 trees.
    job = {"dataset": "heart", "num-clients": 4, "method": "lumberjack", "epsilon": 2.0,
           "seed": 5}  # fmt: skip
    out = run_app(monkeypatch, tmp_path, job)
    ref = _lumberjack_on_heart(epsilon=2.0, num_clients=4)
    assert (ref.config_.trees, ref.config_.depth) == (30, 7)
    saved = load_model(out / "model.fedpriv.npz")
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved.model.to_arrays()[key], value, err_msg=key)
    assert (saved.settings["trees"], saved.settings["depth"]) == (30, 7)  # as run
    status = _json(out, "status")
    assert status["status"] == "completed" and status["rounds_planned"] == 2
    assert _json(out, "communication")["round_trips"] == 2 + 3 * 2  # one stage, the leaves


def test_random_forest_app_releases_the_in_process_forest(monkeypatch, tmp_path):
    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "random_forest",
        "depth": 4,
        "trees": 3,
        "mode": "disjoint",
        "epsilon": 2.0,
        "seed": 5,
    }
    out = run_app(monkeypatch, tmp_path, job)
    saved = load_model(out / "model.fedpriv.npz").model.to_arrays()
    ref = DPRandomForestClassifier(
        trees=3,
        depth=4,
        epsilon=2.0,
        seed=5,
        mode="disjoint",
        secure_aggregation=True,
        secret_key=key_for(KEY),
        max_records=BOUND,
    ).fit(load_heart())
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    assert _json(out, "privacy")["epsilon"] == pytest.approx(ref.epsilon_spent_)


@pytest.mark.parametrize("pairs", [{}, {"interactions": 1, "interaction_rounds": 4}])
def test_dp_gam_app_releases_the_in_process_model(monkeypatch, tmp_path, pairs):
    from fedpriv.server.estimators import DPGAMClassifier

    from fedpriv.artefact import ARTEFACT_NAME, load_model
    from fedpriv.models.gam import GAMModel

    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "dp_gam",
        "rounds": 12,
        "bins": 8,
        "epsilon": 2.0,
        "seed": 5,
        "column-order": "gain",  # the main job's order: after one pass, released gains pick
        **{k.replace("_", "-"): v for k, v in pairs.items()},
    }
    out = run_app(monkeypatch, tmp_path, job)
    saved = load_model(out / ARTEFACT_NAME).model  # the model file names GAMModel
    assert isinstance(saved, GAMModel)
    assert len(saved.pairs) == pairs.get("interactions", 0)  # the pair term is in the file
    ref = DPGAMClassifier(
        rounds=12,
        bins=8,
        epsilon=2.0,
        seed=5,
        column_order="gain",
        learning_rate=0.5,  # the main job's dp_gam settings (preset main-job)
        lam=10.0,
        secret_key=key_for(KEY),
        max_records=BOUND,
        **pairs,
    ).fit(load_heart())
    assert set(saved.to_arrays()) == set(ref.model_.to_arrays())
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved.to_arrays()[key], value, err_msg=key)
    privacy = _json(out, "privacy")
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 2.0
    assert privacy["n_releases"] == 12 + 1  # the rounds and the quantile sketch
    assert _json(out, "communication")["round_trips"] == 2 + 3 * 12


def test_bdpe_app_releases_the_in_process_ensemble(monkeypatch, tmp_path):
    from fedpriv.server.estimators import BDPEClassifier

    from fedpriv.models.bdpe_model import BDPEModel

    job = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "bdpe",
        "trees": 3,
        "depth": 3,
        "objective": "calibrated",
        "epsilon": 1.0,
        "seed": 5,
    }
    out = run_app(monkeypatch, tmp_path, job)
    saved = load_model(out / "model.fedpriv.npz").model
    assert isinstance(saved, BDPEModel)
    ref = BDPEClassifier(
        trees=3,
        depth=3,
        objective="calibrated",
        epsilon=1.0,
        seed=5,
        secret_key=key_for(KEY),
        max_records=BOUND,
    ).fit(load_heart())
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved.to_arrays()[key], value, err_msg=key)
    privacy = _json(out, "privacy")
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 1.0
    # a split event per level, a leaf release per tree, the calibration's counts
    assert privacy["n_releases"] == 3 * 3 + 3 + 1
    assert _json(out, "communication")["round_trips"] == 2 + 3 * (3 * 3 + 1)


@pytest.mark.parametrize("method", ["boosting", "logistic", "random_forest"])
def test_distributed_noise_app_releases_the_in_process_model(monkeypatch, tmp_path, method):
    """The nodes add the noise: each its share from its own key, inside secure aggregation.
    The same shares in process and over Flower: the same floats; the server's report
    records the survivors' noise (4 of 4, shares sized for 3) and says so."""
    settings = {
        "boosting": {"rounds": 4, "depth": 3},
        "logistic": {"rounds": 4, "sampling-rate": 0.2},
        "random_forest": {"trees": 3, "depth": 3},  # one round: every leaf's class counts
    }[method]
    job = {"dataset": "heart", "num-clients": 4, "method": method, "epsilon": 1.0, "seed": 5,
           "noise": "distributed", "tolerated-dropouts": 1, **settings}  # fmt: skip
    # Every node checks each share against its stage (DP-SGD: centring, steps,
    # recalibration) and admits every honest one. The run reproduces the in-process
    # one bit for bit only on the injected key, which each node must allow.
    nodes = {p: {"max-epsilon": 1.0, "allow-reproduction-key": True} for p in range(4)}
    out = run_app(monkeypatch, tmp_path, job, node_config=nodes)
    saved = load_model(out / "model.fedpriv.npz").model
    params = {k.replace("-", "_"): v for k, v in settings.items()}
    ref = (
        get_method(method)
        .estimator_class(
            **params,
            epsilon=1.0,
            seed=5,
            secret_key=key_for(KEY),
            max_records=BOUND,
            noise="distributed",
            tolerated_dropouts=1,
        )
        .fit(load_heart())
    )
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved.to_arrays()[key], value, err_msg=key)
    privacy = _json(out, "privacy")
    assert privacy["noise"] == "distributed" and privacy["tolerated_dropouts"] == 1
    # The server holds the key every node's derives from: it could recompute the shares.
    assert privacy["certified"] is False and DERIVED_KEYS_CAVEAT in privacy["caveat"]
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] < 1.0
    noise = [_multiplier(e["event"]) for e in privacy["events"]]
    assert len(noise) == (1 if method == "random_forest" else 4)
    z = ref.noise_multiplier_ * (4 / 3) ** 0.5  # every round: 4 survivors, shares for 3
    if method == "logistic":  # the steps' stage (centring, recalibration: their own)
        assert noise[1] == pytest.approx(z)
    else:  # one stage
        assert noise == pytest.approx([z] * len(noise))


def _multiplier(event: dict) -> float:
    while "event" in event:
        event = event["event"]
    return event["noise_multiplier"]
