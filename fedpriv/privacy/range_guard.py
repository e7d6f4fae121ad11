"""The range check of a released sum: honest sums are bounded, so a far-out one is discarded.

Every coordinate of an honest round's sum is bounded by public quantities: one
record adds at most ``record_bound`` to a coordinate (the query's clipping bound),
there are at most ``n_records`` records (a public bound) and each is in the round's
Poisson sample with probability q (the query's ``sampling_rate``), so the sample
holds at most B records, B the upper (1 − p) quantile of Binomial(n_records, q)
(:func:`binomial_upper`), and |Σ_j| ≤ ``record_bound · B``. Ignoring q would let a
forged sum 1/q times an honest one (20× at boosting's q = 0.05) through.

A hostile participant can break the bound: a value past the codec's bound, a
vector wrapped in the 2^64 ring, an unmasked or replayed upload whose masks do
not cancel. Under secure aggregation no single
upload can be inspected, so the check is on the sum.

**Why on the noisy sum.** Deciding on the *exact* sum would be control flow on
private data that the peers observe (the round's model update is or is not
there): a hostile client could choose its own contribution so that the decision
flips on one honest record, and learn that record from the abort alone. The check
therefore runs on the released, noisy value: a post-processing of a DP output,
free under the ledger's accounting (the round's event is recorded before the check;
the round is spent even when its value is discarded, which is honest).

**Margin.** An honest noisy coordinate exceeds the bound only through the noise.
For d coordinates of N(0, σ²) noise the union bound gives
P(max_i |Z_i| > σ·m) ≤ 2d·exp(−m²/2), so with m = √(2 ln(2d/p)) an honest round is
discarded with probability ≤ p; for Laplace(b) noise P(max_i |L_i| > b·t) ≤ d·e^{−t},
so t = ln(d/p). The default p = 1e-9 per round: an honest 1,000-round run loses a
round with probability ≤ 1e-6. The sample-size bound B takes its own p (the same
default), so an honest round is discarded with probability ≤ 2p. This module
never imports the accountant: a ClientApp imports the engine that catches
:class:`ReleaseOutOfRange`.
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.privacy.randomness import rounding_margin

#: Probability that an honest round's noisy sum fails the check (union bound, per round).
FALSE_ALARM = 1e-9


class ReleaseOutOfRange(RuntimeError):
    """A released sum lies outside what honest participants can produce.

    The round's event is already in the ledger (its noise was drawn); the
    caller must discard the value, as for an aborted round, and release nothing
    derived from it. Raised before the strategy changes any state.
    """


def gaussian_margin(std: float, d: int, false_alarm: float = FALSE_ALARM) -> float:
    """σ·√(2 ln(2d/p)): P(some honest coordinate's N(0, σ²) noise exceeds it) ≤ p."""
    return float(std) * math.sqrt(2.0 * math.log(2.0 * max(d, 1) / false_alarm))


def laplace_margin(scale: float, d: int, false_alarm: float = FALSE_ALARM) -> float:
    """b·ln(d/p): P(some honest coordinate's Laplace(b) noise exceeds it) ≤ p."""
    return float(scale) * math.log(max(d, 1) / false_alarm)


def noise_margin(mechanism, d: int, false_alarm: float = FALSE_ALARM) -> float:
    """The margin of :func:`gaussian_margin` or :func:`laplace_margin` for ``mechanism``.

    The std (scale) is raised by one part in 10^6 to cover the grid's rounding
    margin γ√d (γd in L1) that ``apply`` adds to the sensitivity (γ = 2^-32).
    γd outgrows that past d ≈ 4,300 at Δ₁ = 1 (a random forest's leaf counts
    reach 10^6), so a Laplace mechanism that states Δ₁ and ε gets the scale
    ``apply`` draws, (Δ₁ + γd)/ε, whenever it is the larger.
    """
    if hasattr(mechanism, "std"):
        return gaussian_margin(mechanism.std * (1 + 1e-6), d, false_alarm)
    if hasattr(mechanism, "scale"):
        scale = mechanism.scale * (1 + 1e-6)
        l1, eps = getattr(mechanism, "l1_sensitivity", None), getattr(mechanism, "epsilon", None)
        if l1 is not None and eps is not None:
            scale = max(scale, (l1 + rounding_margin(d, "l1")) / eps)
        return laplace_margin(scale, d, false_alarm)
    raise TypeError(f"no noise margin for {type(mechanism).__name__}")


def binomial_upper(n: int, q: float, false_alarm: float = FALSE_ALARM) -> int:
    """An integer B with P(Binomial(n, q) > B) ≤ ``false_alarm`` (Chernoff's bound).

    P(X ≥ n·t) ≤ exp(−n·KL(t ‖ q)) for t ≥ q (Chernoff 1952; Hoeffding 1963,
    eq. 2.1), KL the Bernoulli relative entropy; B = ⌈n·t⌉ for the smallest t
    (bisection, from above) with n·KL(t ‖ q) ≥ ln(1/p). Sound for every n and q, in
    plain maths: a ClientApp imports this module without scipy.
    """
    n = int(n)
    if n < 0 or not 0.0 <= q <= 1.0 or not 0.0 < false_alarm < 1.0:
        raise ValueError(
            f"binomial_upper: n must be >= 0, q in [0, 1], false_alarm in (0, 1); "
            f"got n={n!r}, q={q!r}, false_alarm={false_alarm!r}"
        )
    if q >= 1.0 or n == 0:
        return n
    if q <= 0.0:
        return 0
    target = math.log(1.0 / false_alarm)
    if n * math.log(1.0 / q) < target:  # even P(X = n) = q^n exceeds p: no useful bound
        return n

    def kl(t: float) -> float:
        head = t * math.log(t / q) if t > 0 else 0.0
        tail = (1 - t) * math.log((1 - t) / (1 - q)) if t < 1 else 0.0
        return head + tail

    lo, hi = q, 1.0  # n·KL(lo) = 0 < target ≤ n·KL(hi); KL increases on [q, 1]
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if n * kl(mid) >= target:
            hi = mid
        else:
            lo = mid
    return min(n, math.ceil(n * hi))  # hi: n·KL(hi) ≥ target, so P(X ≥ n·hi) ≤ p


def sum_bound(record_bound: float, n_records: int | None, *, sampling_rate: float) -> float | None:
    """|Σ_j| ≤ record_bound · B for every coordinate of an honest sum, except with
    probability ``FALSE_ALARM``: B = :func:`binomial_upper` (n_records, q), the most
    records an honest Poisson(q) sample of at most ``n_records`` holds.

    ``sampling_rate`` q is the query's; q = 1 (every record: leaf counts, the
    evaluation) gives record_bound · n_records. ``None`` without a public record
    bound (a strategy built directly, outside a runtime that knows it): no check.
    """
    if n_records is None:
        return None
    return float(record_bound) * float(binomial_upper(int(n_records), float(sampling_rate)))


def check_release(noisy: np.ndarray, *, bound: float | None, margin: float, label: str) -> None:
    """Raise :class:`ReleaseOutOfRange` if any |noisy_i| > bound + margin.

    ``bound`` ``None`` disables the check. NaN counts as out of range.
    """
    if bound is None:
        return
    limit = bound + margin
    arr = np.asarray(noisy, dtype=np.float64)
    if arr.size and not np.abs(arr).max() <= limit:  # NaN fails ``<=`` too
        i = int(np.nanargmax(np.abs(arr))) if np.isfinite(arr).any() else 0
        raise ReleaseOutOfRange(
            f"{label}: released coordinate {i} is {float(arr.flat[i]):.6g}, beyond what "
            f"honest participants can produce ({bound:.6g} plus a noise margin of "
            f"{margin:.6g}): the round's value is discarded"
        )
