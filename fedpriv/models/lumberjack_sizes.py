"""Lumberjack's automatic forest size: trees and depth from the public record bound.

Why. A node splits only when its noisy count passes the sparse threshold τ
(Lebeda et al., Algorithm 2: τ = gate + 1 + Δ), and τ grows with the number m
of threshold queries a record can enter, m = k·Σ_s (1 + ⌊log₂ h_s⌋) (Theorem 6
with Lemma 3 per stage): with the paper's k = 30 trees at depth 49 (seven
stages of 7 levels), m = 630. On Adult (n = 26,049) that leaves τ ≈ 1,605 at
ε = 0.5, n/τ ≈ 16, and the trees grow. On Heart (a public bound of 640
records, 391 rows) the same plan has τ ≈ 1,605 at ε = 0.5 and 442 at ε = 2:
no node can pass at 0.5, whatever the data (the forest is single leaves and
predicts the class rates), and at ε = 2 only the root sometimes does (sd of
the predictions < 0.01). Depth beyond the levels the records can fill and
trees beyond what the structure's ε affords only raise τ.

The rule. Let N be the public bound on all records (``StrategyContext.n_records``:
clients × the declared ``max_records``, or a released count's upper bound;
never the exact count). A plan (k, d) is *growable* when

    N ≥ :data:`GROWTH_RATIO` · τ(k, d),

i.e. a balanced tree over N records could still split at depth
log₂ :data:`GROWTH_RATIO`. The plan is the first growable one on a ladder
ordered by decreasing m (:func:`size_ladder`): the paper's (30, 49), then one
stage fewer at a time down to one stage, then fewer trees at one stage down
to :data:`MIN_AUTO_TREES`; if none is growable, the last (the leanest). Depth
goes first: levels a record cannot reach cost queries and no accuracy, while
fewer trees give a rougher average of random partitions. Fewer than
:data:`MIN_AUTO_TREES` trees lower τ further but the average of so few random
partitions is too rough to pay for it (measured below). A value the user
sets is kept: only the settings left at 0 (automatic) move.

Which N. A declared bound is used as it is. Without one, an in-process fit
releases the record count (ñ = n + Laplace(1/ε_c), ε_c = 1 % of ε;
:mod:`fedpriv.privacy.record_count`) and its every *bound* (codec range, caps,
sensitivities) is the count's upper bound U = ñ + b·ln(1/2p), which n exceeds
with probability p = 1e-9: U lies about 20 Laplace scales, ≈ 2,000/ε records,
above ñ. That is the right side to err on for a bound and the wrong one for
this rule, which asks whether the records can *fill* a plan: on Heart (391
training rows) U ≈ 2,400 at ε = 1, the rule took (30, 21) with τ ≈ 542 > n,
no node ever passed, and every fit predicted the class rates (mean Brier 0.2504
over 10 fits, the base rate's 0.2504). So with a released count the rule
reads N = ñ itself (:func:`sizing_records`; post-processing of the release, so
no exact count decides anything), capped at U; the bounds still use U. Measured
(``fedpriv.experiments.heart_calibration``, 10 injected keys, Heart as the
README's quickstart fits it), mean Brier at ε = 1 / 2 / 4 / 8 before → after:
0.2504 / 0.2215 / 0.1896 / 0.1730 → 0.1985 / 0.1831 / 0.1743 / 0.1659.

Every input is public: (ε, δ) and the settings give τ(k, d) by the
calibration the learner itself uses, and N is public by declaration or
release. Measured on Heart (N = 640; mean Brier of 8 fits with fresh keys
against the base rate's 0.2504, ``fedpriv.experiments.heldout``'s split): at ε = 0.5
(30, 49) predicts a constant (0.254 over 10 fits), (5, 7) reaches 0.222 (7
of 8 below the base rate), (10, 7) 0.231 and (3, 7) 0.266; at ε = 2 (30, 49)
has sd 0.010 (10 fits), (30, 7) 0.190 and (10, 7) 0.175. The ratio 6 or 8
instead of 4 moved Heart and Framingham by less than the spread between
fits. On Adult, BRFSS and Diabetes 130-US (N/τ ≥ 16 at ε ≥ 0.5) the paper's
plan is growable and kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fedpriv.validation import check_count

#: A setting of 0 (``trees`` or ``depth``) asks for the automatic value.
AUTO = 0
#: The largest automatic plan: the paper's 30 trees, at this learner's depth 49.
PAPER_TREES, PAPER_DEPTH = 30, 49
#: Fewest trees the rule picks (module docstring).
MIN_AUTO_TREES = 5
#: N ≥ GROWTH_RATIO · τ: a balanced tree over the public bound splits two levels deep.
GROWTH_RATIO = 4.0


def size_ladder(*, trees: int, depth: int, stage_height: int) -> list[tuple[int, int]]:
    """The candidate (trees, depth) plans by decreasing m; 0 (:data:`AUTO`) moves, any other
    value stays.

    Depths are whole stages below :data:`PAPER_DEPTH` (its stage count − 1 down to one
    stage of ``stage_height`` levels); trees run from :data:`PAPER_TREES` down to
    :data:`MIN_AUTO_TREES` at the shallowest depth.
    """
    check_count("trees", trees, minimum=0)
    check_count("depth", depth, minimum=0)
    h = check_count("stage_height", stage_height)
    stages = math.ceil(PAPER_DEPTH / h)
    depths = [PAPER_DEPTH] + [s * h for s in range(stages - 1, 0, -1)] if depth == AUTO else [depth]
    counts = range(PAPER_TREES, MIN_AUTO_TREES - 1, -1) if trees == AUTO else [trees]
    first = counts[0]
    return [(first, d) for d in depths] + [(k, depths[-1]) for k in counts[1:]]


def sizing_records(n_records: float, released_count: float | None = None) -> float:
    """The N the rule reads: the public bound ``n_records``, or, when that bound is a
    released count's upper bound, the released count ñ (``released_count``) clipped to
    [1, ``n_records``] (module docstring, "Which N")."""
    if released_count is None:
        return n_records
    return min(float(n_records), max(1.0, float(released_count)))


def auto_size(
    *,
    n_records: float,
    tau: Callable[[int, int], float],
    trees: int,
    depth: int,
    stage_height: int,
) -> tuple[int, int]:
    """The first growable plan on :func:`size_ladder` (module docstring), or its last.

    ``tau(trees, depth)``: the sparse threshold's τ for that plan (public: the
    calibration at the structure's (ε₁, δ₁)); it must not fall as the plan grows
    (τ rises with m), which lets the ladder be searched by bisection.
    ``n_records``: the public bound N.
    """
    if not (n_records > 0 and math.isfinite(n_records)):
        raise ValueError(f"n_records must be a positive, finite public bound; got {n_records!r}")
    ladder = size_ladder(trees=trees, depth=depth, stage_height=stage_height)
    lo, hi = 0, len(ladder) - 1  # the answer lies in [lo, hi]; hi: the leanest, the fallback
    while lo < hi:
        mid = (lo + hi) // 2
        if n_records >= GROWTH_RATIO * tau(*ladder[mid]):
            hi = mid
        else:
            lo = mid + 1
    return ladder[lo]
