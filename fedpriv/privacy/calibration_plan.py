"""One scale for a whole plan of pure releases, so that the run's accountants spend the target.

A learner that composes pure-ε releases (the exponential mechanism's
bounded-range events, Laplace releases, pure events) fixes each release's ε
as a share of its budget. Shares that *sum* to ε certify (ε, 0)-DP by basic
composition (Dwork & Roth 2014, Thm. 3.16), but the run's ledger certifies
(ε, δ) with its PLD and RDP accountants, which compose many small releases
far tighter: bdpe_α's default plan (80 bounded-range and 21 Laplace events)
split that way is accounted at 0.22 of ε = 0.5 at δ = 1e-5, and the rest of
the budget buys no utility.

:func:`calibrate_pure_plan` keeps the plan's relative shares and solves one
scale x: every release's ε is multiplied by x (a Laplace event's noise
multiplier 1/ε divided by x), and x is the largest found
whose plan the accountants certify at or below ``target_epsilon``. "Certify"
is the ledger's own figure (:func:`fedpriv.privacy.accounting.account`): the
minimum of the PLD figure on the ledger's discretisation and the RDP figure
(bounded range as ε²/8-zCDP, Laplace at its exact RDP) at the accounting δ.
The search stops once that figure lies in [(1 − ``rtol``)·target, target];
it never returns an x above the target (never an overshoot).

ε(x) grows with x. The search is :func:`fedpriv.privacy.scale_search.largest_within`
(the one "largest x within ε" search of the package), started from ``start``
(the caller's basic-composition split, x = 1): it walks down by halves if that
overshoots (the pessimistic PLD rounds each loss up to its grid, and at tiny ε
RDP can be looser than the sum), up until it overshoots, then narrows the
bracket. Where the figure cannot reach (1 − ``rtol``)·target, :class:`PlanScale`
says why (``shortfall``): the figure jumps inside the bracket (e.g. the PLD
passes its point budget and the looser RDP figure takes over) or x reached
``max_scale``.

Results are cached (memory and disk, :mod:`fedpriv.privacy.cache`) by the
exact plan, target, δ, discretisation and tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedpriv.privacy import accounting
from fedpriv.privacy.cache import JsonCache
from fedpriv.privacy.calibration_range import CalibrationRangeError
from fedpriv.privacy.pld_size import MAX_PLD_POINTS, PLDSizeError
from fedpriv.privacy.scale_search import OutOfReach, largest_within
from fedpriv.validation import check_open_unit, check_positive

Group = accounting.Group
#: Smallest scale tried below ``start`` before the target is declared out of reach.
MIN_SCALE_RATIO = 1e-6
#: Evaluations of the plan's ε the search may spend (it needs about 4 to 8).
MAX_EVALUATIONS = 60
_CACHE = JsonCache("plan_scale", version="plan-scale-2")


@dataclass(frozen=True, kw_only=True)
class PlanScale:
    """Result of :func:`calibrate_pure_plan`.

    Attributes
    ----------
    scale : float
        x: multiply every release's ε by it.
    epsilon : float
        The certified ε at ``delta`` of the plan at ``scale`` (≤ ``target_epsilon``).
    epsilon_pld, epsilon_rdp : float
        The two accountants' figures (``epsilon`` is their minimum).
    target_epsilon, delta, rtol : float
        What was asked.
    evaluations : int
        Plan accountings the search made (0 when served from the cache).
    shortfall : str
        Empty when ``epsilon`` ≥ (1 − ``rtol``)·``target_epsilon``; else why not.
    """

    scale: float
    epsilon: float
    epsilon_pld: float
    epsilon_rdp: float
    target_epsilon: float
    delta: float
    rtol: float
    evaluations: int
    shortfall: str = ""

    @property
    def reached(self) -> bool:
        """Whether the plan spends at least (1 − ``rtol``) of the target."""
        return self.epsilon >= (1.0 - self.rtol) * self.target_epsilon


def _account(groups: list[Group], delta: float, vdi: float) -> accounting.Accounting:
    """:func:`accounting.account` without writing the search's PLDs to the disk cache."""
    try:
        eps_pld, method = accounting.pld_epsilon(groups, delta, discretization=vdi, cache=False)
    except PLDSizeError:
        eps_pld, method = math.inf, "pld:over-size-limit"
    eps_rdp = accounting.rdp_epsilon(groups, delta)
    return accounting.Accounting(
        delta=delta,
        epsilon_pld=eps_pld,
        pld_method=method,
        epsilon_rdp=eps_rdp,
        epsilon=min(eps_pld, eps_rdp),
        binding="pld" if eps_pld <= eps_rdp else "rdp",
    )


def calibrate_pure_plan(
    groups_at: Callable[[float], Sequence[Group]],
    *,
    target_epsilon: float,
    delta: float,
    discretization: float = accounting.PLD_DISCRETIZATION,
    rtol: float = 0.01,
    start: float = 1.0,
    max_scale: float = 1e6,
) -> PlanScale:
    """The largest-found scale x whose plan ``groups_at(x)`` is certified ≤ the target.

    Parameters
    ----------
    groups_at : callable
        x ↦ the plan's (event, count) groups with every release's ε multiplied by x,
        built exactly as the caller will reserve them (a Laplace event's parameter
        1/ε rounds differently when computed another way, and the PLD's grid can
        feel one ulp). x = 1: the caller's shares of ε.
    target_epsilon, delta : float
        The budget, at the ledger's accounting δ, in (0, inf) and (0, 1).
    discretization : float
        The ledger's PLD discretisation.
    rtol : float
        Aim: the certified ε in [(1 − rtol)·target, target], rtol in (0, 1).
    start : float
        First scale tried (the caller's basic-composition split: 1).
    max_scale : float
        Largest scale returned.

    Raises
    ------
    CalibrationRangeError
        Even ``start`` · :data:`MIN_SCALE_RATIO` overshoots the target.
    """
    eps_t = check_positive("target_epsilon", target_epsilon)
    dlt = check_open_unit("delta", delta)
    vdi = check_positive("discretization", discretization)
    rtol = check_open_unit("rtol", rtol)
    x0 = check_positive("start", start)
    top = check_positive("max_scale", max_scale)
    key = (
        f"{accounting.groups_key(list(groups_at(x0)))}|target={eps_t!r}|delta={dlt!r}|vdi={vdi!r}"
        f"|rtol={rtol!r}|start={x0!r}|max={top!r}"
    )
    hit = _CACHE.get(key)
    if hit is not None:
        return PlanScale(**hit, target_epsilon=eps_t, delta=dlt, rtol=rtol, evaluations=0)

    def at(x: float) -> tuple[float, accounting.Accounting]:
        acc = _account(list(groups_at(x)), dlt, vdi)
        return acc.epsilon, acc

    try:
        found = largest_within(
            at, target=eps_t, start=x0, rtol=rtol, min_x=x0 * MIN_SCALE_RATIO, max_x=top,
            max_evaluations=MAX_EVALUATIONS,
        )  # fmt: skip
    except OutOfReach as err:
        raise CalibrationRangeError(
            f"target_epsilon={eps_t!r} at delta={dlt!r}: even the plan scaled by "
            f"{err.x:.3g} is accounted above it; allowed: a larger target_epsilon"
        ) from None
    lo, lo_acc, hi, hi_acc = found.x, found.payload, found.above, found.above_payload
    evaluations = found.evaluations
    result = PlanScale(
        scale=lo,
        epsilon=lo_acc.epsilon,
        epsilon_pld=lo_acc.epsilon_pld,
        epsilon_rdp=lo_acc.epsilon_rdp,
        target_epsilon=eps_t,
        delta=dlt,
        rtol=rtol,
        evaluations=evaluations,
    )
    if not result.reached:
        result = _with_shortfall(result, hi, hi_acc, top=top, vdi=vdi)
    _CACHE.set(
        key,
        {
            "scale": result.scale,
            "epsilon": result.epsilon,
            "epsilon_pld": result.epsilon_pld,
            "epsilon_rdp": result.epsilon_rdp,
            "shortfall": result.shortfall,
        },
    )
    return result


def _with_shortfall(
    result: PlanScale,
    hi: float | None,
    hi_acc: accounting.Accounting | None,
    *,
    top: float,
    vdi: float,
) -> PlanScale:
    """``result`` with the reason it spends less than (1 − rtol) of the target."""
    spent = f"the plan spends ε={result.epsilon:.6g} of {result.target_epsilon:g}"
    if hi is None:
        why = f"{spent} at the largest scale allowed, {top:g}"
    elif hi_acc.pld_method == "pld:over-size-limit":
        why = (
            f"{spent}: above scale {result.scale:.6g} its PLD passes {MAX_PLD_POINTS} points "
            f"at discretisation {vdi:g} and the RDP figure alone, {hi_acc.epsilon_rdp:.6g}, "
            f"is over the target"
        )
    else:
        why = (
            f"{spent}: its accounted ε jumps from {result.epsilon:.6g} to "
            f"{hi_acc.epsilon:.6g} between scales {result.scale:.9g} and {hi:.9g}"
        )
    return PlanScale(**{**result.__dict__, "shortfall": why})


def clear_memory_cache() -> None:
    """Forget in-memory plan scales (the disk layer stays)."""
    _CACHE.clear_memory()
