"""Inputs that used to pass silently or crash: each is a named error or a counted, logged outcome.

Encodings and malformed rows, values outside a categorical domain, schema
typos, undeclared and repeated columns, a file split at another delimiter.
Every file is a few dozen rows built in ``tmp_path``.
"""

import logging
import re

import pytest

from fedpriv.data import DataError, SchemaError, load_csv
from fedpriv.errors import public_error

# The example schema's file: 48 rows, both hospitals hold every (admission, smoker,
# label) cell 3 times.
from tests.data.test_csv_errors import GOOD as ROWS
from tests.data.test_csv_errors import HEADER
from tests.data.test_csv_errors import SCHEMA as EXAMPLE


def _schema(tmp_path, top: str = "", edit: tuple[str, str] | None = None):
    """The example schema with ``top`` prepended (top-level keys) and one text edit."""
    text = open(EXAMPLE).read()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    p = tmp_path / "schema.toml"
    p.write_text(top + text)
    return p


def _csv(tmp_path, body: str | bytes, name: str = "data.csv"):
    p = tmp_path / name
    p.write_bytes(body.encode() if isinstance(body, str) else body)
    return p


def _rows_with(line: int, row: str) -> str:
    """The good table with file line ``line`` (the header is line 1) replaced by ``row``."""
    rows = list(ROWS)
    rows[line - 2] = row
    return HEADER + "".join(rows)


# -- 1. encodings and malformed rows ---------------------------------------
#: Line 6 (row 4) with a latin-1 "é" in its record id (a dropped column: the fixed file loads).
LATIN1_LINE6 = (HEADER + "".join(ROWS[:4])).encode() + b"4\xe9" + ROWS[4][1:].encode()
BAD_FILES = {
    "utf16": (
        (HEADER + "".join(ROWS)).encode("utf-16"),
        r"line 1: the file is UTF-16 \(it starts with a byte-order mark\), not utf-8: save it "
        r'as UTF-8 .*encoding = "utf-16" in the schema',
        'encoding = "utf-16"\n',
    ),
    "latin1_byte": (
        LATIN1_LINE6 + "".join(ROWS[5:]).encode(),
        r"line 6: byte 0xe9 is not valid utf-8: save the file as UTF-8, or set the schema's "
        r"encoding",
        'encoding = "latin-1"\n',
    ),
    "extra_field": (
        _rows_with(5, "3,a,43,3,elective,no,no,surplus\n"),
        r"line 5: the row has 8 fields but the header has 7: a value containing ',' must be "
        r"quoted",
        None,
    ),
    # pandas would take the first column as an index and shift every value left.
    "extra_field_first_row": (
        _rows_with(2, "0,a,40,0,emergency,yes,yes,surplus\n"),
        r"line 2: the row has 8 fields but the header has 7",
        None,
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_undecodable_or_malformed_file_names_file_and_line(tmp_path, case):
    body, message, fix = BAD_FILES[case]
    path = _csv(tmp_path, body)
    with pytest.raises(DataError, match=re.escape(str(path)) + ": " + message) as err:
        load_csv(path, EXAMPLE, use_cache=False)
    # What may leave the node: the code only (no file, line or byte).
    code = "wrong_field_count" if case.startswith("extra_field") else "bad_encoding"
    assert str(public_error(err.value)) == f"DataError(code={code!r})"
    if fix is not None:  # the suggested schema key reads the file
        ds = load_csv(path, _schema(tmp_path, top=fix), use_cache=False)
        assert ds.X.shape == (len(ROWS), 8)


# -- 2. values outside a categorical domain ---------------------------------
def test_unseen_category_is_an_error_under_missing_error(tmp_path):
    schema = _schema(
        tmp_path,
        edit=('"elective", "transfer"]\n', '"elective", "transfer"]\nmissing = "error"\n'),
    )
    path = _csv(tmp_path, _rows_with(7, "5,b,45,5,walk-in,no,no\n"))
    with pytest.raises(
        DataError,
        match=r"data\.csv: column 'admission', line 7: value 'walk-in' is not in the declared "
        r"categories \['emergency', 'elective', 'transfer'\]",
    ) as err:
        load_csv(path, schema, use_cache=False)
    assert (
        str(public_error(err.value)) == "DataError(code='value_outside_domain', column='admission')"
    )


def test_unseen_category_is_counted_and_logged_at_every_load(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("FEDPRIV_CACHE_DIR", str(tmp_path / "cache"))
    rows = list(ROWS)
    rows[3] = rows[3].replace("emergency", "walk-in")
    rows[12] = rows[12].replace("elective", "Elective ")
    path = _csv(tmp_path, HEADER + "".join(rows))
    for _ in range(2):  # built, then from the cache: the user sees it both times
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fedpriv"):
            ds = load_csv(path, EXAMPLE)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warned == [
            f"{path}: column 'admission': 2 value(s) outside the declared categories were "
            "encoded as <missing>; add them to the schema's categories, or set "
            'missing = "error" to refuse them'
        ]
        assert "walk-in" not in warned[0]  # counts only, never a cell
        assert ds.report.unseen_counts() == {"admission": 2}
        assert "2 values outside declared domains, encoded as <missing> (admission 2)" in (
            ds.report.summary()
        )


# -- 3. schema typos ---------------------------------------------------------
TYPOS = {
    "top_level": (("client_column = ", "client_colum = "), "at the top level", "client_column"),
    "top_level_plural": (
        ("missing_tokens = ", "missing_token = "),
        "at the top level",
        "missing_tokens",
    ),
    "target": (
        ('positive = ["yes"]\nlabels', 'positve = ["yes"]\nlabels'),
        "in [target]",
        "positive",
    ),
    "column": (
        ('transform = "log1p"', 'transfrom = "log1p"'),
        "in column 'length_of_stay_days'",
        "transform",
    ),
}


@pytest.mark.parametrize("case", list(TYPOS))
def test_unknown_schema_key_is_refused_with_a_suggestion(tmp_path, case):
    (right, typo), where, suggestion = TYPOS[case]
    schema = _schema(tmp_path, edit=(right, typo))
    key = typo.split(" =")[0]
    with pytest.raises(
        SchemaError,
        match=rf"schema\.toml: schema 'example-hospitals': unknown key '{key}' "
        rf"{re.escape(where)}; did you mean '{suggestion}'\?",
    ):
        load_csv(_csv(tmp_path, HEADER + "".join(ROWS)), schema, use_cache=False)


# -- 4. undeclared and repeated columns --------------------------------------
def test_undeclared_columns_are_listed_and_logged(tmp_path, caplog):
    body = HEADER.replace("\n", ",notes,ward\n") + "".join(r.replace("\n", ",x,7\n") for r in ROWS)
    path = _csv(tmp_path, body)
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        ds = load_csv(path, EXAMPLE, use_cache=False)
    assert ds.report.undeclared == ["notes", "ward"]
    assert "ignored undeclared columns ['notes', 'ward']" in ds.report.summary()
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 2 column(s) not declared in the schema are ignored: ['notes', 'ward']; "
        "declare them, or list them in drop"
    ]


def test_repeated_header_is_an_error(tmp_path):
    path = _csv(tmp_path, HEADER.replace("record_id", "age") + "".join(ROWS))
    with pytest.raises(
        DataError, match=r"data\.csv: line 1: header 'age' appears more than once"
    ) as err:
        load_csv(path, EXAMPLE, use_cache=False)
    assert err.value.code == "duplicate_header"


# -- 5. delimiter mismatch ---------------------------------------------------
@pytest.mark.parametrize(("sep", "toml"), [(";", '";"'), ("\t", '"\\t"'), ("|", '"|"')])
def test_other_delimiter_in_header_suggests_the_sep_key(tmp_path, sep, toml):
    path = _csv(tmp_path, (HEADER + "".join(ROWS)).replace(",", sep))
    with pytest.raises(
        DataError,
        match=rf"column 'age': missing column\(s\) .* contains {re.escape(repr(sep))}: the file "
        rf"looks {re.escape(repr(sep))}-separated but is read with sep = ','; "
        rf"set sep = {re.escape(toml)} in the schema",
    ):
        load_csv(path, EXAMPLE, use_cache=False)
    ds = load_csv(path, _schema(tmp_path, top=f"sep = {toml}\n"), use_cache=False)
    assert ds.client_names == ("a", "b")
