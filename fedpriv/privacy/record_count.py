"""A released record count: what a learner may use when no bound on its rows is declared.

No exact row count may decide anything (the forest's automatic depth was a function
of n: 127 rows gave depth 1, 128 rows depth 2, a perfect membership test). A caller
either declares a public bound on the records per client (``max_records``), or the
fit first releases the total count through the ledger,

    ñ = n + Laplace(Δ₁/ε_c),   Δ₁ = 1 (add/remove one record),

with ε_c = :data:`COUNT_SHARE` · ε taken out of the learner's ε, so the fit's total
stays ε: the ledger records the count as (ε_c, 0)-DP and composes it by basic
composition (ε_c adds to the learner's (ε − ε_c, δ); :func:`count_event`). Every
size-dependent choice then uses the high-probability upper bound

    U = ⌈ñ + b · ln(1 / (2p))⌉,   b the Laplace scale actually drawn,

which n exceeds with probability p = :data:`COUNT_TAIL` (P(L < −t) = ½e^{−t/b}):
the forest's depth, the bounds behind sensitivities and range checks, the
normalisers and the codec's per-client bound (each client holds at most n ≤ U
records). Everything derived is post-processing of ñ. U is capped at the public
:data:`MAX_COUNT` (the codec's range). In the event n > U (probability ≤ p, or a fit
past the cap) the fit refuses a client holding more than U rows, naming the bound only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fedpriv.privacy.events import ApproxDpEvent
from fedpriv.privacy.mechanisms import LaplaceMechanism
from fedpriv.privacy.randomness import check_private, rounding_margin
from fedpriv.validation import check_count, check_positive

if TYPE_CHECKING:
    from fedpriv.privacy.ledger import PrivacyLedger

#: Share of the fit's ε spent on the record count (the learner gets the rest).
COUNT_SHARE = 0.01
#: Probability that the true count exceeds the released upper bound.
COUNT_TAIL = 1e-9
#: Public ceiling on a released bound: at ε = 1e-6 the count's tail alone is ~2e9
#: records, past what the secure-aggregation codec's 2^63 range holds. A fit of more
#: rows than this declares ``max_records`` (else it is refused, naming the bound only).
MAX_COUNT = 10**7
#: The ledger label of the count's release.
COUNT_LABEL = "record count (no max_records declared)"


def count_mechanism(epsilon: float, unit_records: int = 1) -> LaplaceMechanism:
    """The count's Laplace mechanism at ``epsilon`` (Δ₁ = 1; a unit's m records: m)."""
    m = check_count("unit_records", unit_records)
    return LaplaceMechanism(l1_sensitivity=float(m), epsilon=check_positive("epsilon", epsilon))


def count_upper_bound(noisy: float, mechanism: LaplaceMechanism, tail: float = COUNT_TAIL) -> int:
    """U = ⌈ñ + b·ln(1/(2p))⌉ in [1, :data:`MAX_COUNT`]: P(n > U) ≤ ``tail`` for any
    n ≤ :data:`MAX_COUNT` (module docstring).

    b is the scale ``apply`` draws, (Δ₁ + γ)/ε, which covers the grid's rounding.
    """
    if not 0.0 < tail < 0.5:
        raise ValueError(f"tail must lie in (0, 0.5); got {tail!r}")
    scale = (mechanism.l1_sensitivity + rounding_margin(1, "l1")) / mechanism.epsilon
    upper = float(noisy) + scale * math.log(1.0 / (2.0 * tail))
    return int(min(max(1.0, math.ceil(upper)), MAX_COUNT))


def count_event(epsilon: float) -> ApproxDpEvent:
    """The count's event: (ε_c, 0)-DP, composed by basic composition (ε adds).

    Additive on purpose: the learner is calibrated to ε − ε_c on its own, and a PLD
    composition of the two, on the ledger's discretisation, can exceed their sum at
    tiny ε (ε = 1e-6: 1.47e-6), which would refuse an honest fit.
    """
    return ApproxDpEvent(epsilon=float(epsilon), delta=0.0, mechanism="laplace record count")


def release_count(
    ledger: PrivacyLedger,
    n: int,
    *,
    epsilon: float,
    rng: np.random.Generator,
    unit_records: int = 1,
) -> tuple[float, int]:
    """Release n through ``ledger`` at ``epsilon`` (pure, Laplace); (ñ, its upper bound U).
    ``unit_records``: m with unit-level privacy (the rows already bounded per unit: one
    unit moves n by at most m).

    The event is recorded (budget checked) before the noise is drawn."""
    mechanism = count_mechanism(epsilon, unit_records)
    value = np.array([float(check_count("n", n, minimum=0))])
    check_private("rng", rng)
    ledger.spend(count_event(epsilon), label=COUNT_LABEL)
    noisy = float(mechanism.apply(value, rng=rng).ravel()[0])
    return noisy, count_upper_bound(noisy, mechanism)
