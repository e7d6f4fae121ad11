"""The ``fedpriv`` command's view of a Flower run: fedpriv's lines shown, Flower's kept in a log.

``fedpriv run --flower`` and ``fedpriv deploy`` call a launcher's ``main(argv)``
(:mod:`server.simulate`, :mod:`server.deploy`) under :func:`quiet_flower`: every
line the launcher follows goes to ``flower.log`` in the run's directory, and
only fedpriv's own lines (and errors) reach the terminal; ``--verbose`` shows all.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path
from typing import Any

from fedpriv import logs

log = logs.get_logger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _fedprivs_line(line: str) -> bool:
    """Whether a followed line is fedpriv's (or an error) rather than Flower's INFO flood."""
    s = _ANSI.sub("", line).lstrip()
    return s.startswith(("[fedpriv", "[simulate", "[deploy", "AUC ", "ERROR", "Traceback"))


class _LogFilter(io.TextIOBase):
    """A stdout that writes every line to a log file and shows fedpriv's lines only."""

    def __init__(self, logfile: Any, shown: Any) -> None:
        self._log, self._shown, self._buf = logfile, shown, ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self._buf += s
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            self._log.write(line + "\n")
            if _fedprivs_line(line):
                self._shown.write(line + "\n")
        self._log.flush()
        return len(s)

    def flush(self) -> None:
        if self._buf:
            self.write("\n")
        self._log.flush()
        self._shown.flush()


def quiet_flower(entry: Any, argv: list[str], logdir: Path, *, verbose: bool) -> int:
    """Call a launcher's ``main(argv)`` with its followed output in ``logdir/flower.log``."""
    if verbose:
        return int(entry(argv) or 0)
    logdir.mkdir(parents=True, exist_ok=True)
    path = logdir / "flower.log"
    with open(path, "a", encoding="utf-8") as fh:
        filt = _LogFilter(fh, sys.stdout)
        log.info("Flower's output goes to %s (--verbose shows it)", path)
        with contextlib.redirect_stdout(filt):
            try:
                code = int(entry(argv) or 0)
            finally:
                filt.flush()
    return code
