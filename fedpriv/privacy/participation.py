"""Accounting for partial client participation: ``valid``, ``tight`` and ``paper``.

Each round every client answers independently with probability ρ and, if it
answers, Poisson-samples its records at rate q; the server adds Gaussian noise
to the securely aggregated sum. Three ways to account one record's exposure
(benchmark paper §5.6 and its correction, issue 9):

``valid`` (default)
    The record rate q, as if every client answered every round. ρ never
    lowers the noise. Sound: the per-round profile ρ·δ_q(ε) is ≤ δ_q(ε).
``tight``
    Each round is a :class:`~fedpriv.privacy.events.ParticipationDpEvent`:
    privacy-loss distribution ``(1 − ρ)·(point mass at 0) + ρ·PLD_q``, composed
    T times. Sound (proof below) and never noisier than ``valid``.
``paper``
    The "effective rate" ρ·q of the benchmark paper (§5.6). **Not a valid
    guarantee (comparison only)**: the ledger records an
    :class:`~fedpriv.privacy.events.EffectiveRateDpEvent` and reports the run's
    ε as not certified. ``tests/privacy/test_participation_audit.py`` refutes
    it empirically.

Proof that ``tight`` dominates the true pair
--------------------------------------------
Fix a record x of client k and neighbours D ∋ x, D' = D \\ {x} (remove; add
swaps the roles). Let B ~ Bernoulli(ρ) be whether k answers in a round (drawn
independently of the data and of the past) and Y the round's release.

1. *Revealing B only helps the adversary.* Y is a function of (B, Y), so for
   every ε the hockey-stick divergence H_ε(Y(D) ‖ Y(D')) is at most
   H_ε((B, Y)(D) ‖ (B, Y)(D')) (data processing). A pair dominating the
   conditioned release dominates the real one, whether or not B shows in the
   aggregate (it usually does: k's other records move the sums far more than
   the noise).
2. *Condition on B.* B has the same law under D and D'. Given B = 0, x is
   never read, so Y has the same law under both (loss 0). Given B = 1, the
   round is the Poisson(q)-subsampled Gaussian, dominated by
   P_q = (1 − q)·N(0, z²) + q·N(1, z²) against Q_q = N(0, z²) (remove; add is
   (Q_q, P_q)); the other records are a shift known to a worst-case adversary.
   On the disjoint union {B = 0} ⊔ {B = 1} the divergence splits:
   H_ε = (1 − ρ)·(1 − e^ε)_+ + ρ·H_ε(P_q ‖ Q_q) = ρ·δ_q(ε) for ε ≥ 0.
3. *That is the mixture PLD.* The pair ((1 − ρ)U ⊔ ρP_q, (1 − ρ)U ⊔ ρQ_q) has
   loss 0 with probability 1 − ρ and the loss of (P_q, Q_q) otherwise: its PLD
   is (1 − ρ)·δ₀ + ρ·ω_q, and δ(ε) = E_ω[(1 − e^{ε − L})_+] + ω(∞) is linear in
   the PLD, giving ρ·δ_q(ε). dp-accounting keeps one PMF per direction
   (remove, add); :func:`fedpriv.privacy.pld.participation_pld` mixes each
   with the point mass at 0, so both directions are covered.
4. *Composition and discretisation.* Rounds compose adaptively with fresh
   bits, so T rounds are dominated by the T-fold product of the per-round
   pair (Zhu, Dong & Wang 2022, Thm. 10), whose PLD is the T-fold
   convolution (``self_compose``). ω_q is dp-accounting's pessimistic
   connect-the-dots PMF (Doroshenko et al. 2022), itself the PLD of a
   dominating pair; the point mass at 0 is exact; mixing preserves
   domination by linearity. The ledger's figure is an upper bound.

Ordering. Dropping B from (B, Y) gives Y ~ (1 − ρq)·Q + ρq·P: the paper's pair
at rate ρq is a post-processing of the ``tight`` pair, and ρ·δ_q ≤ δ_q. Hence
z_paper ≤ z_tight ≤ z_valid; ``paper`` is optimistic exactly because it
assumes B stays hidden.
"""

from __future__ import annotations

import math
import time
from enum import StrEnum

from dp_accounting import dp_event

from fedpriv.privacy import calibration
from fedpriv.privacy.accounting import PLD_DISCRETIZATION
from fedpriv.privacy.cache import JsonCache
from fedpriv.privacy.calibration_range import check_gaussian_plan
from fedpriv.privacy.events import PAPER_CAVEAT, EffectiveRateDpEvent, ParticipationDpEvent
from fedpriv.validation import (
    check_count,
    check_open_unit,
    check_positive,
    check_probability,
)

_CACHE = JsonCache("participation_calibration", version="participation-1")


__all__ = [
    "PAPER_CAVEAT",
    "ParticipationAccounting",
    "calibrate_participation_noise_multiplier",
    "parse_accounting",
    "participation_event",
    "plan_event",
]


class ParticipationAccounting(StrEnum):
    """How partial client participation ρ enters the accounting (module docstring)."""

    VALID = "valid"
    TIGHT = "tight"
    PAPER = "paper"


def parse_accounting(value: object) -> ParticipationAccounting:
    """``value`` as a :class:`ParticipationAccounting`, naming the allowed values if not."""
    try:
        return ParticipationAccounting(value)
    except ValueError:
        allowed = [m.value for m in ParticipationAccounting]
        raise ValueError(
            f"participation_accounting must be one of {allowed}; got {value!r}"
        ) from None


def participation_event(
    inner: dp_event.DpEvent,
    *,
    sampling_probability: float,
    participation: float,
    accounting: ParticipationAccounting | str = ParticipationAccounting.VALID,
) -> dp_event.DpEvent:
    """The DpEvent one round records for mechanism event ``inner``.

    Parameters
    ----------
    inner : DpEvent
        The noise mechanism's event (e.g. ``GaussianDpEvent(z)``).
    sampling_probability : float
        Record rate q inside an answering client, in (0, 1].
    participation : float
        Client participation ρ, in (0, 1].
    accounting : ParticipationAccounting
        ``valid``: ``PoissonSampled(q, inner)``; ``tight``:
        ``ParticipationDpEvent(ρ, PoissonSampled(q, inner))``; ``paper``:
        ``EffectiveRateDpEvent(ρ, PoissonSampled(q, inner))`` (not certified).
        At ρ = 1 all three are the ``valid`` event; at q = 1 ``inner`` is not
        wrapped in a sampling event.
    """
    q = check_probability("sampling_probability", sampling_probability)
    rho = check_probability("participation", participation)
    mode = parse_accounting(accounting)
    sampled = dp_event.PoissonSampledDpEvent(q, inner) if q < 1.0 else inner
    if rho == 1.0 or mode is ParticipationAccounting.VALID:
        return sampled
    if mode is ParticipationAccounting.TIGHT:
        return ParticipationDpEvent(rho, sampled)
    return EffectiveRateDpEvent(rho, sampled)


def plan_event(
    noise_multiplier: float,
    *,
    sampling_probability: float,
    participation: float,
    steps: int,
    accounting: ParticipationAccounting | str = ParticipationAccounting.VALID,
) -> dp_event.DpEvent:
    """``steps`` rounds of a Gaussian with multiplier z under ``accounting``."""
    one = participation_event(
        dp_event.GaussianDpEvent(noise_multiplier),
        sampling_probability=sampling_probability,
        participation=participation,
        accounting=accounting,
    )
    return dp_event.SelfComposedDpEvent(one, steps) if steps > 1 else one


def calibrate_participation_noise_multiplier(
    *,
    target_epsilon: float,
    target_delta: float,
    sampling_probability: float,
    participation: float,
    steps: int,
    accounting: ParticipationAccounting | str = ParticipationAccounting.VALID,
    discretization: float = PLD_DISCRETIZATION,
) -> calibration.Calibration:
    """Noise multiplier z of T rounds at record rate q and participation ρ.

    ``valid`` calibrates at rate q and ``paper`` at rate ρ·q (both with
    :func:`~fedpriv.privacy.calibration.calibrate_gaussian_noise_multiplier`);
    ``tight`` searches z on the composed mixture PLD
    (:func:`~fedpriv.privacy.calibration.calibrate_noise_multiplier`: bracket,
    solve, then re-check on the ledger's PLD and step z up until
    ε(δ) ≤ target). The result never exceeds the target on the
    ``discretization`` PLD, which is what the ledger certifies.

    Parameters
    ----------
    target_epsilon : float
        In (0, inf).
    target_delta : float
        In (0, 1).
    sampling_probability : float
        Record rate q, in (0, 1].
    participation : float
        Client participation ρ, in (0, 1].
    steps : int
        Rounds T, ≥ 1.
    accounting : {"valid", "tight", "paper"}
        See the module docstring; ``paper`` is not a valid guarantee.
    discretization : float
        PLD discretisation of the final check (the ledger's).
    """
    t0 = time.perf_counter()
    eps = check_positive("target_epsilon", target_epsilon)
    dlt = check_open_unit("target_delta", target_delta)
    q = check_probability("sampling_probability", sampling_probability)
    rho = check_probability("participation", participation)
    t = check_count("steps", steps)
    vdi = check_positive("discretization", discretization)
    mode = parse_accounting(accounting)
    if rho == 1.0 or mode is not ParticipationAccounting.TIGHT:
        rate = q * rho if mode is ParticipationAccounting.PAPER else q
        return calibration.calibrate_gaussian_noise_multiplier(
            target_epsilon=eps,
            target_delta=dlt,
            sampling_probability=rate,
            steps=t,
            discretization=vdi,
        )
    # A record is used with probability 1 − (1 − ρq)^T: refuse a plan calibration cannot serve.
    check_gaussian_plan(
        target_delta=dlt, sampling_probability=q * rho, steps=t, name="sampling_probability"
    )
    return calibration.cached_calibration(
        _CACHE,
        f"tight|eps={eps!r}|delta={dlt!r}|q={q!r}|rho={rho!r}|T={t}|vdi={vdi!r}",
        lambda z: plan_event(
            z, sampling_probability=q, participation=rho, steps=t, accounting=mode
        ),
        target_epsilon=eps,
        target_delta=dlt,
        steps=t,
        # CLT: the mixture's loss variance is ≈ ρ times that of PLD_q, as at rate q·√ρ.
        initial_guess=calibration._clt_guess(eps, dlt, q * math.sqrt(rho), t),
        discretization=vdi,
        started=t0,
    )
