"""The DP federated evaluation inside a Flower run: budget split, one round, its report.

The real ServerApp and ClientApp over the loopback grid (``test_flower_loopback``'s
harness), so the evaluation's query, masks and release cross Flower's encoding.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fedpriv.server.dp_evaluation import NOISE_STREAM, budget_split
from fedpriv.server.launch import result_line
from fedpriv.strategies.evaluation import LABEL

from fedpriv.artefact import ARTEFACT_NAME, load_model
from fedpriv.data import DataError, load_heart
from fedpriv.data.export import export
from fedpriv.data.node import EVAL_DATA_PATH, DataSource, node_eval_rows
from fedpriv.evaluation import binary_metrics
from fedpriv.evaluation_dp import estimate_metrics, score_histogram
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.methods import get_method
from fedpriv.privacy import GaussianMechanism, PrivacyBudget
from tests.keys import key_for
from tests.server.test_flower_loopback import BOUND, KEY, run_app

JOB = {
    "dataset": "heart",
    "num-clients": 4,
    "method": "logistic",
    "rounds": 6,
    "sampling-rate": 0.1,
    "epsilon": 2.0,
    "eval-epsilon": 0.5,
    "seed": 5,
}


def _json(out, name):
    return json.loads((out / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        out = run_app(mp, tmp_path_factory.mktemp("dp-eval"), JOB)
    finally:
        mp.undo()
    return out


def test_the_budget_is_split_before_calibration_and_both_parts_fit_the_whole():
    s = RunSettings.from_run_config({"method": "logistic", "epsilon": 2.0, "eval-epsilon": 0.5})
    training, evaluation = budget_split(s)
    assert evaluation == PrivacyBudget(epsilon=0.5, delta=s.delta / 4)
    assert training == PrivacyBudget(epsilon=1.5, delta=s.delta * 3 / 4)
    assert training.delta + evaluation.delta == pytest.approx(s.delta, rel=1e-12)
    assert budget_split(RunSettings.from_run_config({"epsilon": 2.0}))[1] is None


@pytest.mark.parametrize(
    "config",
    [
        {"epsilon": 2.0, "eval-epsilon": 2.0},
        {"epsilon": 2.0, "eval-epsilon": -0.1},
        {"epsilon": float("inf"), "eval-epsilon": 0.5},
    ],
)
def test_an_evaluation_share_outside_zero_to_epsilon_is_refused(config):
    with pytest.raises(SettingError, match=r"eval-epsilon must lie in \[0, epsilon\)"):
        RunSettings.from_run_config(config)


def test_a_multiclass_corpus_takes_no_dp_evaluation():
    with pytest.raises(SettingError, match="scores two classes; dataset 'brfss3' has more"):
        RunSettings.from_run_config({"dataset": "brfss3", "eval-epsilon": 0.5})


def test_training_is_the_in_process_fit_at_the_rest_of_the_budget(evaluated):
    saved = load_model(evaluated / ARTEFACT_NAME).model
    training, _ = budget_split(RunSettings.from_run_config(JOB))
    ref = (
        get_method("logistic")
        .estimator_class(
            rounds=6,
            sampling_rate=0.1,
            epsilon=training.epsilon,
            delta=training.delta,
            seed=5,
            secret_key=key_for(KEY),
            max_records=BOUND,
        )
        .fit(load_heart())
    )
    np.testing.assert_array_equal(saved.params, ref.model_.params)


def test_one_round_releases_the_held_out_histograms_with_the_evaluations_own_noise(evaluated):
    dp = _json(evaluated, "metrics")["dp_federated"]
    assert dp["evaluated"] and dp["replies"] == dp["asked"] == 4
    model = load_model(evaluated / ARTEFACT_NAME).model
    # The nodes' held-out rows are heart's test split, four slices of it.
    ds = load_heart()
    X, y = ds.xy("test")
    source = DataSource(dataset="heart", num_clients=4)
    parts = [node_eval_rows({}, source, p) for p in range(4)]
    assert sum(p[1].size for p in parts) == y.size
    exact = sum(score_histogram(model.predict_proba(Xp), yp, dp["bins"]) for Xp, yp in parts)
    np.testing.assert_array_equal(exact, score_histogram(model.predict_proba(X), y, dp["bins"]))
    # Calibrated to the evaluation's share alone, with its own private stream (never a
    # replay of training's noise draws).
    mech = GaussianMechanism.for_budget(epsilon=0.5, delta=dp["delta"], l2_sensitivity=1.0)
    assert dp["noise_std"] == pytest.approx(mech.std, rel=1e-12)
    server = key_for(KEY).derive("server")
    own = mech.apply(exact, rng=server.generator(NOISE_STREAM))
    np.testing.assert_array_equal(dp["histogram"], own)
    replay = mech.apply(exact, rng=server.generator("noise"))
    assert not np.allclose(dp["histogram"], replay)
    # Its estimates cover the exact metrics the server computed on the same public rows.
    truth = binary_metrics(y, model.predict_proba(X))
    for name in ("auc", "brier"):
        assert abs(dp[name] - truth[name]) <= dp[f"{name}_error"], name
    # Anyone can recompute the estimates and their stated errors from the release.
    again = estimate_metrics(np.array(dp["histogram"]), std=dp["noise_std"], alpha=dp["alpha"])
    assert {k: dp[k] for k in again.as_dict()} == again.as_dict()


def test_the_report_accounts_both_parts_and_the_run_status_counts_training_only(evaluated):
    privacy = _json(evaluated, "privacy")
    labels = [e["label"] for e in privacy["events"]]
    assert labels.count(LABEL) == 1 and labels[-1] == LABEL and len(labels) == 7
    assert privacy["epsilon"] <= 2.0 and privacy["complete"]
    status = _json(evaluated, "status")
    assert status["status"] == "completed" and status["rounds_released"] == 6
    comm = _json(evaluated, "communication")
    assert comm["rounds"] == 7 and comm["dp_evaluation_rounds"] == 1
    card = load_model(evaluated / ARTEFACT_NAME).card
    assert LABEL in {e.label for e in card.events}


def test_a_node_reads_its_own_held_out_file_or_holds_none(tmp_path):
    source = DataSource(dataset="heart", num_clients=4)
    X0, y0 = node_eval_rows({"data-path": "train.csv"}, source, 0)
    assert X0.shape == (0, load_heart().X.shape[1]) and y0.size == 0  # adds zero counts
    export("heart", num_clients=4, out=tmp_path)  # hospital{i}.csv and test.csv
    roomy = DataSource(dataset="heart", num_clients=4, max_records=300)
    Xe, ye = node_eval_rows({EVAL_DATA_PATH: str(tmp_path / "test.csv")}, roomy, 0)
    X, y = load_heart().xy("test")
    np.testing.assert_allclose(Xe, X, atol=1e-9)
    np.testing.assert_array_equal(ye, y)
    tight = DataSource(dataset="heart", num_clients=4, max_records=10)
    with pytest.raises(DataError, match="max-records = 10"):
        node_eval_rows({EVAL_DATA_PATH: str(tmp_path / "test.csv")}, tight, 0)


def test_the_launchers_line_reports_the_dp_estimate_beside_the_public_one(evaluated):
    dp = _json(evaluated, "metrics")["dp_federated"]
    line = result_line(evaluated, "round trips {round_trips}")
    assert line.startswith("AUC ")
    assert f"DP AUC {dp['auc']:.4f} ± {dp['auc_error']:.4f} (ε 0.5)" in line
