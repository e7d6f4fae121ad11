"""Bad input files and schemas, one row per case: each ends as a correct load, a warning,
or ONE error naming the file or key, the value and what is allowed; none is silent and
none a traceback (the CLI maps these errors to exit 2)."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedpriv.data import DataError, load_csv
from fedpriv.data.encode import OUT_OF_BOUNDS_REFUSED
from fedpriv.data.node import files_dataset, read_encoded
from fedpriv.data.schema import Schema
from fedpriv.errors import public_error
from tests.data.ward_table import HEADER, SCHEMA, _folder, _rows, _schema, _zip


@dataclass(frozen=True)
class Case:
    """``write(tmp) -> path`` and what must come of loading it."""

    content: object  # str (text), bytes, or a callable(tmp_path) -> Path
    error: type[Exception] | None  # None: the load succeeds
    code: str | None
    message: str  # regex: of the error, or of a warning line when error is None
    schema: str = SCHEMA
    name: str = "ward.csv"

    def write(self, tmp: Path) -> Path:
        if callable(self.content):
            return self.content(tmp)
        path = tmp / self.name
        if isinstance(self.content, bytes):
            path.write_bytes(self.content)
        else:
            path.write_text(self.content)
        return path


_GZIP = gzip.compress((HEADER + _rows(2000)).encode())


LOAD_CASES = {
    # 1. infinities: refused like NaN, with the column and line
    "inf-cell": Case(
        HEADER + _rows() + "inf,a,1\n",
        DataError,
        "not_finite",
        r"ward\.csv: column 'age', line 202: value inf is not a finite number; the column's "
        r"bounds are \[18, 100\]",
    ),
    "minus-inf-cell": Case(
        HEADER + "-inf,a,1\n" + _rows(),
        DataError,
        "not_finite",
        r"column 'age', line 2: value -inf is not a finite number",
    ),
    "inf-as-declared-missing-token": Case(
        HEADER + _rows() + "inf,a,1\n",
        DataError,
        "missing_value",  # the schema says inf means missing; age allows none
        r"column 'age', line 202: value is missing",
        schema=SCHEMA.replace('missing_tokens = ["?", ""]', 'missing_tokens = ["?", "", "inf"]'),
    ),
    # 2. clipping: every count is a warning; a column (nearly) all outside is an error
    "one-value-clipped-warns": Case(
        HEADER + _rows() + "150,a,1\n",
        None,
        None,
        r"ward\.csv: column 'age': 1 of 201 values clipped to \[18, 100\] \(1 above\)",
    ),
    "low-and-high-clipped-warn": Case(
        HEADER + "5,a,0\n7,b,1\n" + _rows() + "150,a,1\n",
        None,
        None,
        r"column 'age': 3 of 203 values clipped to \[18, 100\] \(2 below, 1 above\)",
    ),
    "ages-in-months": Case(
        HEADER + _rows(age=lambda i: 12 * (20 + i % 60)),
        DataError,
        "values_out_of_bounds",
        r"column 'age': 200 of 200 values lie outside the bounds \[18, 100\].*check the unit",
    ),
    "99-percent-outside": Case(
        HEADER + _rows(age=lambda i: 5 if i < 198 else 50),
        DataError,
        "values_out_of_bounds",
        r"column 'age': 198 of 200 values lie outside the bounds \[18, 100\]",
    ),
    # 4. files that are not a CSV
    "folder-as-csv": Case(_folder, DataError, "is_a_directory", r"ward: is a directory"),
    "zip-named-csv": Case(
        _zip, DataError, "not_a_text_file", r"the file is a zip archive .*extract the CSV"
    ),
    "binary-file": Case(
        b"\x00\x01\x02\x03" * 100,
        DataError,
        "not_a_text_file",
        r"binary data \(NUL bytes\), not delimited text",
    ),
    "gzip-named-csv-reads": Case(gzip.compress((HEADER + _rows()).encode()), None, None, ""),
    "plain-text-named-gz-reads": Case(HEADER + _rows(), None, None, "", name="ward.csv.gz"),
    "truncated-gzip": Case(
        _GZIP[: len(_GZIP) // 2],  # the stream ends mid-data
        DataError,
        "unreadable_file",
        r"cannot be read",
    ),
    # 5. one class in the training rows
    "one-class-training-rows": Case(
        HEADER + _rows(label=lambda i: 0),
        DataError,
        "one_class",
        r"column 'y': the training rows hold one class only \(label 0: none of \['1'\]\): a "
        r"classifier needs both",
    ),
    "one-class-positive": Case(
        HEADER + _rows(label=lambda i: 1),
        DataError,
        "one_class",
        r"one class only \(label 1: one of \['1'\]\)",
    ),
}


@pytest.mark.parametrize("case", LOAD_CASES)
def test_a_bad_file_ends_in_one_error_or_a_shown_warning(case, tmp_path):
    c = LOAD_CASES[case]
    path = c.write(tmp_path)
    schema = tmp_path / "ward.toml"
    schema.write_text(c.schema)
    if c.error is not None:
        with pytest.raises(c.error) as err:
            load_csv(path, schema, use_cache=False)
        assert err.value.code == c.code
        assert re.search(c.message, str(err.value)), str(err.value)
        assert "\n" not in str(err.value)
        return
    ds = load_csv(path, schema, use_cache=False)
    assert ds.y.size > 0
    warnings = ds.report.warnings()
    if c.message:
        assert any(re.search(c.message, w) for w in warnings), warnings
    else:
        assert not warnings, warnings  # nothing clipped, nothing to say


def test_the_unit_check_starts_at_its_threshold_and_a_few_outliers_only_warn(tmp_path):
    # Twin of the out-of-bounds rows: just under the threshold the column loads (with a
    # warning); at it, the same file is refused. So the check has power both ways.
    schema = tmp_path / "ward.toml"
    schema.write_text(SCHEMA)
    n = 200
    below = int(OUT_OF_BOUNDS_REFUSED * n) - 1  # 197 of 200 outside: 98.5 %
    path = tmp_path / "ward.csv"
    path.write_text(HEADER + _rows(n, age=lambda i: 5 if i < below else 50))
    ds = load_csv(path, schema, use_cache=False)
    assert any(f"{below} of {n} values clipped" in w for w in ds.report.warnings())
    path.write_text(HEADER + _rows(n, age=lambda i: 5 if i < below + 1 else 50))
    with pytest.raises(DataError, match="198 of 200 values lie outside"):
        load_csv(path, schema, use_cache=False)


def test_clip_counts_stay_local_a_node_error_sends_code_and_column_only(tmp_path):
    schema = Schema.from_toml(_schema(tmp_path))
    path = tmp_path / "node.csv"
    path.write_text(HEADER + _rows(age=lambda i: 12 * (20 + i % 60)))
    with pytest.raises(DataError) as err:
        read_encoded(path, schema)
    sent = str(public_error(err.value))
    assert sent == "DataError(code='values_out_of_bounds', column='age')"
    assert "200" not in sent and "node.csv" not in sent


def test_a_node_may_hold_one_class_but_the_in_process_twin_may_not(tmp_path):
    # One hospital without positives is normal in a federation (nothing released
    # about it); the whole training set of one class is refused where it is held.
    schema = Schema.from_toml(_schema(tmp_path))
    zero, one = tmp_path / "zero.csv", tmp_path / "one.csv"
    zero.write_text(HEADER + _rows(label=lambda i: 0))
    one.write_text(HEADER + _rows(label=lambda i: 1))
    assert set(read_encoded(zero, schema).y) == {0}
    assert set(files_dataset([zero, one], schema).y) == {0, 1}
    with pytest.raises(DataError, match="one class only") as err:
        files_dataset([zero, zero], schema)
    assert err.value.code == "one_class"


def test_a_node_outside_the_files_clients_is_a_data_error_not_an_index_error(tmp_path):
    # A simulation on one CSV of 2 hospitals started with 5 nodes: the extra nodes say
    # how many the file holds (and a launcher can ask it first: csv_client_names).
    from fedpriv.data.node import DataSource, csv_client_names, node_rows

    text = SCHEMA.replace('name = "ward"', 'name = "ward"\nclient_column = "site"', 1)
    schema = _schema(tmp_path, text)
    csv = tmp_path / "two.csv"
    csv.write_text(
        "site,"
        + HEADER
        + "".join(f"{'ns'[i % 2]},{r}" for i, r in enumerate(_rows(400).splitlines(True)))
    )
    source = DataSource(dataset="ward", schema=str(schema), csv=str(csv), num_clients=5)
    assert csv_client_names(csv, Schema.from_toml(schema)) == ("n", "s")
    _, y = node_rows({}, source, 1)
    assert y.size > 0
    with pytest.raises(DataError, match=r"node partition-id 4 is outside the 2 clients .*run 2 "
                       r"nodes \(num-clients = 2\)") as err:  # fmt: skip
        node_rows({}, source, 4)
    assert err.value.code == "no_such_client"


def test_one_class_arrays_without_a_schema_name_the_code():
    import numpy as np

    from fedpriv.data import check_training_classes

    check_training_classes(np.array([0, 1, 1]))
    with pytest.raises(DataError, match=r"^column 'y': the training rows hold one class only "
                       r"\(label 1\): a classifier needs at least two$"):  # fmt: skip
        check_training_classes(np.ones(5, dtype=int))


def test_an_unknown_corpus_is_a_data_error_with_the_names():
    from fedpriv.data import client_counts, load_dataset

    for call in (client_counts, load_dataset):
        with pytest.raises(DataError, match=r"dataset must be one of \['adult', .*got 'adlt' "
                           r"\(did you mean 'adult'\?\)") as err:  # fmt: skip
            call("adlt")
        assert err.value.code == "unknown_dataset"
