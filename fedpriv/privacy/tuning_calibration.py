"""The per-run budget of private hyper-parameter tuning, so that the tuned procedure fits a target.

Given the target (ε, δ) of the *whole* tuning procedure, the law of the number
of runs K (:class:`~fedpriv.privacy.tuning.RunsDistribution`) and the grid,
find the largest per-run ε_b such that the
:class:`~fedpriv.privacy.events.TunedSelectionDpEvent` built from the runs
calibrated at (ε_b, δ) has RDP-derived ε ≤ target at δ.

``candidates(ε_b)`` returns one DpEvent per distinct configuration: the whole
base run at per-run budget ε_b (its training plan at the noise its learner
calibrates for (ε_b, δ), plus the DP validation score it releases). A base
run draws its configuration at random, so its RDP curve is the pointwise
maximum over the candidates (:func:`fedpriv.privacy.accounting.rdp_curve`).

**Trust.** The validation score each run releases must itself be a DP
release (e.g. :mod:`fedpriv.evaluation.dp`'s noisy score histogram) whose
event is part of its candidate: the theorems of Papernot & Steinke (2022)
bound runs that are DP *as a whole*. A score computed without noise would
break their premise, and the selected configuration would leak the
validation rows without bound, which is what ``tuning = "validation"`` in
the benchmark does (and says it does not account).

The search (:func:`fedpriv.privacy.scale_search.largest_within`, the
package's one "largest x within ε" search) brackets ε_b between a feasible
and an infeasible per-run budget and narrows the bracket by safeguarded
regula falsi on (log ε_b, log ε) (each step costs one noise calibration
per distinct plan, so few steps matter). Every answer is *checked*: the
returned event's ε is at most the target (never an overshoot) and at least
(1 − ``rtol``) times it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dp_accounting import dp_event

from fedpriv.privacy import accounting
from fedpriv.privacy.events import TunedSelectionDpEvent, freeze_event
from fedpriv.privacy.scale_search import OutOfReach, largest_within
from fedpriv.privacy.tuning import RunsDistribution
from fedpriv.validation import check_open_unit, check_positive

Candidates = Callable[[float], Sequence[dp_event.DpEvent]]
#: Smallest per-run ε the search tries before declaring the target infeasible.
MIN_BASE_EPSILON = 1e-3


class TuningBudgetError(ValueError):
    """No per-run budget makes the tuned procedure fit the target."""


@dataclass(frozen=True, kw_only=True)
class TuningCalibration:
    """Result of :func:`calibrate_base_epsilon`.

    Attributes
    ----------
    base_epsilon : float
        ε_b: each base run is calibrated to (ε_b, ``delta``).
    delta : float
        δ of the target and of every base run.
    epsilon : float
        RDP-derived ε at ``delta`` of ``event`` (≤ ``target_epsilon``).
    target_epsilon : float
        The whole procedure's budget.
    event : TunedSelectionDpEvent
        What the ledger is charged for the selection.
    distribution : RunsDistribution
        The law of K.
    steps : int
        Candidate evaluations the search made.
    """

    base_epsilon: float
    delta: float
    epsilon: float
    target_epsilon: float
    event: TunedSelectionDpEvent
    distribution: RunsDistribution
    steps: int


def selection_event(
    candidates: Sequence[dp_event.DpEvent], distribution: RunsDistribution
) -> TunedSelectionDpEvent:
    """The ledger event of the best of K runs over ``candidates`` (duplicates dropped)."""
    unique = tuple(dict.fromkeys(freeze_event(c) for c in candidates))
    if not unique:
        raise ValueError("candidates must hold at least one DpEvent; got none")
    return TunedSelectionDpEvent(
        candidates=unique,
        distribution=distribution.kind,
        eta=distribution.eta,
        gamma=distribution.gamma,
        mean=distribution.mean,
    )


def selection_epsilon(event: TunedSelectionDpEvent, delta: float) -> float:
    """RDP-derived ε at ``delta`` of the tuned procedure (what the ledger certifies)."""
    return accounting.rdp_epsilon([(event, 1)], delta)


def calibrate_base_epsilon(
    *,
    target_epsilon: float,
    target_delta: float,
    candidates: Candidates,
    distribution: RunsDistribution,
    rtol: float = 0.02,
) -> TuningCalibration:
    """The largest per-run ε_b (to ``rtol``) whose tuned procedure fits (ε, δ) = target.

    Parameters
    ----------
    target_epsilon, target_delta : float
        Budget of the whole tuning procedure (selection included).
    candidates : callable
        ε_b ↦ one DpEvent per configuration (module docstring). It may raise
        ``ValueError`` for an ε_b its calibration cannot serve (too small):
        that ε_b then counts as infeasible.
    distribution : RunsDistribution
        The law of the number of runs K.
    rtol : float
        The answer's tuned ε lies in [(1 − rtol)·target, target], in (0, 1)
        (unless ε_b is pinned to within rtol/100 first).

    Raises
    ------
    TuningBudgetError
        Even ε_b = ``MIN_BASE_EPSILON`` overshoots the target (the overhead of
        K alone, or a fixed part of a run such as its validation score,
        exceeds it).
    """
    eps = check_positive("target_epsilon", target_epsilon)
    dlt = check_open_unit("target_delta", target_delta)
    rtol = check_open_unit("rtol", rtol)
    steps = 0

    def at(base_eps: float) -> tuple[float, TunedSelectionDpEvent | None]:
        nonlocal steps
        steps += 1
        try:
            event = selection_event(candidates(base_eps), distribution)
        except ValueError:  # e.g. a calibration range error at a tiny ε_b
            return math.inf, None
        return selection_epsilon(event, dlt), event

    def done(x: float, x_eps: float, event: TunedSelectionDpEvent) -> TuningCalibration:
        return TuningCalibration(
            base_epsilon=x,
            delta=dlt,
            epsilon=x_eps,
            target_epsilon=eps,
            event=event,
            distribution=distribution,
            steps=steps,
        )

    try:  # from ε/2: down by quarters, or up to a whole ε per run (e.g. K ≡ 1 in effect)
        found = largest_within(
            at, target=eps, start=eps / 2.0, rtol=rtol, min_x=MIN_BASE_EPSILON, max_x=eps,
            down=0.25, closed=rtol / 100.0,
        )  # fmt: skip
    except OutOfReach:
        raise TuningBudgetError(
            f"no per-run epsilon in [{MIN_BASE_EPSILON:g}, {eps:g}] makes the tuned "
            f"procedure ({distribution.describe()}) fit target_epsilon={eps:g} at "
            f"delta={dlt:g}; raise the target, lower E[K], or shrink fixed per-run costs"
        ) from None
    return done(found.x, found.value, found.payload)
