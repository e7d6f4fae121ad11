"""Privacy loss distributions (PLDs) for the events fedpriv releases.

Two jobs:

1. A fast builder for the (Poisson-subsampled) Gaussian PLD. It produces the
   same pessimistic connect-the-dots PMF as
   ``dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism``
   (Doroshenko et al. 2022, "Connect the Dots", Alg. 1) but evaluates the
   hockey-stick divergence at all grid points in one vectorised pass instead
   of one Python call per point, which is what makes a 1e-4 re-check cheap
   enough for calibration. ``tests/privacy/test_pld.py`` pins it to the
   library path.
2. Translating a flattened list of ``(event, count)`` into one composed PLD.
   Events the dp-accounting PLD accountant rejects are translated by sound
   rules (module docstring of :mod:`fedpriv.privacy.accounting`) or handed
   back as *RDP-only*.

Neighbouring relation: add/remove one record throughout (the trust model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

from fedpriv.privacy import pld_size
from fedpriv.privacy.events import (
    ApproxDpEvent,
    BoundedRangeDpEvent,
    EffectiveRateDpEvent,
    ParticipationDpEvent,
    PureDpEvent,
    TunedSelectionDpEvent,
    effective_rate_event,
)

PLD = pld_lib.PrivacyLossDistribution
Group = tuple[dp_event.DpEvent, int]


class _VectorisedGaussianPrivacyLoss(plm.GaussianPrivacyLoss):
    """``GaussianPrivacyLoss`` whose hockey-stick divergence is vectorised.

    For additive Gaussian noise of std ``σ`` and sensitivity ``Δ``, the loss
    without subsampling is ``L(x) = Δ(-Δ/2 - x)/σ²`` (remove) and its inverse
    ``x = -Δ/2 - L σ²/Δ``; add shifts ``x`` by ``Δ``. With Poisson subsampling at
    rate ``q`` the loss relates to the unsubsampled one by
    ``L' = log(1 + (e^L - 1)/q)`` (remove) and ``L' = -log(1 + (e^-L - 1)/q)``
    (add) (Zhu, Dong & Wang 2022, Prop. 30; dp-accounting's
    ``AdditiveNoisePrivacyLoss.inverse_privacy_loss``).
    """

    def _inverse_vector(self, eps: np.ndarray) -> np.ndarray:
        q = self.sampling_prob
        s2_over_d = self._standard_deviation**2 / self.sensitivity
        if self.adjacency_type == plm.AdjacencyType.REMOVE:
            if q == 1.0:
                unsub = eps
            else:
                unsub = _log1p_expm1_over_q(eps, q)
            x = -0.5 * self.sensitivity - unsub * s2_over_d
            # At the boundary log(1-q) the inverse is +inf (all of mu_upper).
            return (
                np.where(np.isclose(eps, math.log1p(-q), rtol=1e-9, atol=0.0), np.inf, x)
                if q < 1
                else x
            )
        # ADD
        if q == 1.0:
            unsub = eps
        else:
            unsub = -_log1p_expm1_over_q(-eps, q)
        x = self.sensitivity + (-0.5 * self.sensitivity - unsub * s2_over_d)
        return (
            np.where(np.isclose(eps, -math.log1p(-q), rtol=1e-9, atol=0.0), -np.inf, x)
            if q < 1
            else x
        )

    def get_delta_for_epsilon(self, epsilon):
        is_scalar = np.isscalar(epsilon)
        eps = np.atleast_1d(np.asarray(epsilon, dtype=np.float64))
        deltas = np.zeros_like(eps)
        q = self.sampling_prob
        if q == 1.0:
            mask = np.ones_like(eps, dtype=bool)
        elif self.adjacency_type == plm.AdjacencyType.ADD:
            mask = eps < -math.log1p(-q)
        else:
            mask = eps > math.log1p(-q)
            deltas[~mask] = -np.expm1(eps[~mask])
        x = self._inverse_vector(eps[mask])
        with np.errstate(over="ignore", invalid="ignore"):
            deltas[mask] = self.mu_upper_cdf(x) - np.exp(eps[mask] + self.mu_lower_log_cdf(x))
        deltas = np.clip(np.nan_to_num(deltas, nan=0.0), 0.0, 1.0)
        return float(deltas[0]) if is_scalar else deltas


def _log1p_expm1_over_q(eps: np.ndarray, q: float) -> np.ndarray:
    """Stable ``log(1 + (e^eps - 1)/q)`` for ``eps > log(1-q)``."""
    eps = np.asarray(eps, dtype=np.float64)
    out = np.empty_like(eps)
    big = eps > 1.0
    # For large eps, e^eps - (1-q) overflows only past ~709; factor e^eps out.
    out[big] = eps[big] + np.log1p(-(1.0 - q) * np.exp(-eps[big])) - math.log(q)
    small = ~big
    with np.errstate(divide="ignore", invalid="ignore"):
        out[small] = np.log1p(np.expm1(eps[small]) / q)
    return out


def gaussian_pld(
    noise_multiplier: float,
    *,
    sampling_probability: float = 1.0,
    value_discretization_interval: float = 1e-4,
    max_points: int = pld_size.MAX_PLD_POINTS,
) -> PLD:
    """Pessimistic PLD of one (Poisson-subsampled) Gaussian mechanism.

    Equal to ``from_gaussian_mechanism(noise_multiplier, sensitivity=1,
    sampling_prob=q, value_discretization_interval=vdi)`` with connect-the-dots
    and dp-accounting's default tail truncation, computed in vectorised form.

    Raises
    ------
    PLDSizeError
        Before allocating, if the grid would pass ``max_points``
        (:func:`~fedpriv.privacy.pld_size.gaussian_points`).
    """
    pld_size.check_points(
        f"a Gaussian of noise multiplier {noise_multiplier:.6g} at q={sampling_probability:.6g}",
        pld_size.gaussian_points(
            noise_multiplier, sampling_probability, value_discretization_interval
        ),
        max_points,
    )

    def single(adjacency: plm.AdjacencyType):
        loss = _VectorisedGaussianPrivacyLoss(
            noise_multiplier,
            sensitivity=1.0,
            pessimistic_estimate=True,
            sampling_prob=sampling_probability,
            adjacency_type=adjacency,
        )
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(
            loss,
            pessimistic_estimate=True,
            value_discretization_interval=value_discretization_interval,
            use_connect_dots=True,
        )

    return pld_lib._pld_for_subsampled_mechanism(single, sampling_probability)


def amplified_pure_epsilon(epsilon: float, sampling_probability: float) -> float:
    """ε' of a pure ε-DP mechanism run on a Poisson sample at rate ``q``.

    ``ε' = log(1 + q(e^ε - 1))`` under add/remove-one neighbours (Balle, Barthe
    & Gaboardi 2018, Thm. 8; Li, Qardaji & Su 2012).
    """
    return math.log1p(sampling_probability * math.expm1(epsilon))


def flatten(event: dp_event.DpEvent, count: int = 1) -> list[Group]:
    """Flatten composed/self-composed events into merged ``(leaf, count)`` groups.

    Order of first appearance is kept, identical leaves are merged, and
    ``NoOpDpEvent`` is dropped.
    """
    merged: dict[dp_event.DpEvent, int] = {}

    def walk(e: dp_event.DpEvent, c: int) -> None:
        if isinstance(e, dp_event.NoOpDpEvent) or c == 0:
            return
        if isinstance(e, dp_event.SelfComposedDpEvent):
            walk(e.event, c * e.count)
        elif isinstance(e, dp_event.ComposedDpEvent):
            for sub in e.events:
                walk(sub, c)
        else:
            merged[e] = merged.get(e, 0) + c

    walk(event, count)
    return list(merged.items())


def is_rdp_only(event: dp_event.DpEvent) -> bool:
    """Whether the leaf event has no sound PLD translation here (zCDP, a tuned selection)."""
    if isinstance(event, (ParticipationDpEvent, EffectiveRateDpEvent)):
        return is_rdp_only(event.event)
    return isinstance(event, (dp_event.ZCDpEvent, TunedSelectionDpEvent))


def participation_pld(participation: float, inner: PLD, vdi: float) -> PLD:
    """``(1 − ρ)·(point mass at loss 0) + ρ·inner``, both adjacency directions.

    The PLD of a pair that reveals whether the inner mechanism ran (proof and
    both directions: :mod:`fedpriv.privacy.participation`). Mixing is linear in
    the hockey-stick divergence, so a pessimistic ``inner`` stays pessimistic.
    """
    rho = float(participation)
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"participation must lie in (0, 1]; got {participation!r}")
    if rho == 1.0:
        return inner
    return inner.compute_mixture(pld_lib.identity(value_discretization_interval=vdi), rho)


def _pure_pld(epsilon: float, vdi: float) -> PLD:
    # The ε-DP dominating pair (Kairouz, Oh & Viswanath 2015): randomised
    # response with loss ±ε. Sound for any ε-DP (hence any ε-BR) mechanism.
    return pld_lib.from_privacy_parameters(
        pld_common.DifferentialPrivacyParameters(epsilon, 0.0),
        value_discretization_interval=vdi,
    )


def leaf_pld(
    event: dp_event.DpEvent, vdi: float, *, max_points: int = pld_size.MAX_PLD_POINTS
) -> PLD | None:
    """PLD of a single leaf event, or ``None`` for a non-private event.

    Raises
    ------
    PLDSizeError
        Before allocating, if the event's grid would pass ``max_points``.
    ValueError
        If the event has no PLD translation (see :func:`is_rdp_only`) and the
        dp-accounting PLD accountant does not support it either.
    """
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return None
    if isinstance(event, ParticipationDpEvent):
        inner_pld = leaf_pld(event.event, vdi, max_points=max_points)
        return None if inner_pld is None else participation_pld(event.participation, inner_pld, vdi)
    if isinstance(event, EffectiveRateDpEvent):
        # NOT sound (comparison only): the accountant marks the run uncertified.
        return leaf_pld(effective_rate_event(event), vdi, max_points=max_points)
    q = 1.0
    inner = event
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q, inner = float(event.sampling_probability), event.event
    if isinstance(inner, dp_event.GaussianDpEvent):
        if inner.noise_multiplier == 0:
            return None
        return gaussian_pld(
            inner.noise_multiplier,
            sampling_probability=q,
            value_discretization_interval=vdi,
            max_points=max_points,
        )
    if isinstance(inner, dp_event.LaplaceDpEvent):
        if inner.noise_multiplier == 0:
            return None
        pld_size.check_points(
            f"a Laplace of parameter {inner.noise_multiplier:.6g} at q={q:.6g}",
            pld_size.laplace_points(inner.noise_multiplier, q, vdi),
            max_points,
        )
        return pld_lib.from_laplace_mechanism(
            inner.noise_multiplier, value_discretization_interval=vdi, sampling_prob=q
        )
    if isinstance(inner, (BoundedRangeDpEvent, PureDpEvent)):
        eps = inner.epsilon if q == 1.0 else amplified_pure_epsilon(inner.epsilon, q)
        # Two points, but densified to the span ±ε on composition (and e^ε overflows past 709).
        pld_size.check_points(
            f"a pure ε={eps:.6g} event", pld_size.grid_points(-eps, eps, vdi), max_points
        )
        return _pure_pld(eps, vdi)
    if is_rdp_only(event):
        raise ValueError(f"{event} has no PLD translation; account it through RDP")
    if isinstance(inner, ApproxDpEvent):
        raise ValueError(f"{event} composes by basic composition only (accounting.py)")
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=vdi)
    if not accountant.supports(event):
        raise ValueError(f"neither fedpriv nor the dp-accounting PLD accountant supports {event}")
    accountant.compose(event)
    if accountant.get_epsilon(0.5) == math.inf:
        return None
    return accountant._pld  # private: the accountant exposes no public getter


def composed_pld(
    groups: Sequence[Group], vdi: float, *, max_points: int = pld_size.MAX_PLD_POINTS
) -> PLD | None:
    """Compose the PLDs of ``(leaf, count)`` groups; ``None`` if any is non-private.

    Raises
    ------
    PLDSizeError
        Before allocating, if a leaf, a self-composition or a composition
        would pass ``max_points`` (:mod:`fedpriv.privacy.pld_size`).
    """
    total: PLD | None = None
    for leaf, count in groups:
        single = leaf_pld(leaf, vdi, max_points=max_points)
        if single is None:
            return None
        part = single
        if count > 1:
            pld_size.check_points(
                f"{count} compositions of {leaf}",
                pld_size.self_compose_points(single, count, max_points),
                max_points,
            )
            part = pld_size.dense(single, count).self_compose(count)
        if total is not None:
            pld_size.check_points(
                f"composing {leaf} with the rest", pld_size.compose_points(total, part), max_points
            )
        total = part if total is None else total.compose(part)
    return total if total is not None else pld_lib.identity(value_discretization_interval=vdi)
