"""A node's rows under unit-level privacy: bounded with its own key, whole file or slice;
a simulation refuses a unit that two of its nodes would hold."""

import numpy as np
import pandas as pd
import pytest
from fedpriv.clients import node_data as client_rows

from fedpriv.data import DataError
from fedpriv.data.node import DATA_PATH, EVAL_DATA_PATH, DataSource, node_data, node_eval_data
from tests.keys import key_for

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
"""


def _files(tmp_path, *, span: bool = False):
    rng = np.random.default_rng(1)
    rows = [(f"p{p}", f"h{p % 2}", float(rng.random()), p % 2) for p in range(200)]
    rows += [("big", "h0", 0.01 * i, i % 2) for i in range(12)]  # one unit of 12 records
    if span:
        rows.append(("p3", "h0", 0.5, 1))  # p3 is h1's: now both hospitals hold it
    frame = pd.DataFrame(rows, columns=["pid", "hosp", "x", "y"])
    frame = frame.sample(frac=1.0, random_state=2)
    csv, schema = tmp_path / "ward.csv", tmp_path / "ward.toml"
    frame.to_csv(csv, index=False)
    schema.write_text(SCHEMA)
    return csv, schema, frame


def _source(csv, schema) -> DataSource:
    return DataSource(dataset="", schema=str(schema), csv=str(csv), num_clients=2,
                      max_records=1000)  # fmt: skip


def test_a_simulated_node_keeps_at_most_m_records_of_each_unit_drawn_from_its_key(tmp_path):
    csv, schema, _ = _files(tmp_path)
    source = _source(csv, schema)
    a = node_data({}, source, 0, key_for(1))
    assert a.units is not None and np.bincount(a.units).max() == 2
    again = node_data({}, source, 0, key_for(1))
    np.testing.assert_array_equal(a.X, again.X)  # one subset per key, every round
    other = [node_data({}, source, 0, key_for(k)).X for k in range(2, 8)]
    assert any(not np.array_equal(a.X, x) for x in other)  # the key draws it
    held_out = node_eval_data({}, source, 0, key_for(1))
    assert held_out.units is not None and np.bincount(held_out.units).max() <= 2


def test_a_node_on_its_own_file_bounds_its_units(tmp_path):
    _, schema, frame = _files(tmp_path)
    own = tmp_path / "mine.csv"
    frame[frame["hosp"] == "h0"].to_csv(own, index=False)
    source = DataSource(dataset="", schema=str(schema), max_records=1000)
    data = node_data({DATA_PATH: str(own)}, source, 0, key_for(1))
    assert data.n == 100 + 2  # p0, p2, … once each, and 2 of "big"'s 12 records
    held = node_eval_data({DATA_PATH: str(own), EVAL_DATA_PATH: str(own)}, source, 0, key_for(1))
    assert held.n == 102
    none = node_eval_data({DATA_PATH: str(own)}, source, 0, key_for(1))
    assert none.n == 0 and none.units is not None


def test_a_simulation_refuses_a_unit_two_nodes_would_hold(tmp_path):
    csv, schema, _ = _files(tmp_path, span=True)
    with pytest.raises(DataError, match="held by clients 0 and 1") as err:
        node_data({}, _source(csv, schema), 1, key_for(1))
    assert (err.value.code, err.value.column) == ("unit_spans_clients", "pid")


def test_the_clientapp_bounds_with_the_nodes_own_key(tmp_path):
    csv, schema, _ = _files(tmp_path)
    source = _source(csv, schema)
    client_rows._source_data.cache_clear()
    with_key = client_rows._source_data(source, "", 0, key_for(5))
    np.testing.assert_array_equal(with_key.X, node_data({}, source, 0, key_for(5)).X)
    before_the_key_exchange = client_rows._source_data(source, "", 0)  # fresh OS entropy
    assert np.bincount(before_the_key_exchange.units).max() == 2
