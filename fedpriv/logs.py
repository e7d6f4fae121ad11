"""The ``fedpriv`` logger hierarchy, and its one configuration point for entry points.

Every module logs through ``logging.getLogger("fedpriv.<module>")`` (see
:func:`get_logger`); library code never adds handlers. Entry points (the
launchers' ``main``, the ServerApp's ``main``, the experiment CLIs) call
:func:`configure` once, which gives the ``fedpriv`` logger a handler printing
``[<tag>] <message>``: the format the launchers, the README and the tests read
(e.g. ``[fedpriv] round 3/75: 5/5 replies``).

Anything logged is a release when it leaves the curator (privacy rule 4): log
public values only (settings, counts of messages, released results), never a
record, a private statistic or a secret.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

ROOT = "fedpriv"
_HANDLER_FLAG = "_fedpriv_handler"


def get_logger(module: str) -> logging.Logger:
    """``fedpriv.<module>``'s logger (``module`` is usually ``__name__``).

    Library modules (``fedpriv.…``) keep their name; application modules
    (``fedpriv.server.launch``) are placed under ``fedpriv`` so one :func:`configure`
    reaches them all.
    """
    name = module if module == ROOT or module.startswith(ROOT + ".") else f"{ROOT}.{module}"
    return logging.getLogger(name)


class _LiveStreamHandler(logging.StreamHandler):
    """Writes to ``sys.stdout`` or ``sys.stderr`` as they are *at emit time*.

    Flower mirrors a ServerApp's output to the run log by wrapping those streams
    after start-up, and pytest swaps them per test: a stream captured when the
    handler was made would bypass both.
    """

    def __init__(self, which: Literal["stdout", "stderr"]) -> None:
        super().__init__()
        self._which = which

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return getattr(sys, self._which)

    @stream.setter
    def stream(self, _value: TextIO) -> None:  # StreamHandler.__init__ assigns it
        pass


def configure(
    level: int | str = logging.INFO,
    *,
    tag: str = ROOT,
    stream: Literal["stdout", "stderr"] = "stderr",
) -> logging.Logger:
    """Give the ``fedpriv`` logger one handler printing ``[tag] message`` to ``stream``.

    For entry points only. Calling it again replaces the handler (no duplicate
    lines); the ``fedpriv`` logger stops propagating to the root logger, whose
    handlers (Flower's, Ray's, pytest's) would print each line a second time.
    """
    if isinstance(level, str):
        level = logging.getLevelNamesMapping()[level.upper()]
    logger = logging.getLogger(ROOT)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_FLAG, False)]:
        logger.removeHandler(old)
    handler = _LiveStreamHandler(stream)
    setattr(handler, _HANDLER_FLAG, True)
    handler.setFormatter(logging.Formatter(f"[{tag}] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger
