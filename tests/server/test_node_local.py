"""Node-local data: each node reads its own file; the ServerApp never opens a private row.

The ServerApp (``fedpriv.server.app.main``) runs over the loopback grid whose nodes are
the real ClientApp handlers, each given its own ``data-path`` (files exported
from the public Adult corpus with :mod:`fedpriv.data.export`). Reads are
watched at pandas and at the corpus loaders: a read made outside the ClientApp
(i.e. by the server) of anything but the public ``eval-path`` fails the test.
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fedpriv.server.deploy import node_files, supernode_command
from fedpriv.server.estimators import DPBoostingClassifier

import fedpriv.data.dataset as dataset_module
import fedpriv.data.node as node_module
from fedpriv.artefact import load_model
from fedpriv.data import load_csv, load_for_run
from fedpriv.data.draft import draft_schema
from fedpriv.data.export import export
from fedpriv.data.node import (
    DataSource,
    declared_max_records,
    files_dataset,
    read_file,
    record_bound,
    run_schema,
)
from fedpriv.data.schema import Schema
from fedpriv.evaluation import binary_metrics
from fedpriv.federation.settings import RunSettings, SettingError
from tests.keys import key_for
from tests.server.test_flower_loopback import KEY, run_app

ROWS = 60  # rows per hospital file: a few ms per round
JOB = {
    "method": "boosting",
    "dataset": "adult",
    "num-clients": 3,
    "rounds": 2,
    "depth": 3,
    "epsilon": 2.0,
    "seed": 7,
}
CLIENT_APP = str(Path(__file__).resolve().parents[2] / "clients" / "app.py")


@pytest.fixture(scope="module")
def hospitals(tmp_path_factory):
    """Three hospitals' files (each in its own directory) and the public test file."""
    root = tmp_path_factory.mktemp("adult")
    paths = export("adult", num_clients=3, out=root, rows_per_client=ROWS)
    own = []
    for i, p in enumerate(paths):
        (root / f"h{i}").mkdir()
        own.append(p.rename(root / f"h{i}" / "hospital.csv"))
    test = root / "test.csv"
    pd.read_csv(test, nrows=200, dtype=str, keep_default_na=False).to_csv(test, index=False)
    return own, test


def _by_client_app() -> bool:
    return any(f.filename == CLIENT_APP for f in inspect.stack(context=0))


@pytest.fixture
def server_reads(monkeypatch):
    """Every file read (pandas, the data cache) or corpus load made outside the ClientApp."""
    seen: list[str] = []

    def watch(fn, what):
        def wrapped(first, *args, **kwargs):
            if not _by_client_app():
                seen.append(f"{what}:{first}")
            return fn(first, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(pd, "read_csv", watch(pd.read_csv, "read"))
    monkeypatch.setattr(pd, "read_parquet", watch(pd.read_parquet, "read"))
    monkeypatch.setattr(dataset_module, "_load", watch(dataset_module._load, "cache"))
    monkeypatch.setattr(node_module, "load_for_run", watch(load_for_run, "corpus"))
    return seen


def _job(hospitals, **kw):
    _, test = hospitals
    return {**JOB, "max-records": ROWS, "eval-path": str(test), **kw}


def _nodes(files):
    return {i: {"data-path": str(p)} for i, p in enumerate(files)}


def test_the_server_reads_only_the_eval_file_and_releases_the_in_process_model(
    monkeypatch, tmp_path, hospitals, server_reads
):
    files, test = hospitals
    out = run_app(monkeypatch, tmp_path, _job(hospitals), node_config=_nodes(files))
    # The server process read the public evaluation file and nothing else.
    assert server_reads and all(r == f"read:{test}" for r in server_reads), server_reads
    saved = load_model(out / "model.fedpriv.npz").model.to_arrays()
    ref = DPBoostingClassifier(
        rounds=2, depth=3, epsilon=2.0, seed=7, secret_key=key_for(KEY), max_records=ROWS
    ).fit(files_dataset(files, run_schema("", "adult")))
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    metrics = json.loads((out / "metrics.json").read_text())
    X, y = read_file(test, run_schema("", "adult"))
    assert metrics["evaluated"] and metrics["eval_source"] == str(test)
    assert y.size == 200  # the public file's rows, scored by the server
    assert metrics["auc"] == pytest.approx(binary_metrics(y, ref.predict_proba(X)[:, 1])["auc"])
    config = json.loads((out / "config.json").read_text())
    assert config["max-records"] == ROWS and "data-path" not in config


def test_without_public_eval_data_metrics_say_not_evaluated(
    monkeypatch, tmp_path, hospitals, server_reads
):
    files, _ = hospitals
    job = _job(hospitals, **{"eval-path": "", "schema": str(_adult_toml(tmp_path))})
    out = run_app(monkeypatch, tmp_path, job, node_config=_nodes(files))
    assert server_reads == []  # not even a public file: nothing to score on
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["evaluated"] is False and "eval-path" in metrics["reason"]
    assert json.loads((out / "status.json").read_text())["status"] == "completed"


def _adult_toml(tmp_path) -> Path:
    # The bundled Adult schema as a user's TOML file: a run on "your own" schema.
    from importlib import resources

    text = resources.files("fedpriv.data").joinpath("schemas/adult.toml").read_text()
    path = tmp_path / "my-schema.toml"
    path.write_text(text)
    return path


def _bad_copy(src: Path, dst: Path) -> Path:
    frame = pd.read_csv(src, dtype=str, keep_default_na=False)
    frame.loc[2, "age"] = "forty"
    dst.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(dst, index=False)
    return dst


@pytest.mark.parametrize(
    ("fault", "code"), [("bad cell", "not_a_number"), ("bound", "too_many_records")]
)
def test_a_bad_node_file_fails_the_run_at_the_key_exchange_with_its_code(
    monkeypatch, tmp_path, hospitals, caplog, fault, code
):
    files, _ = hospitals
    files = list(files)
    job = _job(hospitals)
    if fault == "bad cell":
        files[1] = _bad_copy(files[1], tmp_path / "bad" / "hospital.csv")
    else:
        job["max-records"] = ROWS - 1  # every file holds ROWS rows
    with caplog.at_level(logging.INFO):
        with pytest.raises(Exception, match="key exchange"):
            run_app(monkeypatch, tmp_path, job, node_config=_nodes(files))
    status = json.loads((tmp_path / "4242" / "status.json").read_text())
    assert status["status"] == "failed"
    server = "\n".join(r.getMessage() for r in caplog.records if r.name != "fedpriv.clients.app")
    assert code in server and "forty" not in server
    assert not (tmp_path / "4242" / "model.fedpriv.npz").exists()  # failed before round 1


def test_the_declared_bound_is_public_and_required_for_your_own_files(tmp_path, hospitals):
    files, _ = hospitals
    bundled = DataSource(dataset="heart", num_clients=4)
    ds = load_for_run("heart", num_clients=4, split_seed=0)
    sizes = [p.size for p in ds.client_partition(4)]
    assert record_bound(bundled) == declared_max_records("heart", 4, 0) == max(sizes)
    own = DataSource(dataset="adult", schema="heart", num_clients=4)
    with pytest.raises(ValueError, match="max-records must be declared"):
        record_bound(own)
    with pytest.raises(SettingError, match="max-records"):
        RunSettings.from_run_config({"csv": str(files[0]), "schema": "adult"})
    with pytest.raises(SettingError, match="max-records"):
        RunSettings.from_run_config({"max-records": 0})
    with pytest.raises(SettingError, match="max-records"):
        node_files(files, {})
    with pytest.raises(SettingError, match="num-clients"):
        node_files(files, {"max-records": 5, "num-clients": 4})
    with pytest.raises(SettingError, match="schema must be set"):
        node_files(files, {"max-records": 5})  # not the default corpus's schema by accident
    assert node_files(files, {"max-records": 5, "schema": "heart"}) == [f.resolve() for f in files]
    draft = tmp_path / "draft.toml"  # the nodes would refuse it: no federation starts
    draft.write_text(draft_schema(files[0], target="income"))
    with pytest.raises(SettingError, match="still the draft placeholder"):
        node_files(files, {"max-records": 5, "schema": str(draft)})
    cmd = supernode_command(
        index=1,
        num_clients=3,
        superlink="x:1",
        host="h",
        port=2,
        ca_cert=None,
        auth_key=None,
        data_path="/d/a b.csv",
    )
    assert cmd[cmd.index("--node-config") + 1] == (
        'partition-id=1 num-partitions=3 data-path="/d/a b.csv"'
    )


def test_exported_files_read_back_as_the_corpus_partition(tmp_path):
    paths = export("heart", num_clients=4, out=tmp_path)
    ds = load_for_run("heart", num_clients=4, split_seed=0)
    X, y = ds.xy("train")
    sch = run_schema("", "heart")
    for p, rows in zip(paths, ds.client_partition(4), strict=True):
        Xf, yf = read_file(p, sch)
        np.testing.assert_array_equal(Xf, X[rows])
        np.testing.assert_array_equal(yf, y[rows])
    Xt, yt = read_file(tmp_path / "test.csv", sch)
    np.testing.assert_array_equal(Xt, ds.xy("test")[0])
    np.testing.assert_array_equal(yt, ds.xy("test")[1])


def test_a_simulation_on_one_csv_splits_it_by_its_client_column(monkeypatch, tmp_path, hospitals):
    files, _ = hospitals
    frames = [
        pd.read_csv(p, dtype=str, keep_default_na=False).assign(site=f"s{i}")
        for i, p in enumerate(files)
    ]
    csv = tmp_path / "all.csv"
    pd.concat(frames).to_csv(csv, index=False)
    schema = _adult_toml(tmp_path)
    schema.write_text(
        schema.read_text().replace('name = "adult"', 'name = "adult"\nclient_column = "site"', 1)
    )
    job = _job(hospitals, csv=str(csv), schema=str(schema))
    out = run_app(monkeypatch, tmp_path, job)
    assert json.loads((out / "status.json").read_text())["status"] == "completed"
    assert json.loads((out / "metrics.json").read_text())["evaluated"]
    # Without eval-path the run is scored on the file's held-out 20 %, the rows an
    # in-process fit on it scores (not "AUC n/a").
    out = run_app(monkeypatch, tmp_path / "own", {**job, "eval-path": ""})
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["evaluated"] and metrics["eval_source"].startswith(f"{csv} test split")
    X, y = load_csv(csv, Schema.from_toml(schema)).xy("test")
    model = load_model(out / "model.fedpriv.npz").model
    assert metrics["auc"] == pytest.approx(binary_metrics(y, model.predict_proba(X))["auc"])
