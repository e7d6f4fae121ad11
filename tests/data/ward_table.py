"""The ward table of the bad-input tests: its public schema, its header and its rows."""

import zipfile
from pathlib import Path

from tests.data.unit_schema import BINARY_TARGET

SCHEMA = (
    """name = "ward"
missing_tokens = ["?", ""]

"""
    + BINARY_TARGET
    + """
[[columns]]
name = "age"
type = "numeric"
bounds = [18, 100]

[[columns]]
name = "unit"
type = "categorical"
categories = ["a", "b"]
"""
)
HEADER = "age,unit,y\n"


def _rows(n: int = 200, *, age=lambda i: 20 + i % 60, label=lambda i: i % 2) -> str:
    return "".join(f"{age(i)},{'ab'[i % 2]},{label(i)}\n" for i in range(n))


def _schema(tmp: Path, text: str = SCHEMA) -> Path:
    path = tmp / "ward.toml"
    path.write_text(text)
    return path


def _zip(tmp: Path) -> Path:
    path = tmp / "ward.csv"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ward.csv", HEADER + _rows())
    return path


def _folder(tmp: Path) -> Path:
    (tmp / "ward").mkdir()
    return tmp / "ward"
