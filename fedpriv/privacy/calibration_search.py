"""The root search of a noise calibration: bracket, solve and refine in log z.

``gap(log z) = log ε(z) − log ε_target`` decreases as z grows (more noise,
less privacy loss). :func:`bracket_and_solve` walks geometrically from a
start until the sign changes, then Brent-solves (Brent 1973); :func:`refine`
takes secant steps from a nearby root on a finer PLD. Both keep to the
calibratable range of :mod:`fedpriv.privacy.calibration_range`: ``gap``
raises :class:`~fedpriv.privacy.pld_size.PLDSizeError` below the PLD-size
floor, and the walk never passes :data:`MAX_NOISE_MULTIPLIER`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy import optimize

from fedpriv.privacy.calibration_range import MAX_NOISE_MULTIPLIER
from fedpriv.privacy.pld_size import PLDSizeError

_LOG_Z_MAX = math.log(MAX_NOISE_MULTIPLIER)
#: Last-resort floor of the walk down, for event families whose PLD never outgrows its budget.
_LOG_Z_MIN = math.log(1e-6)
#: Bisection steps locating the PLD-size floor between a too-large and a fitting z.
_FLOOR_STEPS = 8


class OutOfRange(Exception):
    """The search left the calibratable range: ``kind`` is "floor" or "ceiling"."""

    def __init__(self, kind: str, log_z: float = math.nan, g: float = math.nan) -> None:
        super().__init__(kind)
        self.kind, self.log_z, self.g = kind, log_z, g


def fits(gap: Callable[[float], float], x: float) -> float | None:
    """``gap(x)``, or None when the PLD at ``x`` is over its point budget (too little noise)."""
    try:
        return gap(x)
    except PLDSizeError:
        return None


def bracket_and_solve(
    gap: Callable[[float], float], start: float, *, step: float, rtol: float
) -> tuple[float, float]:
    """Smallest-found log z with ``gap(log z) ≤ 0``, ``gap`` increasing as z falls.

    Walks geometrically from ``start`` until the sign changes, Brent-solves
    inside the bracket, then steps up until the answer is on the safe side
    (Brent may stop on either side of the root). Returns the root and the
    bracket's secant slope of ``gap`` in log z.

    ``gap`` raises :class:`PLDSizeError` below the floor (too little noise
    for the PLD's point budget). Walking up from there continues until the
    PLD fits; walking down into it bisects for the floor, and raises
    :class:`OutOfRange` ("floor") if the target is met even there. Walking
    up past :data:`MAX_NOISE_MULTIPLIER` raises :class:`OutOfRange` ("ceiling").
    """
    hi, g_hi = start, fits(gap, start)
    bad = None  # largest log z known over the point budget
    while g_hi is None:  # over the budget at the start: more noise
        bad, hi = hi, hi + step
        step *= 2.0
        if hi > _LOG_Z_MAX:
            raise OutOfRange("ceiling")
        g_hi = fits(gap, hi)
    lo, g_lo = hi, g_hi
    if g_hi > 0:  # too little noise: walk up (more noise never grows the PLD)
        while g_hi > 0:
            lo, g_lo = hi, g_hi
            hi += step
            if hi > _LOG_Z_MAX:
                raise OutOfRange("ceiling")
            g_hi = gap(hi)
            step *= 2.0
    else:  # enough noise: walk down until the sign changes or the floor is reached
        while g_lo <= 0:
            hi, g_hi = lo, g_lo
            if bad is None:
                lo -= step
                step *= 2.0
                if lo < _LOG_Z_MIN:
                    raise OutOfRange("floor", hi, g_hi)
                g = fits(gap, lo)
                if g is None:
                    bad, lo, g_lo = lo, hi, g_hi
                    continue
                g_lo = g
                continue
            for _ in range(_FLOOR_STEPS):  # bisect between the floor and hi
                mid = 0.5 * (bad + hi)
                g = fits(gap, mid)
                if g is None:
                    bad = mid
                elif g > 0:
                    lo, g_lo = mid, g
                    break
                else:
                    hi, g_hi = mid, g
            else:
                raise OutOfRange("floor", hi, g_hi)
    slope = (g_hi - g_lo) / (hi - lo)
    if g_hi == 0.0:
        return hi, slope
    root = optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=rtol)
    while root < hi and gap(root) > 0:
        root = min(hi, root + rtol * max(1.0, abs(root)))
    return root, slope


def refine(
    gap: Callable[[float], float], start: float, slope: float, *, rtol: float
) -> float | None:
    """Secant refinement from a nearby start: the smallest safe point, or None.

    ``gap`` is smooth and nearly linear in log z near the root, so a few
    secant steps seeded with the coarse pass's slope reach ``rtol``; the
    answer is the smallest evaluated point with ``gap ≤ 0``.
    """
    g = fits(gap, start)
    if g is None:
        return None
    x = start
    safe = [x] if g <= 0 else []
    for _ in range(6):
        if slope >= 0 or not math.isfinite(slope):
            return None
        x_new = x - g / slope
        # Aim a hair to the safe side so the last step lands below target.
        x_new += 0.5 * rtol * max(1.0, abs(x_new))
        g_new = fits(gap, x_new)
        if g_new is None:  # past the point budget: keep what is safe so far
            break
        if g_new <= 0:
            safe.append(x_new)
        if x_new != x:
            slope = (g_new - g) / (x_new - x)
        converged = abs(x_new - x) <= rtol * max(1.0, abs(x_new))
        x, g = x_new, g_new
        if converged and safe:
            break
    return min(safe) if safe else None
