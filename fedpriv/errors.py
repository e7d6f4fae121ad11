"""Input errors, and what of them may leave the party that holds the data.

A :class:`DataError` is for the person who owns the data: its message names
the file, the column, the line and often the offending cell. Those details
are private (a cell is a record's value, a line number locates a record), so
nothing but its :attr:`~DataError.code` and column may leave the curator
(privacy rule 4: an error message sent to the server, or written to the
server's log, is a release). :func:`public_error` is that sanitiser; the
Flower ClientApp raises only its result and logs the detail locally.

Light on purpose (no numpy, no pandas): the federation core and the
ClientApp import it.
"""

from __future__ import annotations

import re

#: Code of an error that is not a :class:`DataError` (its type name is public, its text is not).
INTERNAL = "client_error"
_CODE = re.compile(r"^[a-z][a-z0-9_]*$")


class DataError(ValueError):
    """Bad input data. ``str(err)`` reads ``<file>: column 'c', line N: <what>``.

    Parameters
    ----------
    message : str
        What is wrong, for the data's owner (may quote a cell).
    code : str
        Stable, data-free identifier of the kind of error (``"not_a_number"``,
        ``"label_outside_label_set"``, ...): the only part, with ``column``,
        that may be sent to another party.
    source, column, line :
        The file, the schema column (public) and the file line (private).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_data",
        source: str = "",
        column: str | None = None,
        line: int | None = None,
    ) -> None:
        if not _CODE.match(code):
            raise ValueError(f"code must match {_CODE.pattern}; got {code!r}")
        self.code, self.source, self.column, self.line = code, source, column, line
        where = [source] if source else []
        loc = []
        if column is not None:
            loc.append(f"column {column!r}")
        if line is not None:
            loc.append(f"line {line}")
        prefix = ": ".join(p for p in [", ".join(where), ", ".join(loc)] if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ClientFailure(RuntimeError):
    """What a client reports of its own failure: a code and a schema column, nothing else.

    ``str(err)`` is e.g. ``DataError(code='not_a_number', column='bmi')``; it
    carries no cell value, line number, file path or free text.
    """

    def __init__(
        self, *, code: str, column: str | None = None, kind: str = "DataError",
        node: int | None = None,
    ) -> None:  # fmt: skip
        self.code, self.column, self.kind, self.node = code, column, kind, node
        parts = [f"code={code!r}"] + ([f"column={column!r}"] if column is not None else [])
        parts += [f"node={node}"] if node is not None else []  # its public partition id
        super().__init__(f"{kind}({', '.join(parts)})")

    def at_node(self, node: int) -> ClientFailure:
        """The same failure naming the node (partition id) it happened on."""
        return ClientFailure(code=self.code, column=self.column, kind=self.kind, node=node)


class Refusal(PermissionError):
    """A party's own rules refuse a request; ``code`` (e.g. ``"not_approved"``) is the
    only part that leaves it, the text (limits, the request's settings) stays local."""

    def __init__(self, message: str, *, code: str = "refused") -> None:
        if not _CODE.match(code):
            raise ValueError(f"code must match {_CODE.pattern}; got {code!r}")
        self.code = code
        super().__init__(message)


def public_error(exc: BaseException) -> ClientFailure:
    """The part of ``exc`` that may leave the curator.

    A :class:`DataError` keeps its code and column; a :class:`ClientFailure`
    passes through; a :class:`Refusal` keeps its code; any other exception
    becomes :data:`INTERNAL` with its type name only (its text may quote data:
    e.g. a label range or a reply value).
    """
    if isinstance(exc, ClientFailure):
        return ClientFailure(code=exc.code, column=exc.column, kind=exc.kind, node=exc.node)
    if isinstance(exc, Refusal):
        return ClientFailure(code=exc.code, kind=type(exc).__name__)
    if isinstance(exc, DataError):
        return ClientFailure(code=exc.code, column=exc.column)
    return ClientFailure(code=INTERNAL, kind=type(exc).__name__)
