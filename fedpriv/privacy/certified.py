"""The largest parameter the run's own ledger certifies at a target (ε, δ).

:func:`largest_certified` bisects a parameter calibrated by a looser or a
different analysis (Lemma 9's zCDP conversion, the analytic Gaussian) down to
one the ledger's accountants accept. It needs only :mod:`accounting`, not the
PLD search of :mod:`fedpriv.privacy.calibration`, so it lives apart (and is
re-exported there).
"""

from __future__ import annotations

from collections.abc import Callable

from dp_accounting import dp_event

from fedpriv.privacy import accounting
from fedpriv.validation import check_positive


def largest_certified(
    groups_at: Callable[[float], list[tuple[dp_event.DpEvent, int]]],
    *,
    epsilon: float,
    delta: float,
    upper: float,
    iterations: int = 40,
) -> float:
    """Largest x ∈ (0, ``upper``] whose events the ledger's accountants certify at (ε, δ).

    For parameters calibrated by a looser or a different analysis (Lemma 9's
    zCDP conversion, the analytic Gaussian) that the run's own ledger must
    still accept: ``groups_at(x)`` gives the run's ``(event, count)`` groups
    for parameter x, and ε(x) must grow with x. ``upper`` itself is returned
    when it is certified; otherwise bisection, never returning an x whose ε
    exceeds the target.
    """
    check_positive("epsilon", epsilon)
    hi = check_positive("upper", upper)

    def ok(x: float) -> bool:
        return accounting.account(groups_at(x), delta).epsilon <= epsilon

    if ok(hi):
        return hi
    lo = 0.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    if lo <= 0.0:
        raise ValueError(f"no parameter in (0, {upper}] fits ε = {epsilon} at δ = {delta}")
    return lo
