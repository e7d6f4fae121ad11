"""Bring-your-own CSV: each bad input names the file, the column and the line."""

import re

import numpy as np
import pytest

from fedpriv.data import DataError, SchemaError, load_csv

SCHEMA = "experiments/schemas/example.toml"
HEADER = "record_id,hospital,age,length_of_stay_days,admission,smoker,readmitted\n"
GOOD = [
    f"{i},{h},{40 + i % 30},{i % 9},{adm},{s},{y}\n"
    for i, (h, adm, s, y) in enumerate(
        [
            (h, a, s, y)
            for h in ("a", "b")
            for a in ("emergency", "elective")
            for s in ("yes", "no")
            for y in ("yes", "no")
        ]
        * 3
    )
]


def _write(tmp_path, body, name="data.csv"):
    p = tmp_path / name
    p.write_text(body)
    return p


def _load(path, **kw):
    return load_csv(path, SCHEMA, use_cache=False, **kw)


def test_good_file_loads_with_clients(tmp_path):
    ds = _load(_write(tmp_path, HEADER + "".join(GOOD)))
    assert ds.client_names == ("a", "b")
    parts = ds.natural_partition("train")
    assert sorted(np.concatenate(parts)) == list(range(ds.split.train.size))


def test_missing_column(tmp_path):
    p = _write(
        tmp_path,
        HEADER.replace(",smoker", "") + "".join(g.rsplit(",", 2)[0] + ",no\n" for g in GOOD),
    )
    with pytest.raises(DataError, match=rf"{re.escape(str(p))}: column 'smoker': missing column"):
        _load(p)


def test_non_numeric_value(tmp_path):
    rows = list(GOOD)
    rows[4] = rows[4].replace(",44,", ",forty-four,")
    p = _write(tmp_path, HEADER + "".join(rows))
    with pytest.raises(
        DataError, match=r"column 'age', line 6: value 'forty-four' is not a number"
    ):
        _load(p)


def test_label_outside_declared_set(tmp_path):
    rows = list(GOOD)
    rows[9] = rows[9].rsplit(",", 1)[0] + ",maybe\n"
    p = _write(tmp_path, HEADER + "".join(rows))
    with pytest.raises(
        DataError,
        match=r"column 'readmitted', line 11: label 'maybe' is outside the declared label",
    ):
        _load(p)


def test_empty_file(tmp_path):
    with pytest.raises(DataError, match=r"data\.csv: file is empty"):
        _load(_write(tmp_path, ""))
    with pytest.raises(DataError, match="header but no data rows"):
        _load(_write(tmp_path, HEADER, name="header_only.csv"))


def test_entirely_missing_column(tmp_path):
    rows = [",".join([*g.split(",")[:2], "?", *g.split(",")[3:]]) for g in GOOD]
    p = _write(tmp_path, HEADER + "".join(rows))
    with pytest.raises(DataError, match=r"column 'age': column is entirely missing"):
        _load(p)


def test_schema_with_lo_not_below_hi(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text(open(SCHEMA).read().replace("bounds = [18, 100]", "bounds = [100, 18]"))
    with pytest.raises(
        SchemaError,
        match=r"s\.toml: schema 'example-hospitals', column 'age': bounds must be finite ",
    ):
        load_csv(_write(tmp_path, HEADER + "".join(GOOD)), bad, use_cache=False)


def test_partition_with_zero_rows(tmp_path):
    # Client "c" has a single row: the split leaves it without training rows.
    rows = [*GOOD, "999,c,50,1,elective,no,no\n"]
    p = _write(tmp_path, HEADER + "".join(rows))
    with pytest.raises(DataError, match=r"column 'hospital': client\(s\) \['c'\] have zero rows"):
        _load(p)


def test_missing_file():
    with pytest.raises(DataError, match=r"nope\.csv: file not found"):
        _load("nope.csv")
