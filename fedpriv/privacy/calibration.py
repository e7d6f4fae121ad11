"""Noise calibration that never overshoots the target ε.

* :func:`analytic_gaussian_noise_multiplier` — one Gaussian release, exact
  (Balle & Wang 2018, "Improving the Gaussian mechanism", Thm. 8).
* :func:`calibrate_noise_multiplier` — any event family ``z ↦ DpEvent`` whose ε
  decreases in ``z``: bracket and Brent-solve ε(z) = target on a 1e-3 PLD, then
  re-check the answer on the ledger's 1e-4 PLD and nudge ``z`` up until the
  re-check holds. Pessimistic PLDs upper-bound ε at any discretisation, so the
  answer is also what the ledger will certify.
* :func:`calibrate_gaussian_noise_multiplier` — the common case: a
  Poisson-subsampled Gaussian composed T times, with a central-limit initial
  guess (Dong, Roth & Su 2022, Thm. 6 / Cor. 4) and a memory + disk cache keyed
  by the exact inputs.

Every PLD built stays within :data:`~fedpriv.privacy.pld_size.MAX_PLD_POINTS`;
inputs no noise multiplier can serve are refused fast with a
:class:`~fedpriv.privacy.calibration_range.CalibrationRangeError` (the
supported range is stated once, in :mod:`fedpriv.privacy.calibration_range`;
the root search is :mod:`fedpriv.privacy.calibration_search`).

``experiments/calibration_benchmark.py`` times this against dp-accounting's
``calibrate_dp_mechanism``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from dp_accounting import dp_event
from scipy import optimize, stats

from fedpriv.privacy import accounting
from fedpriv.privacy.analytic_gaussian import (  # noqa: F401 - re-exported
    analytic_gaussian_noise_multiplier,
    gaussian_delta,
    log_gaussian_delta,
)
from fedpriv.privacy.cache import JsonCache
from fedpriv.privacy.calibration_range import (
    CalibrationRangeError,
    ceiling_message,
    check_gaussian_plan,
    floor_message,
    search_limit,
)
from fedpriv.privacy.calibration_search import OutOfRange, bracket_and_solve, refine
from fedpriv.privacy.certified import largest_certified  # noqa: F401 - re-exported
from fedpriv.privacy.pld import flatten
from fedpriv.privacy.pld_size import PLDSizeError
from fedpriv.validation import (
    check_count,
    check_open_unit,
    check_positive,
    check_probability,
)

#: Discretisation used while searching; coarser is faster and still an upper bound.
SEARCH_DISCRETIZATION = 1e-3
_RTOL = 1e-4
_NUDGE = 2e-4
_SLACK = 5e-4
_MAX_TIGHTEN = 3
_MAX_NUDGES = 200
_CALIBRATION_VERSION = "calibration-1"
_CACHE = JsonCache("calibration", version=_CALIBRATION_VERSION)


# --------------------------------------------------------------------------
# composed, subsampled: PLD calibration
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    """Outcome of a calibration.

    Attributes
    ----------
    noise_multiplier : float
        The calibrated z.
    epsilon : float
        ε of the calibrated event at ``target_delta`` on the ``discretization``
        PLD (≤ ``target_epsilon``).
    evaluations : int
        PLD evaluations spent (0 when served from the cache).
    seconds : float
        Wall time of this call.
    """

    noise_multiplier: float
    epsilon: float
    target_epsilon: float
    target_delta: float
    discretization: float
    evaluations: int
    seconds: float
    from_cache: bool


def _pld_eps(
    make_event: Callable[[float], dp_event.DpEvent],
    z: float,
    delta: float,
    vdi: float,
    *,
    cache: bool,
    max_points: int,
) -> float:
    eps, _ = accounting.pld_epsilon(
        flatten(make_event(z)), delta, discretization=vdi, cache=cache, max_points=max_points
    )
    return eps


def calibrate_noise_multiplier(
    make_event: Callable[[float], dp_event.DpEvent],
    *,
    target_epsilon: float,
    target_delta: float,
    initial_guess: float = 1.0,
    coarse_discretization: float = 1e-2,
    discretization: float = accounting.PLD_DISCRETIZATION,
) -> Calibration:
    """Smallest-found z with ε(make_event(z)) ≤ target on the ``discretization`` PLD.

    ``make_event`` must give an ε that decreases as z grows (true of every
    noise multiplier). Three passes, each an upper bound on ε (pessimistic
    PLDs): bracket and solve on a ``coarse_discretization`` PLD, refine on a 1e-3 PLD to a relative
    tolerance of ``_RTOL`` in z, then check on the ``discretization`` PLD and
    nudge z up by ``_NUDGE`` until the check holds.

    Every PLD stays within :data:`~fedpriv.privacy.pld_size.MAX_PLD_POINTS`
    at ``discretization`` (a coarser search PLD gets the same loss width:
    :func:`~fedpriv.privacy.calibration_range.search_limit`). A target met
    only below that floor, or by no z up to ``MAX_NOISE_MULTIPLIER``, raises
    :class:`~fedpriv.privacy.calibration_range.CalibrationRangeError`
    naming ``target_epsilon``, its value and the allowed range.
    """
    t0 = time.perf_counter()
    eps_t = check_positive("target_epsilon", target_epsilon)
    dlt = check_open_unit("target_delta", target_delta)
    z0 = check_positive("initial_guess", initial_guess)
    evaluations = 0

    def gap_at(vdi: float) -> Callable[[float], float]:
        seen: dict[float, float] = {}  # Brent re-evaluates its bracket ends
        limit = search_limit(vdi, discretization)

        def gap(log_z: float) -> float:
            nonlocal evaluations
            if log_z not in seen:
                evaluations += 1
                eps = _pld_eps(make_event, math.exp(log_z), dlt, vdi, cache=False, max_points=limit)
                seen[log_z] = math.log(max(eps, 1e-300)) - math.log(eps_t)
            return seen[log_z]

        return gap

    def final(z: float) -> float:
        nonlocal evaluations
        evaluations += 1
        return _pld_eps(make_event, z, dlt, discretization, cache=True, max_points=limit_final)

    limit_final = search_limit(discretization, discretization)
    try:
        coarse, slope = bracket_and_solve(
            gap_at(coarse_discretization), math.log(z0), step=0.15, rtol=1e-3
        )
        # The finer root lies a little below the coarse one: refine from there,
        # falling back to a bracketed solve if the secant steps misbehave.
        fine_gap = gap_at(SEARCH_DISCRETIZATION)
        fine = refine(fine_gap, coarse, slope, rtol=_RTOL)
        if fine is None:
            fine, _ = bracket_and_solve(fine_gap, coarse, step=0.01, rtol=_RTOL)
        z = z_search = math.exp(fine)
        eps = final(z)
    except OutOfRange as out:
        if out.kind == "ceiling":
            raise CalibrationRangeError(
                ceiling_message(target_epsilon=eps_t, target_delta=dlt)
            ) from None
        raise CalibrationRangeError(
            floor_message(
                target_epsilon=eps_t,
                noise_multiplier=math.exp(out.log_z),
                epsilon=eps_t * math.exp(out.g),
                discretization=discretization,
            )
        ) from None
    except PLDSizeError as exc:  # the band just above the floor: the final grid is too fine
        raise CalibrationRangeError(
            f"target_epsilon={eps_t!r} needs so little noise that its PLD at discretisation "
            f"{discretization:g} is over the point budget ({exc}); allowed: a smaller "
            f"target_epsilon"
        ) from None
    nudges = 0
    while eps > eps_t:
        nudges += 1
        if nudges > _MAX_NUDGES:
            raise RuntimeError(
                f"calibration could not meet ε={eps_t} at discretisation {discretization} "
                f"(z={z_search} gives {eps})"
            )
        z *= 1.0 + _NUDGE
        eps = final(z)
    # The coarser search over-estimates ε by up to ~vdi·√T, which is felt at
    # small ε. Close the slack with secant steps on the fine PLD itself (cheap
    # exactly where the slack is large: large z, narrow loss range), keeping a
    # step only if the fine check still holds.
    prev: tuple[float, float] | None = None
    for _ in range(_MAX_TIGHTEN):
        if nudges or eps >= eps_t * (1.0 - _SLACK):
            break
        if prev is None:
            # Assume |d log ε / d log z| ≤ 2 so the first step rarely overshoots.
            z_try = z * (eps / eps_t) ** 0.5
        else:
            slope = (math.log(prev[1]) - math.log(eps)) / (math.log(prev[0]) - math.log(z))
            if slope >= 0 or not math.isfinite(slope):
                break
            step = (math.log(eps_t) - math.log(eps)) / slope
            z_try = z * math.exp(step * (1.0 - 1e-3))
        try:
            eps_try = final(z_try)
        except PLDSizeError:  # tightening would pass the point budget: keep z
            break
        if eps_try > eps_t:
            break
        prev = (z, eps)
        z, eps = z_try, eps_try
    return Calibration(
        noise_multiplier=z,
        epsilon=eps,
        target_epsilon=eps_t,
        target_delta=dlt,
        discretization=discretization,
        evaluations=evaluations,
        seconds=time.perf_counter() - t0,
        from_cache=False,
    )


def subsampled_gaussian_event(
    noise_multiplier: float, *, sampling_probability: float, steps: int
) -> dp_event.DpEvent:
    """``steps`` compositions of a Gaussian on a Poisson sample at rate ``q``."""
    inner: dp_event.DpEvent = dp_event.GaussianDpEvent(noise_multiplier)
    if sampling_probability < 1.0:
        inner = dp_event.PoissonSampledDpEvent(sampling_probability, inner)
    return dp_event.SelfComposedDpEvent(inner, steps) if steps > 1 else inner


@functools.lru_cache(maxsize=1024)
def _clt_guess(eps: float, delta: float, q: float, steps: int) -> float:
    """Noise multiplier from the CLT: T·q²(e^{1/z²}−1) = μ² (Dong, Roth & Su 2022, Cor. 4).

    Memoised: it is evaluated before the calibration cache is consulted, and
    its root search (≈ 3 ms) dominated a cache hit, i.e. every small fit.
    """

    def gdp_gap(mu: float) -> float:
        # δ(ε) of μ-GDP (ibid., Cor. 1).
        d = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
        return d - delta

    try:
        mu = optimize.brentq(gdp_gap, 1e-4, 50.0, xtol=1e-6)
        return 1.0 / math.sqrt(math.log1p(mu**2 / (steps * q * q)))
    except (ValueError, OverflowError, ZeroDivisionError):
        return 1.0


def calibrate_gaussian_noise_multiplier(
    *,
    target_epsilon: float,
    target_delta: float,
    sampling_probability: float,
    steps: int,
    discretization: float = accounting.PLD_DISCRETIZATION,
) -> Calibration:
    """Noise multiplier z of ``steps`` Poisson(q)-subsampled Gaussians for (ε, δ).

    Parameters
    ----------
    target_epsilon : float
        In (0, inf).
    target_delta : float
        In (0, 1).
    sampling_probability : float
        Poisson record-sampling rate q, in (0, 1].
    steps : int
        Number of compositions T, ≥ 1.
    discretization : float
        PLD discretisation of the final check (the ledger's).

    Returns
    -------
    Calibration
        ``epsilon ≤ target_epsilon`` holds on the ``discretization`` PLD.

    Raises
    ------
    CalibrationRangeError
        Before any PLD is built when ``target_delta`` ≤ 1e-15 (T > 1) or
        ``1 − (1 − q)^T ≤ target_delta``; during the search when
        ``target_epsilon`` is beyond the plan's range (module
        :mod:`fedpriv.privacy.calibration_range`).
    """
    t0 = time.perf_counter()
    eps = check_positive("target_epsilon", target_epsilon)
    dlt = check_open_unit("target_delta", target_delta)
    q = check_probability("sampling_probability", sampling_probability)
    t = check_count("steps", steps)
    vdi = check_positive("discretization", discretization)
    check_gaussian_plan(
        target_delta=dlt, sampling_probability=q, steps=t, name="sampling_probability"
    )
    return cached_calibration(
        _CACHE,
        f"eps={eps!r}|delta={dlt!r}|q={q!r}|T={t}|vdi={vdi!r}",
        lambda z: subsampled_gaussian_event(z, sampling_probability=q, steps=t),
        target_epsilon=eps,
        target_delta=dlt,
        steps=t,
        initial_guess=_clt_guess(eps, dlt, q, t),
        discretization=vdi,
        started=t0,
    )


def cached_calibration(
    cache: JsonCache,
    key: str,
    event_at: Callable[[float], dp_event.DpEvent],
    *,
    target_epsilon: float,
    target_delta: float,
    steps: int,
    initial_guess: float,
    discretization: float,
    started: float,
) -> Calibration:
    """``key`` from ``cache``, else :func:`calibrate_noise_multiplier` on ``event_at`` (stored).

    The T-step search rule shared by every Gaussian calibration: the
    pessimistic rounding error of T compositions grows like vdi·√T
    (measured: ≈1.3·vdi·√T), so the coarse search keeps it near a tenth of
    the target and its root lands close to the fine one.
    """
    hit = cache.get(key)
    if hit is not None:
        return Calibration(
            noise_multiplier=float(hit["noise_multiplier"]),
            epsilon=float(hit["epsilon"]),
            target_epsilon=target_epsilon,
            target_delta=target_delta,
            discretization=discretization,
            evaluations=0,
            seconds=time.perf_counter() - started,
            from_cache=True,
        )
    coarse = min(1e-2, max(SEARCH_DISCRETIZATION, target_epsilon / (10.0 * math.sqrt(steps))))
    result = calibrate_noise_multiplier(
        event_at,
        target_epsilon=target_epsilon,
        target_delta=target_delta,
        initial_guess=initial_guess,
        coarse_discretization=coarse,
        discretization=discretization,
    )
    cache.set(key, {"noise_multiplier": result.noise_multiplier, "epsilon": result.epsilon})
    return result


def clear_memory_cache() -> None:
    """Forget in-memory calibration results (the disk layer stays)."""
    _CACHE.clear_memory()
