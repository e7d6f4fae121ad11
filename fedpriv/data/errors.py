"""Input errors that name the file, the column and the line."""

from __future__ import annotations


class DataError(ValueError):
    """Bad input data. ``str(err)`` reads ``<file>: column 'c', line N: <what>``."""

    def __init__(
        self, message: str, *, source: str = "", column: str | None = None, line: int | None = None
    ) -> None:
        self.source, self.column, self.line = source, column, line
        where = [source] if source else []
        loc = []
        if column is not None:
            loc.append(f"column {column!r}")
        if line is not None:
            loc.append(f"line {line}")
        prefix = ": ".join(p for p in [", ".join(where), ", ".join(loc)] if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)
