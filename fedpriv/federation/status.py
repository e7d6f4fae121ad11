"""A run's outcome: completed, degraded or failed, from its round counts.

A federated round can end without releasing anything (the engine's
``Communication.rounds_aborted``): too few clients asked for a secure sum,
too few survivors for the Shamir threshold, a failed check of the replies.
A run whose rounds mostly aborted still "finishes", with an untrained or
barely trained model; its status says so:

* **completed**: no round aborted;
* **degraded**: some rounds aborted, at most ``max_aborted_share`` of them, or
  the strategy says why its released model falls short although every round
  released (:func:`with_notes`: e.g. a recalibration whose release showed nothing);
* **failed**: more than ``max_aborted_share`` of the rounds aborted, or the
  run raised.

The status is a pure function of public counts (:func:`run_status`): who was
asked follows the participation coins, which are independent of the data,
and a round's abort depends on which clients answered, not on their rows.

Default ``max_aborted_share`` = 0.25 (:data:`DEFAULT_MAX_ABORTED_SHARE`): a
quarter of the planned updates missing is where a model stops being the one
the run was configured for (75 boosting trees become fewer than 57; T DP-SGD
steps, fewer than 3T/4), while isolated aborts (a node lost for a round,
an unlucky participation draw at ρ < 1: at ρ = 0.5 and K = 5 a round asks
fewer than two clients w.p. 6/32 ≈ 0.19) keep the run usable, flagged
``degraded``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from fedpriv.atomic import write_json_atomic

#: Largest share of a run's rounds that may release nothing before the run counts
#: as failed (module docstring: why 0.25).
DEFAULT_MAX_ABORTED_SHARE = 0.25
#: The file the ServerApp writes and the launchers read, in ``<out-dir>/<run id>/``.
STATUS_FILE = "status.json"


class RunStatus(StrEnum):
    """How a run ended (module docstring)."""

    COMPLETED = "completed"
    DEGRADED = "degraded"
    FAILED = "failed"


def _check_share(max_aborted_share: float) -> float:
    x = float(max_aborted_share)
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"max_aborted_share must lie in [0, 1]; got {max_aborted_share!r}")
    return x


def run_status(*, rounds: int, aborted: int, max_aborted_share: float) -> RunStatus:
    """The status of a run that ran ``rounds`` rounds, ``aborted`` of which released nothing.

    Completed if none aborted; degraded if ``aborted / rounds ≤ max_aborted_share``;
    failed above it. (A run that raised is failed whatever its counts:
    :func:`run_outcome` with ``error``.)
    """
    share = _check_share(max_aborted_share)
    if not 0 <= aborted <= rounds:
        raise ValueError(f"aborted must lie in [0, rounds={rounds}]; got {aborted}")
    if aborted == 0:
        return RunStatus.COMPLETED
    return RunStatus.DEGRADED if aborted / rounds <= share else RunStatus.FAILED


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What ``status.json`` holds: the status, the counts behind it and why."""

    status: RunStatus
    rounds_planned: int
    rounds_run: int
    rounds_released: int
    rounds_aborted: int
    client_errors: int
    max_aborted_share: float
    reason: str

    @property
    def failed(self) -> bool:
        return self.status is RunStatus.FAILED

    def line(self) -> str:
        """The one log line, e.g. ``run degraded: 12 of 75 rounds released nothing …``."""
        return f"run {self.status}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": str(self.status)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunOutcome:
        return cls(**{**data, "status": RunStatus(data["status"])})


class RoundAbortedError(RuntimeError):
    """A strategy could not go on after a round that released nothing (the random
    forest's one leaf-count round: no leaves without it). The runtime raises it in
    place of the strategy's own error (chained); an in-process fit turns it into
    :class:`RunFailedError` naming the round."""

    def __init__(self, round_id: int, cause: BaseException) -> None:
        super().__init__(
            f"round {round_id} released nothing (too few clients asked or surviving, or "
            f"their replies refused) and the method cannot go on without it: {cause}"
        )
        self.round_id = round_id


class RunFailedError(RuntimeError):
    """A run ended ``failed``: too many rounds released nothing.

    What the run did spend stays recorded: ``outcome`` (the counts), and for an
    in-process fit ``ledger`` and ``privacy_report`` (every release made) and
    ``communication``.
    """

    def __init__(
        self,
        outcome: RunOutcome,
        *,
        ledger: Any = None,
        privacy_report: Any = None,
        communication: Any = None,
    ) -> None:
        super().__init__(outcome.line())
        self.outcome = outcome
        self.ledger = ledger
        self.privacy_report = privacy_report
        self.communication = communication


def run_outcome(
    *,
    rounds_planned: int,
    rounds: int,
    aborted: int,
    max_aborted_share: float,
    client_errors: int = 0,
    error: BaseException | None = None,
    released: int | None = None,
) -> RunOutcome:
    """The run's outcome from its counts; ``error``: what the run raised (then failed).

    ``released`` (default ``rounds - aborted``): rounds whose update went through;
    fewer when the run raised inside a round, after its sum was counted.
    """
    share = _check_share(max_aborted_share)
    released = rounds - aborted if released is None else released
    nothing = f"{aborted} of {rounds} rounds released nothing"
    if error is not None:
        status = RunStatus.FAILED
        what = f"{type(error).__name__}: {error}".strip()
        if len(what) > 300:  # one line in a log, not a traceback
            what = what[:297] + "..."
        reason = (
            f"the run raised {what} ({rounds} of {rounds_planned} rounds run, {released} released)"
        )
    else:
        status = run_status(rounds=rounds, aborted=aborted, max_aborted_share=share)
        if status is RunStatus.COMPLETED:
            reason = f"all {rounds} of {rounds_planned} rounds released"
        else:
            cmp = "≤" if status is RunStatus.DEGRADED else ">"
            reason = (
                f"{nothing} (too few clients asked or surviving, or their replies refused); "
                f"{aborted / rounds:.0%} {cmp} max-aborted-share {share:.0%}"
            )
        if rounds < rounds_planned:
            reason += f"; the strategy stopped after {rounds} of {rounds_planned} planned rounds"
    if client_errors:
        reason += f"; {client_errors} client error replies"
    return RunOutcome(
        status=status,
        rounds_planned=rounds_planned,
        rounds_run=rounds,
        rounds_released=released,
        rounds_aborted=aborted,
        client_errors=client_errors,
        max_aborted_share=share,
        reason=reason,
    )


def strategy_notes(strategy: Any) -> list[str]:
    """What a finished strategy says about its released model (its ``status_notes()``,
    from released values only; none if it has no such method)."""
    notes = getattr(strategy, "status_notes", None)
    return list(notes()) if callable(notes) else []


def with_notes(outcome: RunOutcome, notes: list[str]) -> RunOutcome:
    """``outcome`` with the strategy's ``notes`` (why its released model falls short of the
    plan although the rounds released, e.g. a degenerate recalibration): a completed run
    becomes degraded, and the notes join its reason. No notes: ``outcome`` itself."""
    if not notes:
        return outcome
    status = RunStatus.DEGRADED if outcome.status is RunStatus.COMPLETED else outcome.status
    reason = "; ".join([outcome.reason, *notes])
    return RunOutcome(**{**asdict(outcome), "status": status, "reason": reason})


def outcome_of(
    communication: Any | None,
    *,
    rounds_planned: int,
    max_aborted_share: float,
    error: BaseException | None = None,
) -> RunOutcome:
    """:func:`run_outcome` from a run's tally (a ``Communication``; ``None`` if the
    run stopped before its first round): one reading of the counts for every runtime."""
    c = communication
    return run_outcome(
        rounds_planned=rounds_planned,
        rounds=c.rounds if c else 0,
        aborted=c.rounds_aborted if c else 0,
        released=c.rounds_released if c else 0,
        max_aborted_share=max_aborted_share,
        client_errors=c.client_errors if c else 0,
        error=error,
    )


def write_status(out_dir: str | Path, outcome: RunOutcome) -> Path:
    """``<out_dir>/status.json`` (atomic: a reader never sees half a file)."""
    path = Path(out_dir) / STATUS_FILE
    write_json_atomic(path, outcome.to_dict())
    return path


def read_status(out_dir: str | Path) -> RunOutcome | None:
    """The outcome a run wrote in ``out_dir``, or ``None`` if it wrote none (or garbage)."""
    try:
        return RunOutcome.from_dict(json.loads((Path(out_dir) / STATUS_FILE).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
