"""The largest x whose accounted ε stays within a target: one search for every budget split.

Several budget questions have one shape: a plan's accounted ε(x) grows with a
scalar x, and the answer is the largest x with ε(x) ≤ ε_target, found to a
relative tolerance from below (never an overshoot):

* one scale over a learner's pure releases
  (:func:`fedpriv.privacy.calibration_plan.calibrate_pure_plan`);
* the per-run ε_b of private hyper-parameter tuning
  (:func:`fedpriv.privacy.tuning_calibration.calibrate_base_epsilon`);
* the per-fold ε_f of a cross-validation whose k fits and final fit share one
  ledger (``fedpriv cv``).

:func:`largest_within` brackets x between a feasible and an infeasible value
(walking down by a factor from ``start`` while ε overshoots, then up, aiming
just past the target, until it does), then narrows the bracket by safeguarded
regula falsi on (log x, log ε) (ε is close to a power of x there, so few steps
are needed; each step is one accounting, or one calibration per plan). It stops
once ε(x) ∈ [(1 − rtol)·target, target], when the bracket closes, at the cap
``max_x`` (ε saturates or the caller caps the scale) or after
``max_evaluations``; the caller reads why from :class:`Found` (``above`` is the
smallest infeasible x seen, None when the cap was feasible).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: Regula falsi aims this fraction of ``rtol`` below the target (a margin against
#: landing just over it, which costs one more evaluation).
AIM_FRACTION = 0.25
#: Relative width at which a bracket counts as closed (ε jumps inside it).
CLOSED = 1e-9


class OutOfReach(Exception):
    """Even ``min_x`` overshoots the target: ``x`` is the last value tried, ``value`` its ε."""

    def __init__(self, x: float, value: float) -> None:
        super().__init__(f"x={x!r} is accounted at {value!r}")
        self.x, self.value = x, value


@dataclass(frozen=True, kw_only=True)
class Found(Generic[T]):
    """Result of :func:`largest_within`.

    Attributes
    ----------
    x, value, payload
        The largest feasible x found, its ε (≤ the target) and what ``value_at`` returned
        with it (e.g. both accountants' figures).
    above, above_value, above_payload
        The smallest infeasible x seen and its figures; ``above`` is None when
        ``max_x`` itself was feasible.
    evaluations : int
        Calls of ``value_at``.
    """

    x: float
    value: float
    payload: T
    above: float | None
    above_value: float
    above_payload: T | None
    evaluations: int


def largest_within(
    value_at: Callable[[float], tuple[float, T]],
    *,
    target: float,
    start: float,
    rtol: float,
    min_x: float,
    max_x: float,
    down: float = 0.5,
    closed: float = CLOSED,
    max_evaluations: int = 60,
) -> Found[T]:
    """The largest-found x in [``min_x``, ``max_x``] with ``value_at(x)[0]`` ≤ ``target``.

    Parameters
    ----------
    value_at : callable
        x ↦ (ε(x), payload); ε non-decreasing in x (``inf`` allowed: infeasible).
    target : float
        The budget ε(x) must not pass.
    start : float
        First x tried (clipped to ``max_x``).
    rtol : float
        Stop once ε(x) ≥ (1 − rtol)·target.
    min_x, max_x : float
        The walk down raises :class:`OutOfReach` below ``min_x``; x never passes ``max_x``.
    down : float
        Factor of each step of the walk down, in (0, 1).
    closed : float
        The narrowing stops once the bracket's ratio is within 1 + ``closed``.
    max_evaluations : int
        Calls of ``value_at`` the narrowing may reach.

    Raises
    ------
    OutOfReach
        ε overshoots the target at every x tried down to ``min_x``.
    """
    evaluations = 0

    def at(x: float) -> tuple[float, T]:
        nonlocal evaluations
        evaluations += 1
        return value_at(x)

    def done(v: float) -> bool:
        return v >= (1.0 - rtol) * target

    lo = min(start, max_x)
    lo_v, lo_p = at(lo)
    hi: float | None = None
    hi_v, hi_p = math.inf, None
    while lo_v > target:  # the start overshoots: walk down
        hi, hi_v, hi_p = lo, lo_v, lo_p
        lo *= down
        if lo < min_x:
            raise OutOfReach(lo, hi_v)
        lo_v, lo_p = at(lo)
    while hi is None and not done(lo_v) and lo < max_x:  # walk up until ε overshoots
        # ε grows about linearly in x (faster with many releases): aim just past the target.
        x = min(max_x, lo * max(2.0, 1.05 * target / max(lo_v, 1e-300)))
        v, p = at(x)
        if v <= target:
            lo, lo_v, lo_p = x, v, p
        else:
            hi, hi_v, hi_p = x, v, p
    aim = math.log(target * (1.0 - AIM_FRACTION * rtol))
    while (
        hi is not None
        and not done(lo_v)
        and hi / lo > 1.0 + closed
        and evaluations < max_evaluations
    ):
        t = 0.5
        if math.isfinite(hi_v) and lo_v > 0.0:
            t = (aim - math.log(lo_v)) / (math.log(hi_v) - math.log(lo_v))
        t = min(max(t, 0.1), 0.9)  # the bracket shrinks every step
        mid = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
        v, p = at(mid)
        if v <= target:
            lo, lo_v, lo_p = mid, v, p
        else:
            hi, hi_v, hi_p = mid, v, p
    return Found(
        x=lo,
        value=lo_v,
        payload=lo_p,
        above=hi,
        above_value=hi_v,
        above_payload=hi_p,
        evaluations=evaluations,
    )
