"""A schema's privacy unit: its keys validated, its column read beside the rows, never a feature."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from fedpriv.data import DataError, Schema, SchemaError, load_csv, load_csv_whole
from fedpriv.data.units import MAX_RECORDS_PER_UNIT

HEAD = (
    'name = "ward"\nclient_column = "hospital"\n'
    '[target]\ncolumn = "y"\npositive = ["1"]\nlabels = ["0", "1"]\n'
    '[[columns]]\nname = "age"\ntype = "numeric"\nbounds = [0, 100]\n'
)
UNITS = 'unit_column = "patient"\nmax_records_per_unit = 3\nunit_scope = "node"\n'


def _schema(tmp_path, top: str) -> Schema:
    path = tmp_path / "s.toml"
    path.write_text(top + HEAD)
    return Schema.from_toml(path)


def test_unit_keys_from_toml_name_the_unit_and_its_bound(tmp_path):
    s = _schema(tmp_path, UNITS)
    assert (s.unit_column, s.max_records_per_unit, s.unit_scope) == ("patient", 3, "node")
    assert s.unit_records == 3 and s.privacy_unit == "patient, at most 3 records"
    plain = _schema(tmp_path, "")
    assert plain.unit_records == 1 and plain.privacy_unit == "record"
    assert "patient" not in s.feature_names and s.n_features == plain.n_features
    assert s.digest() != plain.digest()  # the unit is part of the public schema


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ('unit_column = "patient"\n', r"max_records_per_unit is missing.*unit_column = 'patient'"),
        ("max_records_per_unit = 3\n", r"unit_column is missing"),
        (
            'unit_column = "patient"\nmax_records_per_unit = 3\n',
            r"unit_scope is missing",
        ),
        (
            UNITS.replace("= 3", "= 0"),
            rf"max_records_per_unit must be an integer in \[1, {MAX_RECORDS_PER_UNIT}\]; got 0",
        ),
        (UNITS.replace("= 3", '= "3"'), r"max_records_per_unit must be an integer .*got '3'"),
        (UNITS.replace("= 3", "= true"), r"max_records_per_unit must be an integer .*got True"),
        (UNITS.replace("= 3", "= 2.5"), r"max_records_per_unit must be an integer .*got 2\.5"),
        (
            UNITS.replace('"node"', '"consortium"'),
            r"unit_scope must be one of \['node'\].*got 'consortium'",
        ),
        (UNITS.replace('"patient"', '"age"'), r"unit_column = 'age' is a feature"),
        (UNITS.replace('"patient"', '"y"'), r"unit_column = 'y' is the target"),
        (UNITS.replace('"patient"', '"hospital"'), r"unit_column = 'hospital' is the client"),
        (UNITS.replace('"patient"', "7"), r"unit_column must be a string; got 7"),
        ('unit_colum = "patient"\n', r"unknown key 'unit_colum'.*did you mean 'unit_column'"),
    ],
)
def test_bad_unit_keys_are_refused_naming_key_value_and_range(tmp_path, top, message):
    with pytest.raises(SchemaError, match=message):
        _schema(tmp_path, top)


def test_the_dataclass_checks_the_same(tmp_path):
    s = _schema(tmp_path, UNITS)
    with pytest.raises(SchemaError, match=r"max_records_per_unit must be an integer in \[1"):
        dataclasses.replace(s, max_records_per_unit=MAX_RECORDS_PER_UNIT + 1)
    ok = dataclasses.replace(s, max_records_per_unit=1)
    assert ok.privacy_unit == "patient, at most 1 record"


def _csv(tmp_path, rows) -> str:
    path = tmp_path / "ward.csv"
    pd.DataFrame(rows, columns=["patient", "hospital", "age", "y"]).to_csv(path, index=False)
    return str(path)


def test_a_loaded_file_keeps_each_rows_unit_beside_its_features(tmp_path):
    s = _schema(tmp_path, UNITS)
    rows = [["p1", "a", 30, 1], ["p2", "a", 40, 0], ["p1", "a", 50, 0], ["007", "b", 60, 1],
            ["7", "b", 70, 0], ["p3", "b", 20, 1]]  # fmt: skip
    ds = load_csv_whole(_csv(tmp_path, rows), s, use_cache=False)
    assert ds.units.shape == ds.y.shape and not ds.units.flags.writeable
    by_age = dict(zip(np.rint(ds.X[:, 0] * 100).astype(int), ds.units, strict=True))
    assert by_age[30] == by_age[50]  # one patient, one code
    assert by_age[60] != by_age[70]  # ids are text: "007" and "7" are two units
    assert len(set(ds.units.tolist())) == 5
    assert ds.X.shape[1] == s.n_features  # the id is not a feature


def test_the_cache_keeps_the_units(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPRIV_CACHE_DIR", str(tmp_path / "cache"))
    s = _schema(tmp_path, UNITS)
    rows = [[f"p{i % 100}", "ab"[i % 2], i % 90, i // 2 % 2] for i in range(300)]
    path = _csv(tmp_path, rows)
    first = load_csv(path, s)
    again = load_csv(path, s)
    np.testing.assert_array_equal(first.units, again.units)


def test_a_missing_unit_id_or_column_is_refused_with_its_line(tmp_path):
    s = _schema(tmp_path, UNITS)
    rows = [["p1", "a", 30, 1], [None, "a", 40, 0], ["p2", "b", 50, 1], ["p3", "b", 50, 0]]
    with pytest.raises(DataError, match="unit id is missing") as err:
        load_csv(_csv(tmp_path, rows), s, use_cache=False)
    assert (err.value.code, err.value.column, err.value.line) == ("missing_unit_id", "patient", 3)
    pd.DataFrame({"hospital": ["a", "b"], "age": [1, 2], "y": [0, 1]}).to_csv(
        tmp_path / "no_id.csv", index=False
    )
    with pytest.raises(DataError) as err:
        load_csv(tmp_path / "no_id.csv", s, use_cache=False)
    assert (err.value.code, err.value.column) == ("missing_column", "patient")


def test_every_encounter_of_diabetes130_with_patients_as_units():
    from fedpriv.data import load_diabetes130, load_diabetes130_encounters
    from fedpriv.privacy.units import check_units_within_clients

    ds = load_diabetes130_encounters(n_clients=5, max_records_per_unit=4)
    assert ds.y.size == 99_343 and ds.units.max() + 1 == 69_990
    assert ds.schema.privacy_unit == "patient_nbr, at most 4 records"
    for part in ("train", "val", "test"):  # a patient sits at one client, in one part
        check_units_within_clients(ds.units[ds.rows(part)], ds.client_partition(5, part),
                                   column="patient_nbr")  # fmt: skip
    train, test = set(ds.units[ds.rows("train")]), set(ds.units[ds.rows("test")])
    assert not train & test and 0.19 < len(test) / 69_990 < 0.21
    plain = load_diabetes130_encounters(n_clients=5)  # every encounter a record
    assert plain.units is None and plain.schema.privacy_unit == "record"
    np.testing.assert_array_equal(plain.X, ds.X)
    np.testing.assert_array_equal(plain.split.test, ds.split.test)
    # Rows in encounter order: each patient's first row is the paper's row for them.
    first = ~pd.Series(ds.units).duplicated().to_numpy()
    assert first.sum() == 69_990 and load_diabetes130(n_clients=5).y.size == 69_973
    assert ds.y[first].mean() == pytest.approx(load_diabetes130(n_clients=5).y.mean(), abs=2e-3)


def test_a_file_with_units_is_split_by_unit(tmp_path):
    from fedpriv.data.split import unit_split

    s = _schema(tmp_path, UNITS)
    rng = np.random.default_rng(5)
    rows = [[f"p{i // 3}", "ab"[i // 3 % 2], int(rng.integers(0, 100)), int(rng.random() < 0.5)]
            for i in range(600)]  # fmt: skip
    ds = load_csv(_csv(tmp_path, rows), s, use_cache=False)
    parts = [set(ds.units[ds.rows(p)].tolist()) for p in ("train", "val", "test")]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert sum(map(len, parts)) == 200 and abs(len(parts[2]) - 40) <= 2  # 20 % of units
    units = np.repeat(np.arange(50), 2)
    split = unit_split(units, np.zeros(100, dtype=int), seed=1)
    assert split.rule.startswith("by unit") and split.test.size == 20
    np.testing.assert_array_equal(
        split.test, unit_split(units, np.zeros(100, dtype=int), seed=1).test
    )
