"""The independent reference of the node-ε tests (``test_node_epsilon_reference.py``):
each declared stage's releases rebuilt from the documented rules on dp-accounting's
public API, composed by PLD and by RDP (the module docstring of that test)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from dp_accounting import dp_event
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from fedpriv.federation.node_stage import NodeStage

#: The agreement asked of every figure (the node's cross-check tolerance).
#: The releases' rounding grid γ (2^-32, :mod:`fedpriv.privacy.randomness`), written out.
GAMMA = 2.0**-32
#: fedpriv's value discretisation of the privacy-loss axis (accounting.PLD_DISCRETIZATION).
VDI = 1e-4


@dataclass(frozen=True)
class Release:
    """One accounted release, from the stage's mechanism parameters."""

    kind: str  # "gaussian", "laplace", "pure" (ε-DP or ε-BR), "approx"
    count: int
    q: float = 1.0
    z: float = 0.0  # Gaussian: σ/(Δ₂ + γ√d); Laplace: b/(Δ₁ + γd)
    pld_eps: float = 0.0  # the ε of the ε-DP dominating pair (amplified under q < 1)
    rho: float = 0.0  # the zCDP parameter per use
    eps: float = 0.0  # approx: ε and δ per use
    delta: float = 0.0


def pure_release(kind: str, eps: float, q: float, uses: int) -> Release:
    """``uses`` ε-BR or ε-DP releases, each run on a Poisson(q) sample of its own."""
    if q < 1.0:  # [BBG18, Thm. 8], then ε'²/2-zCDP for either kind
        amplified = math.log1p(q * math.expm1(eps))
        return Release("pure", uses, pld_eps=amplified, rho=amplified**2 / 2.0)
    rho = eps**2 / 8.0 if kind == "bounded_range" else eps**2 / 2.0  # [CR21, L3.2]; [BS16]
    return Release("pure", uses, pld_eps=eps, rho=rho)


def releases(stage: NodeStage, handler) -> list[Release]:
    """The releases a stage's rounds make, from its declared parameters and the handler's
    sensitivity of its template (the node's only other input).

    The node's documented rules (:mod:`fedpriv.privacy.node_plan`, 2): a bounded-range,
    pure or approximate release is charged its declared per-use ε, unamplified (a
    round's one sample may feed several uses); a scaled release is amplified by the
    stage's q only when it is the round's one scaled release.
    """
    if stage.mechanism == "none" or stage.rounds == 0:
        return []
    # This federation has every client answer; ρ < 1 would need the mixture rule too.
    assert stage.participation == 1.0, (stage.name, stage.participation)
    sens = handler.reply_sensitivity(stage.template())
    assert sens.stage == stage.name
    specs = [(stage.mechanism, stage.noise, stage.uses, stage.delta, None, stage.reply_length)]
    specs += [(r.mechanism, r.noise, r.uses, r.delta, r.part, r.length or stage.reply_length)
              for r in stage.extra]  # fmt: skip
    scaled = sum(m in ("gaussian", "laplace") for m, *_ in specs)
    q = stage.sampling_rate if scaled == 1 else 1.0
    out = []
    for mechanism, noise, uses, delta, part, d in specs:
        l1, l2 = (sens.l1, sens.l2) if part is None else sens.parts[part]
        if mechanism == "gaussian":
            z = noise / (l2 + GAMMA * math.sqrt(d))
            out.append(Release("gaussian", stage.rounds, q=q, z=z))
        elif mechanism == "laplace":
            out.append(Release("laplace", stage.rounds, q=q, z=noise / (l1 + GAMMA * d)))
        else:
            n = stage.rounds if uses is None else uses
            if n == 0:
                continue
            if mechanism == "approx":
                out.append(Release("approx", n, eps=noise, delta=delta))
            else:
                out.append(pure_release(str(mechanism), noise, 1.0, n))
    return out


def _pld(r: Release) -> pld_lib.PrivacyLossDistribution:
    if r.kind == "gaussian":
        one = pld_lib.from_gaussian_mechanism(
            r.z, sensitivity=1.0, pessimistic_estimate=True, value_discretization_interval=VDI,
            sampling_prob=r.q, use_connect_dots=True,
        )  # fmt: skip
    elif r.kind == "laplace":
        one = pld_lib.from_laplace_mechanism(
            r.z, sensitivity=1.0, pessimistic_estimate=True, value_discretization_interval=VDI,
            sampling_prob=r.q, use_connect_dots=True,
        )  # fmt: skip
    else:  # the ε-DP dominating pair [KOV15]
        one = pld_lib.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(r.pld_eps, 0.0),
            value_discretization_interval=VDI,
        )
    return one.self_compose(r.count) if r.count > 1 else one


def _event(r: Release) -> dp_event.DpEvent:
    if r.kind == "pure":
        inner: dp_event.DpEvent = dp_event.ZCDpEvent(rho=r.rho)
    else:
        base = dp_event.GaussianDpEvent if r.kind == "gaussian" else dp_event.LaplaceDpEvent
        inner = base(r.z)
        if r.q < 1.0:
            inner = dp_event.PoissonSampledDpEvent(r.q, inner)
    return dp_event.SelfComposedDpEvent(inner, r.count)


def reference(items: list[Release], delta: float) -> tuple[float, float, float]:
    """(certified, PLD, RDP) ε of ``items`` at ``delta``, by dp-accounting's public API."""
    fixed_eps = sum(r.count * r.eps for r in items if r.kind == "approx")
    fixed_delta = sum(r.count * r.delta for r in items if r.kind == "approx")
    rest = [r for r in items if r.kind != "approx"]
    assert fixed_delta < delta
    left = delta - fixed_delta  # Dwork & Roth 2014, Thm. 3.16
    total = None
    for r in rest:
        total = _pld(r) if total is None else total.compose(_pld(r))
    eps_pld = fixed_eps + (total.get_epsilon_for_delta(left) if total is not None else 0.0)
    accountant = rdp_lib.RdpAccountant()  # the default orders: fedpriv's too
    events = [_event(r) for r in rest]
    if not all(accountant.supports(e) for e in events):
        eps_rdp = math.inf
    else:
        absl = logging.getLogger("absl")  # a warning per order it cannot converge at
        level, _ = absl.level, absl.setLevel(logging.ERROR)
        try:
            accountant.compose(dp_event.ComposedDpEvent(events))
            eps_rdp = fixed_eps + (accountant.get_epsilon(left) if events else 0.0)
        finally:
            absl.setLevel(level)
    return min(eps_pld, eps_rdp), eps_pld, eps_rdp
