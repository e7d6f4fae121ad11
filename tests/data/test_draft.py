"""`fedpriv schema draft`: a skeleton from the header and dtypes, no value of the data in it."""

import tomllib

import pytest

from fedpriv.data import DataError, SchemaError, load_csv
from fedpriv.data.draft import PLACEHOLDER, classify_columns, draft_schema

# Distinctive values, so that any of them leaking into the draft is visible.
HEADER = "record_id,hospital,age,stay,admission,smoker,readmitted\n"
ROWS = [
    f"{9000 + i},{h},{37.25 + i},{1713 + i % 7},{adm},{s},{y}\n"
    for i, (h, adm, s, y) in enumerate(
        [
            (h, a, s, y)
            for h in ("quokka", "wombat")
            for a in ("zeppelin", "hovercraft")
            for s in ("True", "False")
            for y in ("returned", "stayed")
        ]
        * 3
    )
]


def _csv(tmp_path):
    p = tmp_path / "hospitals.csv"
    p.write_text(HEADER + "".join(ROWS))
    return p


def _values(text):
    """Every string and number in a TOML document."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        else:
            out.append(v)

    walk(tomllib.loads(text))
    return out


def test_columns_classified_by_dtype(tmp_path):
    kinds = classify_columns(_csv(tmp_path))
    assert kinds == {
        "record_id": "numeric",
        "hospital": "categorical",
        "age": "numeric",
        "stay": "numeric",
        "admission": "categorical",
        "smoker": "binary",
        "readmitted": "categorical",
    }


def test_draft_holds_no_data_value(tmp_path):
    text = draft_schema(_csv(tmp_path), target="readmitted", client_column="hospital")
    cells = {c for row in ROWS for c in row.strip().split(",")}
    for cell in cells:
        assert cell not in text, cell  # no value, bound or level of the rows
    numbers = [v for v in _values(text) if isinstance(v, int | float) and not isinstance(v, bool)]
    assert numbers == []  # not even a rounded bound
    strings = {v for v in _values(text) if isinstance(v, str)}
    header = set(HEADER.strip().split(","))
    assert strings <= header | {PLACEHOLDER, "hospitals", "", "?", "numeric", "categorical",
                                "binary"}  # fmt: skip
    # target: positive, labels; 3 numeric: lo, hi; 1 categorical; 1 binary: positive, negative
    assert text.count(f'"{PLACEHOLDER}"') == 2 + 3 * 2 + 1 + 2


def test_loader_refuses_draft_until_filled(tmp_path):
    csv = _csv(tmp_path)
    schema = tmp_path / "draft.toml"
    schema.write_text(draft_schema(csv, target="readmitted", client_column="hospital"))
    with pytest.raises(SchemaError, match=r"still the draft placeholder 'FILL ME'.*never from"):
        load_csv(csv, schema, use_cache=False)
    # The error counts what is left as the draft command counts what it wrote.
    n = schema.read_text().count(f'"{PLACEHOLDER}"')
    with pytest.raises(SchemaError, match=rf"\({n} placeholders left\)"):
        load_csv(csv, schema, use_cache=False)
    # A person fills every placeholder from public knowledge (here: made up for the test).
    text = schema.read_text()
    for old, new in [
        ('positive = ["FILL ME"]\nlabels', 'positive = ["returned"]\nlabels'),
        ('labels = ["FILL ME"]', 'labels = ["returned", "stayed"]'),
        (
            'positive = ["FILL ME"]\nnegative = ["FILL ME"]',
            'positive = ["True"]\nnegative = ["False"]',
        ),
        ('categories = ["FILL ME"]', 'categories = ["zeppelin", "hovercraft", "canoe"]'),
        ('bounds = ["FILL ME", "FILL ME"]', "bounds = [0, 100000]"),
    ]:  # fmt: skip
        assert old in text, old
        text = text.replace(old, new)
    assert PLACEHOLDER not in text
    schema.write_text(text)
    ds = load_csv(csv, schema, use_cache=False)
    assert ds.client_names == ("quokka", "wombat")
    assert ds.schema.target.column == "readmitted"


TARGET_FILLED = 'positive = ["a"]\nlabels = ["a", "b"]'


def test_one_placeholder_left_is_named(tmp_path):
    csv = _csv(tmp_path)
    text = (
        draft_schema(csv, target="readmitted")
        .replace('positive = ["FILL ME"]\nlabels = ["FILL ME"]', TARGET_FILLED)
        .replace('bounds = ["FILL ME", "FILL ME"]', "bounds = [0, 1]", 2)
    )  # fmt: skip
    schema = tmp_path / "s.toml"
    schema.write_text(text)
    # record_id and age filled; the first one left is hospital's domain, 6 placeholders in all.
    left = r"column 'hospital': categories is still the draft placeholder .*\(6 placeholders left\)"
    with pytest.raises(SchemaError, match=left):
        load_csv(csv, schema, use_cache=False)


def test_unknown_target_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"--target 'outcome' is not a column of the file; .*"
                       r"its columns are \['record_id', 'hospital'") as err:  # fmt: skip
        draft_schema(_csv(tmp_path), target="outcome")
    assert (err.value.code, err.value.column) == ("unknown_column", "outcome")
