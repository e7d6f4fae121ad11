"""Bad schemas, schema drafts and the data commands' refusals, one row per case: each ends
as ONE error naming the file or key, the value and what is allowed (the CLI: exit 2)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from fedpriv.data import DataError, SchemaError
from fedpriv.data.draft import draft_schema
from fedpriv.data.schema import Schema
from tests.data.ward_table import HEADER, SCHEMA, _folder, _rows, _schema, _zip

SCHEMA_CASES = {
    # 3. schema values of the wrong shape or type
    "missing-tokens-string": (
        ('missing_tokens = ["?", ""]', 'missing_tokens = "NA"'),
        r"schema 'ward': missing_tokens must be an array of strings; got the string 'NA' "
        r'\(write missing_tokens = \["NA"\]\)',
    ),
    "drop-string": (
        ('missing_tokens = ["?", ""]', 'missing_tokens = ["?"]\ndrop = "id"'),
        r"drop must be an array of strings; got the string 'id'",
    ),
    "categories-string": (
        ('categories = ["a", "b"]', 'categories = "ab"'),
        r"column 'unit': categories must be an array of strings; got the string 'ab'",
    ),
    "bound-quoted": (
        ("bounds = [18, 100]", 'bounds = ["18", 100]'),
        r"column 'age': bounds\[0\] \(lo\) must be a number \(an integer or a float, "
        r"unquoted\); got '18' \(str\)",
    ),
    "bound-bool": (
        ("bounds = [18, 100]", "bounds = [true, 100]"),
        r"column 'age': bounds\[0\] \(lo\) must be a number .*got True \(bool\)",
    ),
    "bound-hi-bool": (
        ("bounds = [18, 100]", "bounds = [18, false]"),
        r"bounds\[1\] \(hi\) must be a number .*got False \(bool\)",
    ),
    "lo-string": (
        ("bounds = [18, 100]", 'lo = "18"\nhi = 100'),
        r"column 'age': lo must be a number .*got '18' \(str\)",
    ),
    "bounds-string": (
        ("bounds = [18, 100]", 'bounds = "18-100"'),
        r"column 'age': bounds must be an array of two numbers \[lo, hi\] in raw units; "
        r"got '18-100'",
    ),
    "bounds-three": (
        ("bounds = [18, 100]", "bounds = [18, 60, 100]"),
        r"bounds must be an array of two numbers \[lo, hi\] .*got \[18, 60, 100\]",
    ),
    "bounds-and-lo": (
        ("bounds = [18, 100]", "bounds = [18, 100]\nlo = 0"),
        r"give bounds = \[lo, hi\] or lo and hi, not both",
    ),
    "level-is-missing-token": (
        ('categories = ["a", "b"]', 'categories = ["a", "b", ""]'),
        r"column 'unit': categories value '' is also a missing token \(missing_tokens = "
        r"\['\?', ''\]\)",
    ),
    "label-is-missing-token": (
        ('labels = ["0", "1"]', 'labels = ["0", "1", "?"]'),
        r"target 'y': labels value '\?' is also a missing token",
    ),
    "type-typo": (
        ('name = "age"\ntype = "numeric"', 'name = "age"\ntpye = "numeric"'),
        r"unknown key 'tpye' in column 'age'; did you mean 'type'\? allowed: \[",
    ),
    "type-missing": (
        ('name = "age"\ntype = "numeric"\n', 'name = "age"\n'),
        r"column 'age': type must be numeric\|categorical\|binary; the key type is missing",
    ),
    "key-of-another-type": (
        ("bounds = [18, 100]", "bounds = [18, 100]\ncategories = []"),
        r"unknown key 'categories' in column 'age'",
    ),
    "missing-mode-typo": (
        ("bounds = [18, 100]", 'bounds = [18, 100]\nmissing = "indicate"'),
        r"column 'age': missing must be one of \['error', 'category', 'indicator'\]; "
        r"got 'indicate'",
    ),
    "client-column-number": (
        ('name = "ward"', 'name = "ward"\nclient_column = 3'),
        r"client_column must be a string; got 3",
    ),
}


@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_a_bad_schema_is_one_error_naming_the_key_the_value_and_what_is_allowed(case, tmp_path):
    (old, new), message = SCHEMA_CASES[case]
    assert old in SCHEMA
    path = _schema(tmp_path, SCHEMA.replace(old, new, 1))
    with pytest.raises(SchemaError) as err:
        Schema.from_toml(path)
    text = str(err.value)
    assert text.startswith(f"{path}: "), text
    assert re.search(message, text), text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing.toml", r"schema file not found \(fedpriv schema draft writes one"),
        ("", r"is a directory, not a schema file"),
    ],
)
def test_a_schema_path_that_is_no_file_is_a_schema_error(where, message, tmp_path):
    with pytest.raises(SchemaError, match=message):
        Schema.from_toml(tmp_path / where)


DRAFT_CASES = {
    "semicolon-file": (
        "age;unit;y\n1,5;a;0\n2,5;b;1\n",
        {},
        "wrong_separator",
        r"line 1: the header has no ',' but 2 ';': this file looks ';'-separated: pass "
        r"--sep ';'",
    ),
    "tab-file": (
        "age\tunit\ty\n1\ta\t0\n",
        {},
        "wrong_separator",
        r"looks '\\t'-separated: pass --sep \$'\\t'",
    ),
    "comma-file-read-with-semicolon": (
        "age,unit,y\n1,a,0\n",
        {"sep": ";"},
        "wrong_separator",
        r"looks ','-separated: pass --sep ','",
    ),
    "unknown-target": (
        "age,unit,y\n1,a,0\n",
        {"target": "nope"},
        "unknown_column",
        r"column 'nope': --target 'nope' is not a column of the file; its columns are "
        r"\['age', 'unit', 'y'\]",
    ),
    "target-wrong-case": (
        "age,unit,y\n1,a,0\n",
        {"target": "Y"},
        "unknown_column",
        r"--target 'Y' is not a column of the file; did you mean 'y'\?",
    ),
    "unknown-client-column": (
        "age,unit,y\n1,a,0\n",
        {"client_column": "site"},
        "unknown_column",
        r"--client-column 'site' is not a column",
    ),
    "gzip-is-drafted": (gzip.compress(b"age,unit,y\n1,a,0\n"), {"target": "y"}, None, ""),
    "zip": (_zip, {}, "not_a_text_file", r"zip archive"),
    "folder": (_folder, {}, "is_a_directory", r"is a directory"),
    "empty": ("", {}, "empty_file", r"file is empty"),
    "unquoted-comma": (
        'age,unit,y\n1,a,0\n2,"b",1,9\n',
        {},
        "unparseable_file",
        r"cannot be split into ','-separated fields .*must be quoted",
    ),
}


@pytest.mark.parametrize("case", DRAFT_CASES)
def test_schema_draft_names_the_separator_the_format_and_the_columns(case, tmp_path):
    content, kwargs, code, message = DRAFT_CASES[case]
    if callable(content):
        path = content(tmp_path)
    else:
        path = tmp_path / "bank.csv"
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    if code is None:
        text = draft_schema(path, **kwargs)
        assert 'column = "y"' in text
        return
    with pytest.raises(DataError) as err:
        draft_schema(path, **kwargs)
    assert err.value.code == code
    assert re.search(message, str(err.value)), str(err.value)
    assert "\n" not in str(err.value)


def test_draft_with_the_separator_it_names_succeeds(tmp_path):
    path = tmp_path / "bank.csv"
    path.write_text("age;unit;y\n1,5;a;0\n2,5;b;1\n")
    with pytest.raises(DataError, match="pass --sep ';'"):
        draft_schema(path)
    text = draft_schema(path, sep=";", target="y")
    assert 'sep = ";"' in text and 'name = "unit"' in text


# -- through the CLI: each a DataError or SchemaError, exit 2, one message -------------


def _cli(argv, caplog):
    from fedpriv.server.cli import main

    caplog.clear()
    return main(argv), caplog.text


CLI_CASES = {
    "draft-semicolon": (
        lambda t: ["schema", "draft", str(_write(t / "b.csv", "a;b;y\n1;2;0\n"))],
        r"looks ';'-separated: pass --sep ';'",
    ),
    "draft-unknown-target": (
        lambda t: [
            "schema",
            "draft",
            str(_write(t / "b.csv", "a,b,y\n1,2,0\n")),
            "--target",
            "nope",
        ],
        r"--target 'nope' is not a column of the file; its columns are \['a', 'b', 'y'\]",
    ),
    "run-inf-cell": (
        lambda t: [
            "run",
            "--csv",
            str(_write(t / "w.csv", HEADER + _rows() + "inf,a,1\n")),
            "--schema",
            str(_schema(t)),
            "--set",
            "rounds=1",
        ],
        r"column 'age', line 202: value inf is not a finite number",
    ),
    "run-one-class": (
        lambda t: [
            "run",
            "--csv",
            str(_write(t / "w.csv", HEADER + _rows(label=lambda i: 0))),
            "--schema",
            str(_schema(t)),
            "--set",
            "rounds=1",
        ],
        r"the training rows hold one class only \(label 0",
    ),
    "run-folder-as-csv": (
        lambda t: ["run", "--csv", str(_folder(t)), "--schema", str(_schema(t))],
        r"is a directory, not a file",
    ),
    "run-schema-typo": (
        lambda t: [
            "run",
            "--csv",
            str(_write(t / "w.csv", HEADER + _rows())),
            "--schema",
            str(_schema(t, SCHEMA.replace("type =", "tpye =", 1))),
        ],
        r"unknown key 'tpye' in column 'age'; did you mean 'type'\?",
    ),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", CLI_CASES)
def test_the_cli_exits_2_with_the_message(case, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("FEDPRIV_CACHE_DIR", str(tmp_path / "cache"))
    argv, message = CLI_CASES[case]
    code, said = _cli(argv(tmp_path), caplog)
    assert code == 2, said
    assert re.search(message, said), said
    assert "Traceback" not in said
