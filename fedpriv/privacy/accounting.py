"""ε of a multiset of DpEvents from the PLD accountant and the RDP accountant.

Pure functions over ``(leaf event, count)`` groups (see :func:`pld.flatten`).
The ledger and calibration are thin layers on top.

Translation rules for events dp-accounting's accountants reject
---------------------------------------------------------------------
==============================  =====================================  ==========================
event                           PLD (primary)                          RDP (cross-check)
==============================  =====================================  ==========================
``BoundedRangeDpEvent(ε)``      ε-DP dominating pair (ε-BR ⇒ ε-DP)     ε²/8-zCDP [CR21, L3.2]
``PureDpEvent(ε)``              ε-DP dominating pair [KOV15]           ε²/2-zCDP [BS16, P1.4]
Poisson(q) of either            ε' = log(1+q(e^ε−1)) pure [BBG18, T8]  (ε')²/2-zCDP
``ZCDpEvent(ρ, ξ)``             *RDP-only*: no sound PLD exists        native
``ApproxDpEvent(ε, δ)``         basic composition: ε and δ add         basic composition
``ParticipationDpEvent(ρ, e)``  (1−ρ)·(loss 0) + ρ·PLD(e)              log(1−ρ+ρe^{(α−1)R})/(α−1)
``EffectiveRateDpEvent(ρ, e)``  e at rate ρ·q: **not certified**       the same, at rate ρ·q
``TunedSelectionDpEvent``       *RDP-only*: no PLD rule                [PS22] Thm. 2 / Thm. 6
==============================  =====================================  ==========================

``TunedSelectionDpEvent`` (private hyper-parameter tuning): the base run's
curve is the pointwise maximum of its candidates' curves (:func:`rdp_curve`),
transformed by :mod:`fedpriv.privacy.tuning`. There is no PLD of the
selection, so a ledger holding one certifies the RDP figure (its PLD figure
is the δ-split ``"pld+rdp"`` bound below, never smaller), and the report's
``binding_accountant`` says ``"rdp"``.

``ParticipationDpEvent``: both pairs reveal whether ``e`` ran; the Rényi
divergence of such a pair is ``E_Q[(P/Q)^α] = (1 − ρ) + ρ·e^{(α−1)R(α)}`` for
each direction, increasing in ``R(α)``, so dp-accounting's per-order RDP of
``e`` (already the maximum over add and remove, Mironov, Talwar & Zhang 2019,
Thm. 5) gives a sound curve (proof: :mod:`fedpriv.privacy.participation`).
``EffectiveRateDpEvent`` is the benchmark paper's ρ·q accounting, kept for
comparison: :class:`Accounting` then has ``certified=False``.

An ``ApproxDpEvent`` carries a pair certified by its own exact analysis (e.g.
Lumberjack's Theorem 6): both accountants compose everything else at
δ − Σδᵢ and add Σεᵢ (Dwork & Roth 2014, Thm. 3.16); the method label gains
``"+basic"``.

When a run holds RDP-only events, the PLD figure is the basic composition of
the PLD part at δ₁ and the RDP part at δ − δ₁ (Dwork & Roth 2014, Thm. 3.16),
minimised over a fixed grid of δ₁, and labelled ``"pld+rdp"``. Both figures are
sound upper bounds on the run's ε, so the certified ε is their minimum; the
report names which accountant binds. Nothing is ever dropped.

[CR21] Cesar & Rogers, "Bounding, concentrating, and truncating", ALT 2021.
[BS16] Bun & Steinke, "Concentrated differential privacy", TCC 2016.
[KOV15] Kairouz, Oh & Viswanath, "The composition theorem for DP", ICML 2015.
[BBG18] Balle, Barthe & Gaboardi, "Privacy amplification by subsampling", NeurIPS 2018.
[PS22] Papernot & Steinke, "Hyperparameter tuning with Rényi DP", ICLR 2022.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from fedpriv.privacy import pld as pld_mod
from fedpriv.privacy.cache import JsonCache
from fedpriv.privacy.events import (
    ApproxDpEvent,
    BoundedRangeDpEvent,
    EffectiveRateDpEvent,
    ParticipationDpEvent,
    PureDpEvent,
    TunedSelectionDpEvent,
    effective_rate_event,
    is_certified,
)
from fedpriv.privacy.pld_size import MAX_PLD_POINTS, PLDSizeError
from fedpriv.privacy.tuning import ORDERS, RunsDistribution

Group = pld_mod.Group

#: Default PLD discretisation of the value (privacy-loss) axis. Calibration
#: re-checks at this resolution, so the ledger must account at least as finely.
PLD_DISCRETIZATION = 1e-4

#: Fractions of δ given to the PLD part when RDP-only events are present.
_DELTA_SPLITS = (0.5, 0.75, 0.9, 0.97, 0.99)

_ACCOUNTING_VERSION = "accounting-1"
_PLD_CACHE = JsonCache("pld_epsilon", version=_ACCOUNTING_VERSION)


@dataclass(frozen=True)
class Accounting:
    """ε of one multiset of events at one δ.

    Attributes
    ----------
    epsilon_pld : float
        PLD figure (primary); ``inf`` for a non-private run.
    pld_method : str
        ``"pld"``, or ``"pld+rdp"`` when RDP-only events forced a δ split.
    epsilon_rdp : float
        RDP figure (cross-check).
    epsilon : float
        ``min(epsilon_pld, epsilon_rdp)``: both are sound upper bounds.
    binding : str
        ``"pld"`` or ``"rdp"``: the accountant giving ``epsilon``.
    certified : bool
        False when an :class:`~fedpriv.privacy.events.EffectiveRateDpEvent`
        (the paper's ρ·q participation accounting) is among the events:
        ``epsilon`` is then the paper's figure, *not a valid guarantee*.
    """

    delta: float
    epsilon_pld: float
    pld_method: str
    epsilon_rdp: float
    epsilon: float
    binding: str
    certified: bool = True


def groups_key(groups: Sequence[Group]) -> str:
    """Exact, order-insensitive key of an event multiset (``repr`` round-trips floats)."""
    return ";".join(sorted(f"{leaf!r}*{count}" for leaf, count in groups))


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    # The RDP accountant logs a warning per order for small noise multipliers
    # (TARGETS.md); silence it for the call only, leaving global config alone.
    logger = logging.getLogger("absl")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def _rdp_leaf(event: dp_event.DpEvent) -> dp_event.DpEvent:
    if isinstance(event, EffectiveRateDpEvent):
        return _rdp_leaf(effective_rate_event(event))  # not sound: comparison only
    q = 1.0
    inner = event
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q, inner = float(event.sampling_probability), event.event
    if isinstance(inner, BoundedRangeDpEvent):
        if q == 1.0:
            return dp_event.ZCDpEvent(rho=inner.epsilon**2 / 8.0)
        return dp_event.ZCDpEvent(rho=pld_mod.amplified_pure_epsilon(inner.epsilon, q) ** 2 / 2.0)
    if isinstance(inner, PureDpEvent):
        eps = inner.epsilon if q == 1.0 else pld_mod.amplified_pure_epsilon(inner.epsilon, q)
        return dp_event.ZCDpEvent(rho=eps**2 / 2.0)
    return event


# RDP costs tens of milliseconds: worth remembering within a run (ledger checks
# and reports repeat it), not worth a disk write per progress line.
_RDP_CACHE = JsonCache("rdp_epsilon", version=_ACCOUNTING_VERSION, persist=False)


def _split_fixed(groups: Sequence[Group]) -> tuple[list[Group], float, float]:
    """(other groups, Σ count·ε, Σ count·δ) of the ApproxDpEvents in ``groups``."""
    rest, eps, dlt = [], 0.0, 0.0
    for leaf, count in groups:
        if isinstance(leaf, ApproxDpEvent):
            eps += count * float(leaf.epsilon)
            dlt += count * float(leaf.delta)
        else:
            rest.append((leaf, count))
    return rest, eps, dlt


def rdp_epsilon(groups: Sequence[Group], delta: float) -> float:
    """ε at ``delta`` from dp-accounting's RDP accountant (translated events).

    Memoised in memory by the exact multiset and δ.
    """
    rest, eps_fixed, delta_fixed = _split_fixed(groups)
    if delta_fixed or eps_fixed:
        if delta_fixed >= delta:
            return math.inf
        return eps_fixed + rdp_epsilon(rest, delta - delta_fixed)
    if not groups:
        return 0.0
    key = f"{groups_key(groups)}|delta={delta!r}"
    hit = _RDP_CACHE.get(key)
    if hit is not None:
        return float(hit)
    eps = _rdp_epsilon(groups, delta)
    _RDP_CACHE.set(key, eps if math.isfinite(eps) else "inf")
    return eps


def _rdp_curve(event: dp_event.DpEvent, orders: np.ndarray) -> np.ndarray:
    """Per-order RDP of one leaf event (``inf`` where RDP has no rule)."""
    if isinstance(event, ParticipationDpEvent):
        inner = _rdp_curve(event.event, orders)
        rho = float(event.participation)
        if rho == 1.0:
            return inner
        # log(1 − ρ + ρ e^{(α−1)R}) / (α−1), without overflow at large (α−1)R.
        x = (orders - 1.0) * inner
        return np.logaddexp(math.log1p(-rho), math.log(rho) + x) / (orders - 1.0)
    accountant = rdp_lib.RdpAccountant(orders=orders)
    translated = _rdp_leaf(event)
    if not accountant.supports(translated):
        return np.full(orders.shape, math.inf)
    accountant.compose(translated)
    return np.array(accountant._rdp)  # private: the accountant has no per-order getter


def rdp_curve(event: dp_event.DpEvent) -> np.ndarray:
    """Per-order RDP of any event tree on :data:`~fedpriv.privacy.tuning.ORDERS`.

    Composition adds curves; a :class:`TunedSelectionDpEvent` is the
    transform of its candidates' pointwise maximum (module docstring); other
    leaves follow the table above (``inf`` where RDP has no rule).
    """
    total = np.zeros_like(ORDERS)
    for leaf, count in pld_mod.flatten(event):  # identical leaves once (a run's T rounds)
        if isinstance(leaf, TunedSelectionDpEvent):
            total += count * tuned_selection_curve(leaf)
        else:
            with _quiet_absl():
                total += count * _rdp_curve(leaf, ORDERS)
    return total


def runs_distribution(event: TunedSelectionDpEvent) -> RunsDistribution:
    """The law of K that ``event`` names."""
    return RunsDistribution(
        kind=event.distribution, eta=event.eta, gamma=event.gamma, mean=event.mean
    )


def tuned_selection_curve(event: TunedSelectionDpEvent) -> np.ndarray:
    """[PS22] Thm. 2 (TNB) or Thm. 6 (Poisson) of the base curve max_c ε_c(λ)."""
    if not event.candidates:
        raise ValueError("a TunedSelectionDpEvent needs at least one candidate; got none")
    base = np.max([rdp_curve(c) for c in event.candidates], axis=0)
    return runs_distribution(event).rdp(base)


def _rdp_epsilon(groups: Sequence[Group], delta: float) -> float:
    accountant = rdp_lib.RdpAccountant(orders=ORDERS)
    orders = ORDERS
    extra = np.zeros_like(orders)
    with _quiet_absl():  # composing evaluates the RDP curve and may warn per order
        for leaf, count in groups:
            if isinstance(leaf, TunedSelectionDpEvent):
                extra += count * tuned_selection_curve(leaf)
                continue
            if isinstance(leaf, ParticipationDpEvent):
                extra += count * _rdp_curve(leaf, orders)
                continue
            translated = _rdp_leaf(leaf)
            if not accountant.supports(translated):
                return math.inf  # e.g. a Poisson-sampled Laplace: RDP has no rule, PLD does
            accountant.compose(translated, count)
        if not extra.any():
            return float(accountant.get_epsilon(delta))
        curve = np.asarray(accountant._rdp, dtype=np.float64) + extra
        if not np.isfinite(curve).any():
            return math.inf
        return float(rdp_lib.compute_epsilon(orders, curve, delta)[0])


def pld_epsilon(
    groups: Sequence[Group],
    delta: float,
    *,
    discretization: float = PLD_DISCRETIZATION,
    cache: bool = True,
    max_points: int = MAX_PLD_POINTS,
) -> tuple[float, str]:
    """ε at ``delta`` from the PLD accountant, with the method label.

    With ``cache`` the result is memoised in memory and on disk by the exact
    multiset, δ and discretisation (searches pass ``cache=False``).

    Raises
    ------
    PLDSizeError
        Before allocating, if the composed PLD would pass ``max_points``
        (:mod:`fedpriv.privacy.pld_size`).
    """
    rest, eps_fixed, delta_fixed = _split_fixed(groups)
    if delta_fixed or eps_fixed:
        if delta_fixed >= delta:
            return math.inf, "pld+basic"
        eps, method = pld_epsilon(
            rest,
            delta - delta_fixed,
            discretization=discretization,
            cache=cache,
            max_points=max_points,
        )
        return eps_fixed + eps, f"{method}+basic"
    if not groups:
        return 0.0, "pld"
    key = f"{groups_key(groups)}|delta={delta!r}|vdi={discretization!r}"
    hit = _PLD_CACHE.get(key) if cache else None
    if hit is not None:
        return float(hit[0]), str(hit[1])
    pld_groups = [(e, c) for e, c in groups if not pld_mod.is_rdp_only(e)]
    rdp_groups = [(e, c) for e, c in groups if pld_mod.is_rdp_only(e)]
    composed = (
        pld_mod.composed_pld(pld_groups, discretization, max_points=max_points)
        if pld_groups
        else None
    )
    if pld_groups and composed is None:
        result = (math.inf, "pld")
    elif not rdp_groups:
        result = (float(composed.get_epsilon_for_delta(delta)), "pld")
    else:
        best = math.inf
        for frac in _DELTA_SPLITS:
            eps_pld = 0.0 if composed is None else composed.get_epsilon_for_delta(frac * delta)
            best = min(best, eps_pld + rdp_epsilon(rdp_groups, (1.0 - frac) * delta))
        result = (float(best), "pld+rdp")
    if cache:
        _PLD_CACHE.set(key, list(result))
    return result


def account(
    groups: Sequence[Group], delta: float, *, discretization: float = PLD_DISCRETIZATION
) -> Accounting:
    """Both figures for ``groups`` at ``delta`` and the certified minimum.

    A run whose PLD would pass :data:`~fedpriv.privacy.pld_size.MAX_PLD_POINTS`
    (very little noise, or very many compositions) is not PLD-accounted: its
    PLD figure is ``inf`` with the label ``"pld:over-size-limit"`` and the RDP
    figure, also a sound upper bound, certifies alone.
    """
    try:
        eps_pld, method = pld_epsilon(groups, delta, discretization=discretization)
    except PLDSizeError:
        eps_pld, method = math.inf, "pld:over-size-limit"
    eps_rdp = rdp_epsilon(groups, delta)
    binding = "pld" if eps_pld <= eps_rdp else "rdp"
    return Accounting(
        delta=delta,
        epsilon_pld=eps_pld,
        pld_method=method,
        epsilon_rdp=eps_rdp,
        epsilon=min(eps_pld, eps_rdp),
        binding=binding,
        certified=all(is_certified(leaf) for leaf, _ in groups),
    )
