"""``--track mlflow``: MLflow's own client reads a tracked run back with the run's ε, its
ε per round, its metrics, its settings and its model file with the privacy card."""

import json

import pytest
from fedpriv.server.cli import main
from fedpriv.server.report import gather
from fedpriv.server.tracking import log_run

from fedpriv.federation.settings import SettingError
from tests.server.test_report import ROUNDS, finished  # noqa: F401 - the fixture

mlflow = pytest.importorskip(
    "mlflow", reason="MLflow is not installed (pip install 'fedpriv[track]'): --track untested"
)
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A working folder whose ./mlruns is the embedded default store (one per module:
    MLflow builds its SQLite tables in ~10 s)."""
    return tmp_path_factory.mktemp("tracked")


def _client(store):
    return MlflowClient(f"sqlite:///{store / 'mlruns' / 'mlflow.db'}")


def _runs(client):
    exp = client.get_experiment_by_name("fedpriv")
    return client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


def test_an_in_process_run_is_read_back_by_mlflows_client(store, monkeypatch):
    monkeypatch.chdir(store)  # the default store: ./mlruns
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = store / "fit"
    argv = ["run", "--method", "dp_gam", "--dataset", "heart", "--set", "rounds=5",
            "--out", str(out), "--track", "mlflow"]  # fmt: skip
    assert main(argv) == 0
    privacy = json.loads((out / "privacy.json").read_text())
    client = _client(store)
    (run,) = [r for r in _runs(client) if r.data.tags["fedpriv.folder"] == str(out.resolve())]
    m = run.data.metrics
    assert m["epsilon"] == privacy["epsilon"] and m["epsilon_rdp"] == privacy["epsilon_rdp"]
    assert m["delta"] == privacy["delta"] and f"{m['auc']:.4f}" == privacy["run"]["auc"]
    assert m["brier"] == privacy["run"]["brier"]
    assert run.data.params["method"] == "dp_gam" and run.data.params["rounds"] == "5"
    assert run.data.tags["fedpriv.status"] == "completed" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "epsilon_spent")
    curve = gather(out).epsilon_curve
    assert [(h.step, h.value) for h in history] == [(r, e) for r, e in curve]
    names = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert names == {"model/model.fedpriv.npz", "model/privacy_card.json",
                     "model/privacy_card.md"}  # fmt: skip
    card = client.download_artifacts(run.info.run_id, "model/privacy_card.json", str(store))
    assert json.loads(open(card).read())["epsilon"] == privacy["epsilon"]


def test_a_flower_run_folder_is_read_back(store, finished):  # noqa: F811 - the fixture
    uri = f"sqlite:///{store / 'mlruns' / 'mlflow.db'}"
    rid = log_run(finished, uri=uri)
    client = _client(store)
    run = client.get_run(rid)
    metrics = json.loads((finished / "metrics.json").read_text())
    privacy = json.loads((finished / "privacy.json").read_text())
    m = run.data.metrics
    assert m["auc"] == metrics["auc"] and m["brier"] == metrics["brier"]
    assert m["epsilon"] == privacy["epsilon"] and m["rounds_released"] == ROUNDS
    steps = [h.step for h in client.get_metric_history(rid, "epsilon_spent")]
    assert steps == list(range(1, ROUNDS + 1))
    files = {a.path for a in client.list_artifacts(rid, "run")}
    assert {"run/config.json", "run/privacy.json", "run/progress.jsonl"} <= files


def test_an_unknown_tracker_is_a_setting_error():
    from fedpriv.server.tracking import require

    with pytest.raises(SettingError, match="--track must be one of"):
        require("wandb")


def test_run_flower_passes_track_to_the_launcher(monkeypatch, tmp_path):
    from fedpriv.server import simulate

    seen = []
    monkeypatch.setattr(simulate, "main", lambda argv: seen.append(argv) or 0)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    argv = ["run", "--flower", "--out", str(tmp_path), "--track", "mlflow", "--track-uri", uri]
    assert main(argv) == 0
    (launched,) = seen
    i = launched.index("--track")
    assert launched[i : i + 4] == ["--track", "mlflow", "--track-uri", uri]
