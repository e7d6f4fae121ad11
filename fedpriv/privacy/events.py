"""DpEvents that ``dp_accounting`` lacks, and (de)serialisation of any DpEvent.

``dp_accounting`` 0.6 has no event for the exponential mechanism, for
permute-and-flip or for client participation. fedpriv describes them with the
events below, which are proper ``dp_accounting.DpEvent`` subclasses (attrs,
frozen, hashable), so they sit in the same ledger as the Gaussian and Laplace
events. The accountants in :mod:`fedpriv.privacy.accounting` translate them by
documented, sound rules; :class:`EffectiveRateDpEvent` alone is *not* sound and
marks the run's ε as not certified.
"""

from __future__ import annotations

import importlib
from typing import Any

import attr
from dp_accounting import dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class BoundedRangeDpEvent(dp_event.DpEvent):
    """A mechanism that is ``epsilon``-bounded-range (BR).

    For every pair of neighbours the privacy loss ``log p(y|D)/p(y|D')`` ranges
    over an interval of width at most ``epsilon`` as ``y`` varies (Durfee &
    Rogers 2019, Def. 3.1). The exponential mechanism ``p(y) ∝ exp(ε u(y)/(2Δ))``
    is ε-BR; with scores monotone in the data (counts), ``exp(ε u(y)/Δ)`` is
    ε-BR too (Lumberjack, App. J: the loss difference lies in [0, Δ] or
    [-Δ, 0], halving the sensitivity term).

    ε-BR implies ε-DP and ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2).
    """

    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureDpEvent(dp_event.DpEvent):
    """A mechanism that is pure ``epsilon``-DP and nothing tighter is claimed.

    Permute-and-flip (McKenna & Sheldon 2020, Thm. 1) is released under this
    event. Pure ε-DP implies ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4).
    """

    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ApproxDpEvent(dp_event.DpEvent):
    """A mechanism certified (``epsilon``, ``delta``)-DP by its own exact analysis.

    For mechanisms no standard event describes, such as Lumberjack's Gaussian
    sparse threshold over a whole forest (Theorem 6). It is composed with the
    rest of a run by basic composition (Dwork & Roth 2014, Thm. 3.16): ε and δ
    add. ``mechanism`` names the analysis, for the report.
    """

    epsilon: float
    delta: float
    mechanism: str = ""


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ParticipationDpEvent(dp_event.DpEvent):
    """``event`` runs with probability ``participation``; whether it ran may be public.

    One federated round as seen by one record: its client answers with
    probability ρ, independently of the data, and the round then releases
    ``event`` (typically a ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``);
    otherwise the record's data is not touched. The dominating pair reveals the
    participation bit, so its privacy-loss distribution is the mixture
    ``(1 − ρ)·(point mass at 0) + ρ·PLD(event)`` and its hockey-stick profile is
    ``ρ·δ_event(ε)`` (proof: :mod:`fedpriv.privacy.participation`).
    """

    participation: float
    event: dp_event.DpEvent


def freeze_event(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """``event`` with every ``ComposedDpEvent``'s list of events made a tuple (hashable)."""
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent(tuple(freeze_event(e) for e in event.events))
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(freeze_event(event.event), event.count)
    return event


def _frozen_events(events: Any) -> tuple[dp_event.DpEvent, ...]:
    return tuple(freeze_event(e) for e in events)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class TunedSelectionDpEvent(dp_event.DpEvent):
    """The best of K base runs, K random: private hyper-parameter tuning.

    Papernot & Steinke (2022), Algorithm 1 (:mod:`fedpriv.privacy.tuning`):
    K ~ ``distribution`` (``"tnb"``: TNB(``eta``, ``gamma``), Theorem 2;
    ``"poisson"``: Poisson(``mean``), Theorem 6) hidden runs, each drawing one
    of ``candidates`` (every configuration's whole base run: training plus its
    DP validation score) and only the best run's output released. A base run's
    RDP curve is the pointwise maximum over ``candidates`` (it draws its
    configuration at random); the selection's curve is the theorem's
    transform of it. RDP-only: no PLD rule exists, so the ledger certifies the
    RDP figure (:mod:`fedpriv.privacy.accounting`).
    """

    candidates: tuple[dp_event.DpEvent, ...] = attr.ib(converter=_frozen_events)
    distribution: str = "tnb"
    eta: float = 1.0
    gamma: float = 0.0
    mean: float = 0.0


#: What a report says when its ε rests on an :class:`EffectiveRateDpEvent`.
PAPER_CAVEAT = (
    "participation accounted at the effective rate rho*q (benchmark paper §5.6): "
    "NOT a valid guarantee (comparison only)"
)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EffectiveRateDpEvent(dp_event.DpEvent):
    """NOT A VALID GUARANTEE (comparison only): ``event`` accounted at rate ρ·q.

    The benchmark paper's §5.6 accounting of partial participation: a round
    that Poisson-samples records at rate q inside clients that each answer with
    probability ρ is accounted as ``PoissonSampledDpEvent(ρ·q, inner)``. That
    treats a record's inclusion as an independent Poisson(ρ·q) draw, but a
    client's records are in or out together and its participation shows in the
    aggregate, so the bound does not hold (``tests/privacy/test_participation.py``
    audits a counter-example). The accountants compute the paper's figure and
    report the run's ε as *not certified*.

    ``event`` is what actually runs when the client answers:
    ``PoissonSampledDpEvent(q, inner)``, or ``inner`` itself at q = 1.
    """

    participation: float
    event: dp_event.DpEvent


def effective_rate_event(event: EffectiveRateDpEvent) -> dp_event.DpEvent:
    """The paper's stand-in for ``event``: ``PoissonSampledDpEvent(ρ·q, inner)``."""
    inner, q = event.event, 1.0
    if isinstance(inner, dp_event.PoissonSampledDpEvent):
        q, inner = float(inner.sampling_probability), inner.event
    rate = float(event.participation) * q
    return dp_event.PoissonSampledDpEvent(rate, inner) if rate < 1.0 else inner


def is_certified(event: dp_event.DpEvent) -> bool:
    """False if ``event`` holds an :class:`EffectiveRateDpEvent` anywhere in its tree."""
    if isinstance(event, EffectiveRateDpEvent):
        return False
    if isinstance(event, dp_event.ComposedDpEvent):
        return all(is_certified(e) for e in event.events)
    inner = getattr(event, "event", None)
    return not isinstance(inner, dp_event.DpEvent) or is_certified(inner)


def event_to_dict(event: dp_event.DpEvent) -> dict[str, Any]:
    """Serialise a DpEvent tree into JSON-ready nested dicts.

    The dict names the event class by module and class so that
    :func:`event_from_dict` rebuilds the identical event.
    """
    cls = type(event)
    out: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}"}
    for field in attr.fields(cls):
        out[field.name] = _value_to_json(getattr(event, field.name))
    return out


def _value_to_json(value: Any) -> Any:
    if isinstance(value, dp_event.DpEvent):
        return event_to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_value_to_json(v) for v in value]
    return value


def event_from_dict(data: dict[str, Any]) -> dp_event.DpEvent:
    """Rebuild a DpEvent serialised by :func:`event_to_dict`."""
    module_name, _, class_name = data["type"].rpartition(".")
    if not (module_name.startswith("dp_accounting") or module_name.startswith("fedpriv")):
        raise ValueError(f"refusing to import event class from module {module_name!r}")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
        raise ValueError(f"{data['type']} is not a DpEvent class")
    kwargs = {k: _value_from_json(v) for k, v in data.items() if k != "type"}
    return cls(**kwargs)


def _value_from_json(value: Any) -> Any:
    if isinstance(value, dict) and "type" in value:
        return event_from_dict(value)
    if isinstance(value, list):
        return [_value_from_json(v) for v in value]
    return value
