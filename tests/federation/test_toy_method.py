"""A learner added as a plugin runs in process, in the DP evaluation and under ``flwr run``.

``toy_method.py`` is a method none of fedpriv's modules names. Installed as a
distribution with an entry point in the group ``fedpriv.methods`` (here: a
``.dist-info`` folder on ``sys.path``, which is all ``importlib.metadata``
reads), every registry lookup of a process finds it: the in-process
estimator, the run-config parser, the Flower App's declared keys, the DP
evaluation's nodes, the model file, the launchers, the ServerApp and the
ClientApps. The Flower run must release the in-process model bit for bit
under one injected key.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.clients.evaluation import EvaluationClient
from fedpriv.server.flower_project import project_toml
from fedpriv.strategies.evaluation import LABEL, EvaluationConfig, EvaluationStrategy

import fedpriv.methods as registry
from fedpriv.artefact import load_model
from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.evaluation.dp import score_histogram
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.methods import ENTRY_POINT_GROUP, get_method, method_names, unregister_method
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.federation.toy_method"
NAME = "toy_base_rate"
#: The toy's own run-config key (no built-in method has it).
TOY_KEY = "prior-rate"


def write_plugin(site: Path, entry_points: dict[str, str], dist: str = "fedpriv_toy") -> Path:
    """An installed distribution ``dist`` with ``entry_points`` (name → target) in the
    group ``fedpriv.methods``: a ``.dist-info`` folder in ``site``, as pip leaves one."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


def install(mp: pytest.MonkeyPatch, site: Path) -> None:
    """Put ``site`` on ``sys.path`` and let the next registry lookup load plugins again
    (a process loads them once: this stands for a fresh process)."""
    mp.syspath_prepend(str(site))
    mp.setitem(registry._plugins, "state", "no")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy installed as a plugin for this module's tests (the registry is per process)."""
    site = write_plugin(tmp_path_factory.mktemp("site"), {NAME: f"{TOY}:register"})
    mp = pytest.MonkeyPatch()
    install(mp, site)
    try:
        yield importlib.import_module(TOY), site
    finally:
        unregister_method(NAME)
        mp.undo()


def test_the_entry_point_alone_registers_the_toy_and_its_keys_reach_the_flower_app(tmp_path):
    assert NAME not in method_names()
    assert TOY_KEY not in project_toml()
    mp = pytest.MonkeyPatch()
    try:
        install(mp, write_plugin(tmp_path, {NAME: f"{TOY}:register"}))
        assert NAME in method_names()  # the first lookup loaded the entry point
        assert registry._plugins["state"] == "done"
        toy = sys.modules[TOY]
        assert get_method(NAME) == toy.METHOD
        # The Flower App declares every key of every registered method: the toy's too.
        assert f'{TOY_KEY} = ""' in project_toml().splitlines()
    finally:
        unregister_method(NAME)
        mp.undo()
    assert NAME not in method_names()


def test_a_fresh_process_loads_the_installed_plugin_on_its_first_lookup(toy, tmp_path):
    """As a ServerApp or ClientApp process does: nothing but the distribution on its path."""
    _, site = toy
    code = (
        "from fedpriv.methods import get_method\n"
        "from fedpriv.server.flower_project import project_toml\n"
        f"print(get_method({NAME!r}).model, {TOY_KEY!r} in project_toml())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [f"{TOY}:BaseRateModel", "True"]


def test_the_registry_alone_makes_the_toy_a_full_method(toy):
    module, _ = toy
    m = get_method(NAME)
    assert m.config_fields == ("rounds", "sampling_rate", "prior_rate")
    ToyClassifier = m.estimator_class
    # Estimator parameters: the toy's settings, then the run's, defaults from one place.
    params = ToyClassifier().get_params()
    assert params["rounds"] == 2 and params["sampling_rate"] == 0.5
    assert params["epsilon"] == RunSettings.epsilon and params["delta"] == m.delta
    # Run config: the toy's keys parse; another method's do not apply.
    s = RunSettings.from_run_config(
        {"method": NAME, "rounds": 3, TOY_KEY: 0.25, "dataset": "heart", "num-clients": 4}
    )
    assert s.config == module.ToyConfig(rounds=3, prior_rate=0.25) and s.rounds == 3
    with pytest.raises(SettingError, match="'trees' does not apply to method 'toy_base_rate'"):
        RunSettings.from_run_config({"method": NAME, "trees": 3})


def test_the_toy_fits_in_process_and_its_model_passes_the_dp_evaluation(toy, tmp_path):
    """No Flower: the estimator's fit, its model file, and the DP evaluation round whose
    nodes rebuild the toy's model from the registry record alone."""
    ToyClassifier = get_method(NAME).estimator_class
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
    # Its model file: the toy's model class is allowed by its registration alone.
    again = ToyClassifier.load(clf.save(tmp_path / "toy.fedpriv.npz"))
    assert again.model_ == clf.model_
    # The DP evaluation of its released model on 300 held-out rows over 3 nodes.
    Xe, ye = rng.random((300, 3)), (rng.random(300) < 0.3).astype(int)
    nodes = make_clients(Xe, ye, np.array_split(np.arange(300), 3))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=0.5, delta=1e-6))
    strategy = EvaluationStrategy(
        EvaluationConfig(), model_method=NAME, model_arrays=clf.model_.to_arrays(), n_records=300
    )
    runtime = InProcessRuntime(
        clients=nodes, handler=EvaluationClient(), seed=0, secret_key=key_for(2)
    )
    runtime.run(strategy, ledger=ledger)
    result = strategy.result()
    assert result is not None and [e.label for e in ledger.entries] == [LABEL]
    exact_counts = score_histogram(clf.model_.predict_proba(Xe), ye, result.bins)
    assert exact_counts.sum() == 300
    # The release is the exact histogram plus noise of the evaluation's std.
    noise = np.asarray(result.histogram) - exact_counts
    assert np.all(np.abs(noise) < 8 * strategy.mechanism.std)


@pytest.mark.processes
def test_the_toy_runs_under_flwr_run_and_releases_the_in_process_model(toy, tmp_path, monkeypatch):
    """The suite's one real ``flwr run`` simulation (≈ 30 s, mostly Ray start-up).

    Besides the plugin (its distribution on the processes' ``PYTHONPATH``, found by
    its entry point), it checks what only launched processes show: the key
    reaches the ServerApp and every ClientApp through ``$FEDPRIV_SECRET_KEY`` (shared
    with the nodes on request: ``share_secret_key``),
    the pings run outside training, Flower's own round loop collects one
    MetricRecord per round, the exit code, and no process is left. Every built-in
    method's ServerApp and ClientApp are checked against their in-process fits over
    Flower's encoding in ``tests/server/test_flower_loopback.py``, and boosting over
    real processes in the deployment of ``tests/server/test_own_data_walkthrough.py``.
    """
    from fedpriv.server.simulate import simulate

    _, site = toy
    path = [str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
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
    ref = (
        get_method(NAME)
        .estimator_class(rounds=2, epsilon=2.0, seed=3, secret_key=key_for(7), max_records=bound)
        .fit(load_heart())
    )
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
