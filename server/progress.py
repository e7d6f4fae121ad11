"""A launcher's view of a run's rounds: a progress bar on a terminal, plain lines otherwise.

The launchers follow the ServerApp's log (``flwr log --stream``); the
ServerApp logs ``[fedpriv] round r/T: ...`` once per round
(:meth:`fedpriv.server.grid_runtime.GridRuntime.log_round`). :class:`RoundProgress`
turns those lines into a ``rich`` progress bar on stderr when stderr is a
terminal, and forwards every other line unchanged. Without a terminal (CI,
pipes, a log file) it forwards every line, round lines included; with
``thin=True`` only the round lines at a :func:`milestone` (about every tenth
round and the last: the ones carrying ε spent so far), so a run of several
minutes still prints a plain progress line about every 10 %.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

ROUND = re.compile(r"\[fedpriv\] round (\d+)/(\d+)\b")
EPSILON = re.compile(r"ε spent ≤ (\S+)")


def parse_round(line: str) -> tuple[int, int] | None:
    """``(r, T)`` of a ServerApp round line, e.g. ``"[fedpriv] round 3/75: 5/5 replies"``."""
    m = ROUND.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def milestone(r: int, total: int) -> bool:
    """Whether round ``r`` of ``total`` is one the plain progress shows: every
    ``max(1, total // 10)``-th and the last, the rounds whose ServerApp line carries an
    upper bound on ε spent (:meth:`fedpriv.server.grid_runtime.GridRuntime.log_round`)."""
    return r == total or r % max(1, total // 10) == 0


def shown_without_terminal(line: str) -> bool:
    """Whether a followed line is shown as plain progress: any line but a round line
    between two milestones (those stay in the run's log)."""
    rt = parse_round(line)
    return rt is None or milestone(*rt)


class RoundProgress:
    """Context manager; :meth:`on_line` takes each followed line.

    Parameters
    ----------
    write : callable
        Where lines that are not drawn as the bar go (default: ``sys.stdout``,
        looked up per line so a redirected stdout is honoured).
    bar : bool, optional
        Draw the bar; default: only when ``sys.stderr`` is a terminal.
    thin : bool
        Without the bar, forward only the round lines at a :func:`milestone`
        (every other line unchanged).
    """

    def __init__(
        self,
        write: Callable[[str], object] | None = None,
        *,
        bar: bool | None = None,
        thin: bool = False,
    ):
        self._write = write
        self.bar = sys.stderr.isatty() if bar is None else bar
        self.thin = thin
        self._progress = None
        self._task = None

    def __enter__(self) -> RoundProgress:
        if self.bar:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._progress = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=sys.stderr),
                transient=False,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _out(self, line: str) -> None:
        if self._write is not None:
            self._write(line)
            return
        stream: TextIO = sys.stdout
        stream.write(line)
        stream.flush()

    def on_line(self, line: str) -> None:
        """Advance the bar on a round line (when drawing one); forward any other line
        (without the bar and ``thin``: a round line only at a milestone)."""
        if self._progress is None:
            if not self.thin or shown_without_terminal(line):
                self._out(line)
            return
        rt = parse_round(line)
        if rt is None:
            self._out(line)
            return
        r, total = rt
        if self._task is None:
            self._task = self._progress.add_task("rounds", total=total)
        # About every tenth round line carries an upper bound on ε spent: keep it in view.
        eps = EPSILON.search(line)
        extra = {"description": f"rounds, ε spent ≤ {eps.group(1)}"} if eps else {}
        self._progress.update(self._task, completed=r, total=total, **extra)


def _bound(eps: float) -> str:
    """An upper bound on ε as shown: rounded up to three decimals."""
    return "inf" if math.isinf(eps) else f"{math.ceil(eps * 1e3) / 1e3:.3f}"


class FitRounds:
    """The bar's view of an in-process fit: rounds done and an upper bound on ε spent.

    The estimator's progress callback (``fit(on_round=...)``) reports each round
    done. About every tenth round (as the ServerApp's round lines,
    :meth:`fedpriv.server.grid_runtime.GridRuntime.log_round`) the line carries
    ``PrivacyLedger.epsilon_upper_bound()`` of the fit's ledger: one coarse
    PLD each (shown by the bar, or as a plain line without a terminal).
    :meth:`finish` shows the last round with the fit's accounted ε.
    """

    def __init__(self, progress: Any, total: int | Callable[[], int]) -> None:
        # ``total`` may be known only once the fit resolved it (a callable, read when a
        # round is done): DP-SGD's and Lumberjack's automatic settings follow the fit's
        # public record bound, which a released count gives only inside the fit.
        self._progress, self._total_of, self.done = progress, total, 0

    @property
    def _total(self) -> int:
        total = self._total_of
        return total if isinstance(total, int) else int(total())

    @property
    def _every(self) -> int:
        return max(1, self._total // 10)  # (0 before the fit resolves it: every round)

    def _line(self, done: int, eps: float | None) -> None:
        extra = "" if eps is None else f", ε spent ≤ {_bound(eps)}"
        total = self._total or "?"  # 0: automatic, resolved when the fit knows its n
        self._progress.on_line(f"[fedpriv] round {done}/{total}{extra}\n")

    def start(self) -> None:
        """The fit's start: no round done."""
        self._line(0, None)

    def on_round(self, done: Any) -> None:
        """A :class:`~fedpriv.federation.engine.RoundDone`: its round is done."""
        self.done = max(self.done, done.round + 1)
        if self.done >= self._total:
            return  # the last round: finish() shows it, with the fit's accounted ε
        eps = None
        if done.ledger is not None and self.done % self._every == 0:
            eps = float(done.ledger.epsilon_upper_bound())
        self._line(self.done, eps)

    def finish(self, epsilon: float | None) -> None:
        """The fit's end: its last round done, ``epsilon`` its accounted ε (if private)."""
        self._line(self.done, epsilon)
