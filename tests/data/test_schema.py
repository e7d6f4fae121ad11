"""Schemas: TOML format, validation with file/column in the message, stable digests."""

import pytest

from fedpriv.data import (
    CategoricalColumn,
    NumericColumn,
    Schema,
    SchemaError,
    Target,
    Transform,
    schema,
)
from fedpriv.data.schema import canonical

EXAMPLE = "experiments/schemas/example.toml"


def test_example_schema_parses():
    s = Schema.from_toml(EXAMPLE)
    assert s.client_column == "hospital"
    assert s.column_names == ("age", "length_of_stay_days", "admission", "smoker")
    assert s.n_features == len(s.feature_names) == 8
    assert s.columns[1].transform is Transform.LOG1P


@pytest.mark.parametrize("name", ["adult", "heart", "diabetes130", "brfss"])
def test_bundled_schemas_parse_with_expected_widths(name):
    widths = {"adult": 107, "heart": 15, "diabetes130": 117, "brfss": 21}
    assert schema(name).n_features == widths[name]


def test_bound_lo_not_below_hi_names_file_and_column(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\n[target]\ncolumn = "y"\npositive = ["1"]\nlabels = ["0", "1"]\n'
        '[[columns]]\nname = "age"\ntype = "numeric"\nbounds = [90, 17]\n'
    )
    with pytest.raises(SchemaError, match=r"bad\.toml: .*'age'.*lo < hi; got lo=90.*hi=17"):
        Schema.from_toml(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lo": 0, "hi": 0}, "lo < hi"),
        ({"lo": float("nan"), "hi": 1}, "finite"),
        ({"lo": -2, "hi": 1, "transform": Transform.LOG1P}, "log1p needs lo > -1"),
        ({"lo": -1, "hi": 1, "transform": Transform.SQRT}, "sqrt needs lo >= 0"),
    ],
)
def test_numeric_column_validation(kwargs, message):
    with pytest.raises(SchemaError, match=message):
        NumericColumn(name="c", **kwargs)


def test_categorical_and_target_validation():
    with pytest.raises(SchemaError, match="repeat"):
        CategoricalColumn(name="c", categories=("a", "a"))
    with pytest.raises(SchemaError, match="non-empty"):
        CategoricalColumn(name="c", categories=())
    with pytest.raises(SchemaError, match="proper subset"):
        Target(column="y", positive=("2",), labels=("0", "1"))
    with pytest.raises(SchemaError, match="type must be numeric"):
        Schema.from_dict(
            {
                "name": "x",
                "target": {"column": "y", "positive": ["1"], "labels": ["0", "1"]},
                "columns": [{"name": "a", "type": "text"}],
            }
        )


def test_a_target_without_positive_labels_is_multiclass_in_declared_order(tmp_path):
    binary = Target(column="y", positive=("b",), labels=("a", "b"))
    assert (binary.multiclass, binary.classes) == (False, (0, 1))
    target = Target(column="y", labels=("low", "mid", "high"))
    assert (target.multiclass, target.classes) == (True, (0, 1, 2))
    with pytest.raises(SchemaError, match="at least two distinct"):
        Target(column="y", labels=("a", "a"))
    schema = Schema.from_dict(
        {
            "name": "x",
            "target": {"column": "y", "labels": ["low", "mid", "high"]},
            "columns": [{"name": "a", "type": "numeric", "bounds": [0, 1]}],
        }
    )
    path = tmp_path / "x.csv"
    path.write_text("a,y\n0.5,high\n0.1,low\n0.2,mid\n0.3,high\n")
    from fedpriv.data import load_csv

    assert load_csv(path, schema).y.tolist() == [2, 0, 1, 2]


def test_digest_is_stable_and_sensitive():
    a = Schema.from_toml(EXAMPLE)
    b = Schema.from_toml(EXAMPLE)
    assert a.digest() == b.digest()
    changed = Schema.from_dict(
        {**_as_dict(a), "columns": [{"name": "age", "type": "numeric", "bounds": [18, 101]}]}
    )
    assert changed.digest() != a.digest()


def _as_dict(s):
    return {
        "name": s.name,
        "target": {"column": "readmitted", "positive": ["yes"], "labels": ["yes", "no"]},
    }


def test_canonical_cell_text():
    assert canonical("1.0") == canonical(1) == canonical(" 1 ") == "1"
    assert canonical("2.5") == "2.5"
    assert canonical(">30") == ">30"
