"""What a noise calibration accepts, and why, checked before any PLD is built.

A PLD calibration searches the noise multiplier z on pessimistic PLDs
(:mod:`fedpriv.privacy.calibration`). Its inputs are refused, with a
:class:`CalibrationRangeError` naming the key, the value and the allowed
range, when no z can be certified:

``target_delta``
    A composed PLD moves up to 1e-15 of probability into its infinite-loss
    bin per composition (dp-accounting's ``tail_mass_truncation``,
    :data:`~fedpriv.privacy.pld_size.TAIL_MASS_TRUNCATION`), so its ε at any
    δ ≤ 1e-15 is infinite whatever the noise: T > 1 steps need
    δ > 1e-15.
``sampling_probability`` with ``steps``
    A record enters any of T Poisson(q) samples with probability
    ``u = 1 − (1 − q)^T``; the whole run is (0, u)-DP without noise (total
    variation), so when u ≤ δ there is nothing to calibrate: q must exceed
    ``1 − (1 − δ)^{1/T}``.
``target_epsilon``
    Too large when z would fall below the *floor*: the smallest z whose PLD
    fits :data:`~fedpriv.privacy.pld_size.MAX_PLD_POINTS` at the ledger's
    discretisation (the search finds it; the message states the largest ε
    the plan can be calibrated to). Too small when no z up to
    :data:`MAX_NOISE_MULTIPLIER` meets it.

Everything accepted calibrates on PLDs of at most ``MAX_PLD_POINTS`` points.
"""

from __future__ import annotations

import math

from fedpriv.privacy.pld_size import MAX_PLD_POINTS, TAIL_MASS_TRUNCATION

#: Largest noise multiplier a calibration returns: noise 10¹² times the
#: sensitivity. No useful release is that noisy, and it keeps the search's
#: geometric walk and dp-accounting's σ² finite.
MAX_NOISE_MULTIPLIER = 1e12


class CalibrationRangeError(ValueError):
    """A calibration input outside what can be certified (names key, value, range)."""


def usage_probability(sampling_probability: float, steps: int) -> float:
    """``1 − (1 − q)^T``: the chance a record enters at least one of T Poisson(q) samples."""
    return -math.expm1(steps * math.log1p(-sampling_probability))


def check_gaussian_plan(
    *, target_delta: float, sampling_probability: float, steps: int, name: str
) -> None:
    """Refuse a T-step Poisson(q) plan no noise multiplier can be calibrated for.

    ``name`` is the key of the sampling rate in the caller's terms.
    """
    if steps > 1 and target_delta <= TAIL_MASS_TRUNCATION:
        raise CalibrationRangeError(
            f"target_delta must lie in ({TAIL_MASS_TRUNCATION:g}, 1) for {steps} steps; got "
            f"{target_delta!r}: each composed PLD puts up to {TAIL_MASS_TRUNCATION:g} of its "
            f"mass at infinite loss, so no noise certifies a smaller δ"
        )
    if sampling_probability < 1.0:
        used = usage_probability(sampling_probability, steps)
        if used <= target_delta:
            q_min = -math.expm1(math.log1p(-target_delta) / steps)
            raise CalibrationRangeError(
                f"{name} must exceed {q_min:.6g} for steps={steps} at "
                f"target_delta={target_delta:g}; got {sampling_probability!r}: a record is "
                f"sampled at all with probability 1-(1-q)^T = {used:.3g} <= δ, so the run is "
                f"(0, δ)-DP without noise and there is no noise multiplier to calibrate"
            )


def search_limit(vdi: float, discretization: float) -> int:
    """Point budget of a search PLD at ``vdi`` for a calibration certified at ``discretization``.

    A PLD's point count scales as 1/vdi, so a coarse search PLD gets the
    share of :data:`MAX_PLD_POINTS` that keeps its z admissible on the
    final, finer grid: the search never settles where the final check could
    not be built.
    """
    return max(1, int(MAX_PLD_POINTS * min(1.0, discretization / vdi)))


def floor_message(
    *, target_epsilon: float, noise_multiplier: float, epsilon: float, discretization: float
) -> str:
    return (
        f"target_epsilon must lie in (0, ~{epsilon:.4g}) for this plan; got {target_epsilon!r}: "
        f"ε is already {epsilon:.4g} at noise multiplier {noise_multiplier:.4g}, and less "
        f"noise needs a PLD over {MAX_PLD_POINTS} points at discretisation {discretization:g} "
        f"(MAX_PLD_POINTS); epsilon=inf is the non-private reference"
    )


def ceiling_message(*, target_epsilon: float, target_delta: float) -> str:
    return (
        f"target_epsilon={target_epsilon!r} at target_delta={target_delta!r} is met by no "
        f"noise multiplier up to {MAX_NOISE_MULTIPLIER:g} (allowed: a target some z in "
        f"(0, {MAX_NOISE_MULTIPLIER:g}] certifies; a PLD cannot certify δ at or below the "
        f"mass it puts at infinite loss, {TAIL_MASS_TRUNCATION:g} per composition)"
    )
