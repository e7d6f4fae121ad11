"""Unit-level privacy over Flower (the real ServerApp and ClientApp on a loopback grid):
each node bounds its units with its own key and samples them whole, exactly as the
in-process fit does (the same floats), and the run's privacy files name the unit."""

import numpy as np
import pandas as pd
import pytest

from fedpriv.artefact import load_model
from fedpriv.data import Schema, load_csv
from fedpriv.methods import get_method
from tests.keys import key_for
from tests.server.test_flower_loopback import KEY, _json, run_app

SCHEMA = """name = "ward"
client_column = "hosp"
unit_column = "pid"
max_records_per_unit = 2
unit_scope = "node"
[target]
column = "y"
positive = ["1"]
labels = ["0", "1"]
[[columns]]
name = "x"
type = "numeric"
bounds = [0, 1]
[[columns]]
name = "c"
type = "categorical"
categories = ["a", "b"]
"""


def _files(tmp_path):
    rng = np.random.default_rng(4)
    rows = []
    for p in range(240):
        for _ in range(1 + int(rng.integers(0, 5))):  # 1 to 5 records per patient
            x = float(rng.random())
            rows.append((f"p{p}", f"h{p % 3}", x, "ab"[p % 2], int(rng.random() < x)))
    frame = pd.DataFrame(rows, columns=["pid", "hosp", "x", "c", "y"])
    csv, schema = tmp_path / "ward.csv", tmp_path / "ward.toml"
    frame.sample(frac=1.0, random_state=0).to_csv(csv, index=False)
    schema.write_text(SCHEMA)
    return csv, schema


@pytest.mark.parametrize(
    ("method", "settings"),
    [
        ("logistic", {"rounds": 5, "sampling_rate": 0.3}),
        ("boosting", {"rounds": 3, "depth": 2, "sampling_rate": 0.5}),
    ],
)
def test_flower_nodes_bound_and_sample_units_as_the_in_process_fit(
    monkeypatch, tmp_path, method, settings
):
    csv, schema = _files(tmp_path)
    job = {"csv": str(csv), "schema": str(schema), "num-clients": 3, "method": method,
           "max-records": 500, "epsilon": 2.0, "seed": 7,
           **{k.replace("_", "-"): v for k, v in settings.items()}}  # fmt: skip
    out = run_app(monkeypatch, tmp_path / "run", job)
    ref = (
        get_method(method)
        .estimator_class(
            **settings, epsilon=2.0, seed=7, secret_key=key_for(KEY), max_records=500, num_clients=3
        )
        .fit(load_csv(csv, Schema.from_toml(schema)))
    )
    saved = load_model(out / "model.fedpriv.npz").model
    # Same units kept, same unit coins, same sums, same noise: the same floats.
    for name, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved.to_arrays()[name], value)
    privacy = _json(out, "privacy")
    assert privacy["unit"] == "pid, at most 2 records" == ref.privacy_report_.unit
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_)
