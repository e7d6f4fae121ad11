"""Reading delimited files into raw frames with file line numbers kept.

Numeric columns are parsed as floats on the fast path; if any cell fails to
parse, the file is re-read as text so that encoding can name the exact column
and line of the bad value. Decoding and tokenising errors (a byte the
schema's ``encoding`` cannot decode, a row with an extra field), a repeated
header and a header split at the wrong delimiter are :class:`DataError`
errors naming the file and the line, with the fix.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpriv.data.errors import DataError
from fedpriv.data.schema import BinaryColumn, CategoricalColumn, NumericColumn, Schema


def _numeric_like(values: tuple[str, ...]) -> bool:
    try:
        [float(v) for v in values]
    except ValueError:
        return False
    return True


def _float_columns(schema: Schema) -> list[str]:
    # Columns whose every declared value is a number parse faster as floats.
    out = []
    for c in schema.columns:
        if isinstance(c, NumericColumn):
            out.append(c.name)
        elif isinstance(c, BinaryColumn) and _numeric_like(c.positive + c.negative):
            out.append(c.name)
        elif isinstance(c, CategoricalColumn) and _numeric_like(c.categories):
            out.append(c.name)
    if _numeric_like(schema.target.labels):
        out.append(schema.target.column)
    return out


def read_table(
    path: str | Path,
    schema: Schema,
    *,
    names: list[str] | None = None,
    skiprows: int = 0,
    sep: str | None = None,
    skipinitialspace: bool = False,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Read ``path`` (plain or .gz) into raw cells plus each row's file line number.

    Missing tokens from the schema become NaN; nothing else is interpreted.
    The file is decoded with the schema's ``encoding`` and split at its
    ``sep`` (``sep`` here overrides it).

    Raises
    ------
    DataError
        Naming the file and, where there is one, the line: a byte the
        encoding cannot decode (``bad_encoding``), a row with more fields
        than the header (``wrong_field_count``), a header repeated
        (``duplicate_header``), a header that looks split at another
        delimiter (``missing_column``), an empty file.
    """
    path = Path(path)
    source = str(path)
    sep = schema.sep if sep is None else sep
    compression = check_text_file(path, encoding=schema.encoding)
    opts = {
        "compression": compression,
        "sep": sep,
        "header": None if names is not None else 0,
        "names": names,
        "skiprows": skiprows,
        "skipinitialspace": skipinitialspace,
        "keep_default_na": False,
        "na_values": list(schema.missing_tokens),
        "encoding": schema.encoding,
    }
    if names is None:
        _check_header(_raw_header(path, opts), schema, source, sep, line=1 + skiprows)
    head = _read(path, opts, nrows=0)
    floats = {c: "float64" for c in _float_columns(schema) if c in head.columns}
    text = {c: str for c in head.columns if c not in floats}
    try:
        frame = _read(path, opts, dtype={**floats, **text})
    except DataError:
        raise
    except ValueError:
        # Some "numeric" cell is not a number: read as text; encoding reports it.
        frame = _read(path, opts, dtype=str)
    if len(frame) == 0:
        raise DataError("file has a header but no data rows", code="no_data_rows", source=source)
    first = 1 + skiprows + (names is None)
    return frame, np.arange(len(frame)) + first


#: Delimiters a header split at the wrong one commonly still contains.
COMMON_SEPS = (",", ";", "\t", "|")
#: Leading bytes of formats that are not delimited text (and what to do instead).
_NOT_TEXT = (
    (b"PK\x03\x04", "a zip archive (or an Excel .xlsx workbook)", "extract the CSV from it, or "
     "save the sheet as CSV UTF-8"),
    (b"\xd0\xcf\x11\xe0", "an Excel .xls workbook", "save the sheet as CSV UTF-8"),
    (b"PAR1", "a Parquet file", "give a node a .parquet file by that suffix, or write a CSV"),
    (b"%PDF", "a PDF document", "export the table as a CSV"),
    (b"SQLite format 3", "an SQLite database", "export the table as a CSV"),
)  # fmt: skip
#: Compressed formats pandas reads by suffix (.bz2, .xz, .zst): left to its inference.
_INFERRED = (b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")
_WIDE_TEXT = ("utf-16", "utf-32")  # encodings whose text holds NUL bytes


def check_file(path: Path, *, kind: str) -> None:
    """Refuse a ``path`` that is a folder (``is_a_directory``) or not there
    (``file_not_found``); ``kind`` names the file the folder should hold."""
    if path.is_dir():
        raise DataError(
            f"is a directory, not a file: give the path of the {kind} file inside it",
            code="is_a_directory",
            source=str(path),
        )
    if not path.is_file():
        raise DataError("file not found", code="file_not_found", source=str(path))


def check_text_file(path: Path, *, encoding: str = "utf-8") -> str | None:
    """Refuse what cannot be a delimited text file; return the compression to read it with.

    By the file's leading bytes, not its name: gzip content is read as gzip whatever
    its suffix (``"gzip"``), another compressor's by pandas' suffix inference
    (``"infer"``), anything else as plain text (``None``, even if named ``.gz``).

    Raises
    ------
    DataError
        ``file_not_found``; ``is_a_directory``; ``not_a_text_file`` (a zip or Excel
        workbook, Parquet, PDF, or other binary content), naming what it looks like.
    """
    source = str(path)
    check_file(path, kind="CSV")
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(_INFERRED):
        return "infer"
    for magic, what, fix in _NOT_TEXT:
        if head.startswith(magic):
            raise DataError(
                f"the file is {what}, not delimited text: {fix}",
                code="not_a_text_file",
                source=source,
            )
    wide = codecs.lookup(encoding).name.startswith(_WIDE_TEXT) or head[:2] in _BOMS
    if b"\x00" in head and not wide:
        raise DataError(
            "the file holds binary data (NUL bytes), not delimited text: give the CSV file "
            "itself (decompressed, exported as CSV UTF-8)",
            code="not_a_text_file",
            source=source,
        )
    return None


_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")
_BOMS = {b"\xff\xfe": "utf-16", b"\xfe\xff": "utf-16"}


def _read(path: Path, opts: dict[str, Any], **kw: Any) -> pd.DataFrame:
    """``pandas.read_csv`` whose decoding and tokenising errors name the file and line."""
    source = str(path)
    try:
        return pd.read_csv(path, **{**opts, **kw})
    except pd.errors.EmptyDataError as exc:
        raise DataError("file is empty", code="empty_file", source=source) from exc
    except UnicodeDecodeError as exc:
        raise decode_error(path, opts["encoding"], opts.get("compression")) from exc
    except (OSError, EOFError) as exc:  # e.g. a truncated gzip stream
        raise DataError(f"cannot be read: {exc}", code="unreadable_file", source=source) from exc
    except pd.errors.ParserError as exc:
        m = _FIELDS.search(str(exc))
        if m is None:
            raise DataError(
                f"cannot be split into {opts['sep']!r}-separated fields ({one_line(exc)}); "
                "check the schema's sep and the quoting",
                code="unparseable_file",
                source=source,
            ) from exc
        expected, line, saw = (int(g) for g in m.groups())
        raise DataError(
            f"the row has {saw} fields but the header has {expected}: a value containing "
            f'{opts["sep"]!r} must be quoted ("..."), or remove the stray separator',
            code="wrong_field_count",
            source=source,
            line=line,
        ) from exc


def one_line(exc: BaseException) -> str:
    """``exc``'s text on one line (pandas' parser messages end in a line break)."""
    return " ".join(str(exc).split())


def decode_error(path: Path, encoding: str, compression: str | None = None) -> DataError:
    """Where the first undecodable byte is (its line), and how to fix the file or schema."""
    gz = compression == "gzip" or (compression == "infer" and path.suffix == ".gz")
    opener = gzip.open if gz else open
    with opener(path, "rb") as fh:
        bom = fh.read(2)
    guess = _BOMS.get(bom)
    if guess is not None and codecs.lookup(encoding).name != codecs.lookup(guess).name:
        return DataError(
            f"the file is {guess.upper()} (it starts with a byte-order mark), not {encoding}: "
            f'save it as UTF-8 ("CSV UTF-8"), or set encoding = "{guess}" in the schema',
            code="bad_encoding",
            source=str(path),
            line=1,
        )
    decoder = codecs.getincrementaldecoder(encoding)()
    line, byte = 1, b""
    with opener(path, "rb") as fh:
        for chunk in fh:  # split at b"\n": the decoder carries a split character over
            try:
                line += decoder.decode(chunk).count("\n")
            except UnicodeDecodeError as exc:
                byte = exc.object[exc.start : exc.end]
                break
        else:
            line = None  # only pandas' decoder failed (e.g. at the end of the file)
    what = f"byte 0x{byte.hex()}" if byte else "a byte"
    return DataError(
        f"{what} is not valid {encoding}: save the file as UTF-8, or set the schema's "
        'encoding to the file\'s (e.g. encoding = "latin-1")',
        code="bad_encoding",
        source=str(path),
        line=line,
    )


def _raw_header(path: Path, opts: dict[str, Any]) -> list[str]:
    """The header line's fields as written (pandas renames a repeated ``x`` to ``x.1``)."""
    # Two lines: a first row with one more field than the header would otherwise
    # silently become pandas' index column (shifting every value one column left).
    row = _read(path, opts, header=None, names=None, nrows=2, dtype=str, na_filter=False)
    return [str(v) for v in row.iloc[0]] if len(row) else [str(c) for c in row.columns]


def _check_header(header: list[str], schema: Schema, source: str, sep: str, *, line: int) -> None:
    """Refuse a repeated header, and a header that was split at the wrong delimiter."""
    seen: set[str] = set()
    for h in header:
        if h in seen:
            raise DataError(
                f"header {h!r} appears more than once in the header line; rename one of them",
                code="duplicate_header",
                source=source,
                line=line,
            )
        seen.add(h)
    needed = [*schema.column_names, schema.target.column]
    if schema.client_column is not None:
        needed.append(schema.client_column)
    if schema.unit_column is not None:
        needed.append(schema.unit_column)
    absent = [c for c in needed if c not in seen]
    other = [d for d in COMMON_SEPS if d != sep and any(d in h for h in header)]
    if absent and other:
        raise DataError(
            f"missing column(s) {absent}; the header {header} contains {other[0]!r}: the file "
            f"looks {other[0]!r}-separated but is read with sep = {sep!r}; set "
            f"sep = {json.dumps(other[0])} in the schema",
            code="missing_column",
            source=source,
            column=absent[0],
        )
