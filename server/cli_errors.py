"""The ``fedpriv`` command's one error boundary: every refusal is one line and an exit code.

:func:`report` is called once, around the whole command (:class:`fedpriv.server.cli.FedprivGroup`),
and maps what a command raised to the launchers' exit codes:

* 2, a setting, schema, data or file error: fedpriv's input errors
  (:data:`INPUT_ERRORS`: a setting out of range, a schema or CSV the loader
  refuses, a model file the loader refuses, a node state that fails its checks,
  a calibration out of range), click's own usage errors, and an ``OSError`` on a
  path the user named (a folder that does not exist, a full disk, no permission);
* 1, a failed run: :class:`~fedpriv.federation.status.RunFailedError` (too many
  rounds released nothing, or a round the method cannot do without), a node's
  refusal, a client's failure;
* anything else is a defect and keeps its traceback (re-raised).

The line names what the error names (the file or key, the value, what is
allowed): each error's own message, on one line, through the ``fedpriv``
logger (``[fedpriv] error: ...``) on standard error.
"""

from __future__ import annotations

import errno
from typing import Any

import click

from fedpriv import logs

log = logs.get_logger(__name__)


def input_errors() -> tuple[type[BaseException], ...]:
    """fedpriv's error classes for a bad setting, schema, data or file (exit code 2)."""
    from fedpriv.artefact import ArtefactError
    from fedpriv.data.schema import SchemaError
    from fedpriv.errors import DataError
    from fedpriv.federation.fixedpoint import SecAggOverflowError
    from fedpriv.federation.limits import SettingError
    from fedpriv.privacy.calibration_range import CalibrationRangeError
    from fedpriv.privacy.card import CardError
    from fedpriv.privacy.node_audit import AuditLogError
    from fedpriv.privacy.node_inspect import InspectError
    from fedpriv.privacy.node_policy import PolicyFileError
    from fedpriv.privacy.tuning_calibration import TuningBudgetError

    return (
        SettingError,
        SchemaError,
        DataError,
        CalibrationRangeError,
        TuningBudgetError,
        SecAggOverflowError,
        ArtefactError,
        CardError,
        InspectError,
        AuditLogError,
        PolicyFileError,
    )


def run_errors() -> tuple[type[BaseException], ...]:
    """fedpriv's error classes for a run that failed (exit code 1)."""
    from fedpriv.errors import ClientFailure, Refusal
    from fedpriv.federation.status import RunFailedError
    from fedpriv.privacy.ledger import PrivacyBudgetExceededError

    return (RunFailedError, Refusal, ClientFailure, PrivacyBudgetExceededError)


def one_line(text: str) -> str:
    """``text`` on one line (a message's own line breaks become "; ")."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _os_line(exc: OSError) -> str:
    """An ``OSError`` as the file it concerns, what went wrong and its notes
    (e.g. ``--out results/x: a writable directory; nothing was written``)."""
    what = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    where = exc.filename if exc.filename is not None else ""
    notes = "; ".join(getattr(exc, "__notes__", ()))
    line = f"{where}: {what}" if where else what
    return f"{line} ({notes})" if notes else line


def classify(exc: BaseException) -> tuple[int, str | None] | None:
    """``(exit code, line)`` for ``exc``; ``line`` ``None``: nothing to say (``--help``,
    an explicit exit). ``None``: not an error of the boundary's (a defect)."""
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code, None
    if isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        return 1, "aborted"
    if isinstance(exc, click.UsageError):
        ctx = exc.ctx
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return 2, f"error: {one_line(exc.format_message())}{hint}"
    if isinstance(exc, click.ClickException):
        return exc.exit_code, f"error: {one_line(exc.format_message())}"
    if isinstance(exc, SystemExit):  # an argparse-style exit with a message
        if isinstance(exc.code, str):
            return 2, f"error: {one_line(exc.code)}"
        return int(exc.code or 0), None
    if isinstance(exc, run_errors()):
        text = one_line(str(exc))
        return 1, text if text.startswith("run failed") else f"run failed: {text}"
    if isinstance(exc, input_errors()):
        return 2, f"error: {one_line(str(exc))}"
    if isinstance(exc, OSError):
        return 2, f"error: {one_line(_os_line(exc))}"
    return None


def report(exc: BaseException) -> int:
    """Log ``exc`` as one line and return its exit code; re-raise a defect."""
    found = classify(exc)
    if found is None:
        raise exc
    code, line = found
    if line is not None:
        log.error("%s", line)
    return code


def exit_code(rv: Any) -> int:
    """A command's return value as an exit code (``None``: 0)."""
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
