"""The ``fedpriv`` command's view of a Flower run: fedpriv's lines shown, Flower's kept in a log.

``fedpriv run --flower`` and ``fedpriv deploy`` call a launcher's ``main(argv)``
(:mod:`fedpriv.server.simulate`, :mod:`fedpriv.server.deploy`) under :func:`quiet_flower`: every
line the launcher follows goes to ``flower.log`` in the run's directory, and
only fedpriv's own lines (and errors) reach the terminal, its round lines about every
tenth round (:func:`fedpriv.server.progress.milestone`: each with ε spent so far; every round
stays in the log); ``--verbose`` shows all.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path
from typing import Any

from fedpriv.server.progress import shown_without_terminal

from fedpriv import logs

log = logs.get_logger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _fedprivs_line(line: str) -> bool:
    """Whether a followed line is fedpriv's (or an error) rather than Flower's INFO flood,
    and not a round line between two progress milestones."""
    s = _ANSI.sub("", line).lstrip()
    mine = s.startswith(("[fedpriv", "[simulate", "[deploy", "AUC ", "ERROR", "Traceback"))
    return mine and shown_without_terminal(s)


class _LogFilter(io.TextIOBase):
    """A stdout that writes every line to a log file and shows fedpriv's lines only.

    The file is opened (its folder made) at the first line, and the line saying
    where Flower's output goes is logged at the first line kept from view: a
    launcher that refuses its settings prints its one line and nothing else.
    """

    def __init__(self, path: Path, shown: Any) -> None:
        self.path, self._shown, self._buf = path, shown, ""
        self._log: Any = None
        self._told = False

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self._buf += s
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if self._log is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._log = open(self.path, "a", encoding="utf-8")  # closed by close()
            self._log.write(line + "\n")
            if _fedprivs_line(line):
                self._shown.write(line + "\n")
            elif not self._told:
                self._told = True
                log.info("Flower's output goes to %s (--verbose shows it)", self.path)
        if self._log is not None:
            self._log.flush()
        return len(s)

    def flush(self) -> None:
        if self._buf:
            self.write("\n")
        if self._log is not None:
            self._log.flush()
        self._shown.flush()

    def close(self) -> None:
        super().close()  # flushes first
        if self._log is not None:
            self._log.close()


def quiet_flower(entry: Any, argv: list[str], logdir: Path, *, verbose: bool) -> int:
    """Call a launcher's ``main(argv)`` with its followed output in ``logdir/flower.log``."""
    if verbose:
        return int(entry(argv) or 0)
    filt = _LogFilter(logdir / "flower.log", sys.stdout)
    try:
        with contextlib.redirect_stdout(filt):
            try:
                return int(entry(argv) or 0)
            finally:
                filt.flush()
    finally:
        filt.close()
