"""A schema skeleton from a CSV's header and column types, with placeholders for the rest.

A schema is public and written by a person from documentation (a data
dictionary, a code list, physical limits), never from the rows: bounds or
levels read off the private data leak it (:mod:`fedpriv.data.schema`). So
:func:`draft_schema` writes only what the file's *structure* says: the column
names and, from the pandas dtypes of its first :data:`DRAFT_ROWS` rows, whether
each column looks numeric, binary (a boolean dtype) or categorical. Every
bound, domain, label and binary value is the placeholder :data:`PLACEHOLDER`;
no value, bound or level observed in the data is ever written.

:func:`refuse_placeholders` is called by :meth:`Schema.from_dict` (so by every
loader), which refuses a schema until every placeholder has been filled.
"""

from __future__ import annotations

import difflib
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd

from fedpriv.data.errors import DataError
from fedpriv.data.table import COMMON_SEPS, check_text_file, decode_error, one_line

#: The text standing for a value a person must fill in from public knowledge.
PLACEHOLDER = "FILL ME"
#: Rows read to classify the columns by dtype (their values are never written).
DRAFT_ROWS = 200
#: What an unfilled draft's error and the ``schema draft`` command say.
WHY = (
    "fill it from public knowledge (a data dictionary, a standard's code list, physical "
    "limits), never from the rows: bounds or levels read off the data leak it"
)


def _q(s: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; non-ASCII kept as is)."""
    return json.dumps(str(s), ensure_ascii=False)


def classify_columns(
    path: str | Path, *, sep: str = ",", encoding: str = "utf-8", nrows: int = DRAFT_ROWS
) -> dict[str, str]:
    """``{column: "numeric" | "binary" | "categorical"}`` from the dtypes of the first rows.

    Only the dtype pandas infers is used: a boolean dtype is binary, any
    other numeric dtype numeric, the rest categorical. Missing tokens ``?``
    and ``""`` read as missing, so they do not make a numeric column text.
    """
    path = Path(path)
    compression = check_text_file(path, encoding=encoding)
    _check_sep(path, sep=sep, encoding=encoding, compression=compression)
    try:
        frame = pd.read_csv(
            path,
            sep=sep,
            encoding=encoding,
            nrows=nrows,
            na_values=["?"],
            compression=compression,
        )
    except UnicodeDecodeError as exc:
        raise decode_error(path, encoding, compression) from exc
    except pd.errors.EmptyDataError as exc:
        raise DataError("file is empty", code="empty_file", source=str(path)) from exc
    except pd.errors.ParserError as exc:
        raise DataError(
            f"cannot be split into {sep!r}-separated fields ({one_line(exc)}); a value containing "
            f'{sep!r} must be quoted ("..."), or pass the file\'s separator with --sep',
            code="unparseable_file",
            source=str(path),
        ) from exc
    except (OSError, EOFError) as exc:  # e.g. a truncated gzip stream
        raise DataError(f"cannot be read: {exc}", code="unreadable_file", source=str(path)) from exc
    kinds = {}
    for name in frame.columns:
        dtype = frame[name].dtype
        if pd.api.types.is_bool_dtype(dtype):
            kinds[str(name)] = "binary"
        elif pd.api.types.is_numeric_dtype(dtype):
            kinds[str(name)] = "numeric"
        else:
            kinds[str(name)] = "categorical"
    return kinds


def _header_line(path: Path, *, encoding: str, compression: str | None) -> str:
    """The file's first line, decoded (a column name is public; no row is read)."""
    opener = gzip.open if compression == "gzip" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.readline(1 << 20)
        return raw.decode(encoding, errors="replace").lstrip("\ufeff")
    except (OSError, EOFError, LookupError):
        return ""  # the reader names the problem


def _check_sep(path: Path, *, sep: str, encoding: str, compression: str | None) -> None:
    """Refuse a header not split by ``sep`` that another common delimiter splits.

    Raises
    ------
    DataError
        ``code="wrong_separator"``: ``this file looks ';'-separated: pass --sep ';'``.
    """
    if compression == "infer":  # bz2, xz, zstd: pandas' own reader names any problem
        return
    header = _header_line(path, encoding=encoding, compression=compression)
    if not header or sep in header:
        return
    counts = {d: header.count(d) for d in COMMON_SEPS if d != sep}
    best = max(counts, key=lambda d: counts[d])
    if counts[best]:
        raise DataError(
            f"the header has no {sep!r} but {counts[best]} {best!r}: this file looks "
            f"{best!r}-separated: pass --sep {_shell(best)} (or sep = {json.dumps(best)} in "
            "the schema)",
            code="wrong_separator",
            source=str(path),
            line=1,
        )


def _shell(sep: str) -> str:
    return "$'\\t'" if sep == "\t" else f"'{sep}'"


def draft_schema(
    path: str | Path,
    *,
    target: str | None = None,
    client_column: str | None = None,
    sep: str = ",",
    encoding: str = "utf-8",
) -> str:
    """The TOML text of a schema skeleton for the CSV at ``path``.

    ``target`` and ``client_column`` name columns of the file; they are left
    out of the feature columns. Without ``target`` the target column is a
    placeholder too. ``sep`` is the field delimiter (the CLI's ``--sep``),
    ``encoding`` the file's text encoding.

    Raises
    ------
    DataError
        Naming the file: ``is_a_directory``, ``file_not_found``,
        ``not_a_text_file`` (an archive, workbook or other binary),
        ``wrong_separator`` (the header looks split by another delimiter: pass
        ``--sep``), ``bad_encoding``, ``unparseable_file``, and
        ``unknown_column`` for a ``target`` or ``client_column`` not in the
        header (listing the header's columns).
    """
    path = Path(path)
    kinds = classify_columns(path, sep=sep, encoding=encoding)
    for key, col in (("target", target), ("client_column", client_column)):
        if col is not None and col not in kinds:
            same_case = [k for k in kinds if k.lower() == col.lower()]
            close = same_case or difflib.get_close_matches(col, list(kinds), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise DataError(
                f"--{key.replace('_', '-')} {col!r} is not a column of the file; {hint}"
                f"its columns are {list(kinds)}",
                code="unknown_column",
                source=str(path),
                column=col,
            )
    ph = _q(PLACEHOLDER)
    lines = [
        f"# Draft schema for {path.name}: written from its header and column types only.",
        "# Every placeholder must be replaced before the schema loads: fill it from public",
        "# knowledge (a data dictionary, a standard's code list, physical limits), never",
        "# from the rows: bounds or levels read off the data leak it.",
        "# Check each column's type too (a numeric code may really be categorical).",
        "# Format: experiments/schemas/example.toml.",
        "",
        f"name = {_q(path.stem)}",
        'description = ""',
        'missing_tokens = ["?", ""]',
        "# Columns in the file that are not used:",
        "drop = []",
    ]
    if client_column is not None:
        lines.append(f"client_column = {_q(client_column)}")
    if sep != ",":
        lines.append(f"sep = {_q(sep)}")
    if encoding != "utf-8":
        lines.append(f"encoding = {_q(encoding)}")
    lines += [
        "",
        "# Binary target: y = 1 iff the label is in `positive`; `labels`: the whole public",
        "# label set (any other label is an error).",
        "[target]",
        f"column = {ph if target is None else _q(target)}",
        f"positive = [{ph}]",
        f"labels = [{ph}]",
    ]
    for name, kind in kinds.items():
        if name in (target, client_column):
            continue
        lines += ["", "[[columns]]", f"name = {_q(name)}", f'type = "{kind}"']
        if kind == "numeric":
            lines.append(
                '# [lo, hi] in raw units; optional: transform = "log1p", missing = "indicator"'
            )
            lines.append(f"bounds = [{ph}, {ph}]")
        elif kind == "categorical":
            lines.append("# The full public domain:")
            lines.append(f"categories = [{ph}]")
        else:
            lines.append(f"positive = [{ph}]")
            lines.append(f"negative = [{ph}]")
    return "\n".join(lines) + "\n"


def _placeholders(value: Any) -> int:
    """How many placeholders ``value`` holds (a bound pair can hold two)."""
    if isinstance(value, str):
        return int(value.strip() == PLACEHOLDER)
    if isinstance(value, (list, tuple)):
        return sum(_placeholders(v) for v in value)
    return 0


def refuse_placeholders(data: dict[str, Any]) -> None:
    """Refuse a schema table still holding a :data:`PLACEHOLDER`, naming where.

    Raises
    ------
    SchemaError
        ``schema 'x', column 'age': bounds is still the draft placeholder ...``.
    """
    from fedpriv.data.schema import SchemaError

    name = data.get("name", "<unnamed>")
    tables: list[tuple[str, Any]] = [("", data)]
    if isinstance(data.get("target"), dict):
        tables.append(("[target]", data["target"]))
    for col in data.get("columns", []) if isinstance(data.get("columns"), list) else []:
        if isinstance(col, dict):
            tables.append((f"column {col.get('name', '<unnamed>')!r}", col))
    # (where, key, how many placeholders its value holds), in file order.
    found = [(w, k, n) for w, t in tables for k, v in t.items() if (n := _placeholders(v))]
    if found:
        where, key, _ = found[0]
        at = f", {where}" if where else ""
        left = sum(n for *_, n in found)  # counted as the draft command counts them
        raise SchemaError(
            f"schema {name!r}{at}: {key} is still the draft placeholder {PLACEHOLDER!r} "
            f"({left} placeholder{'s' if left > 1 else ''} left): {WHY}"
        )
