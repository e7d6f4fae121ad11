"""A node's own accountant: ε from the stages it enforces, and the check of every query.

A hospital's node trusts no coordinator (trust model). It is declared a plan as
stages (:class:`~fedpriv.federation.node_stage.NodeStage`) and

1. **derives each stage's per-record sensitivity itself**, from the method's own
   maths applied to the stage's declared settings
   (``handler.reply_sensitivity(stage.template())``): never a Δ the server states;
2. **derives each stage's event** from the mechanism, the absolute noise and that
   sensitivity (:func:`stage_events`) and composes them with the same accountant
   the server uses (:func:`fedpriv.privacy.accounting.account`, PLD with the RDP
   cross-check): that is the node's ε. A bounded-range, pure or approximate release
   is charged its declared per-use ε (one round's sample may feed several uses); a
   scaled release is amplified by the stage's sampling (and participation) only when
   it is the round's one scaled release: two read the same sample, and amplifying
   each separately would understate their joint release;
3. uses the server's declared events and ε **only as a cross-check**: a plan whose
   declared ε differs from the node's by more than :data:`CROSS_CHECK` is refused;
4. **checks every query before a row is read** (:func:`match_query`): the query's
   stage (from the same ``reply_sensitivity``) must be an admitted stage of the
   same method with rounds left, its sampling rate exactly the stage's, its reply
   no longer, its sensitivity no larger, and under distributed noise the share the
   node itself adds must carry the stage's noise for the query's length. A stage
   without a mechanism counts its rounds, and any query in it is refused.

Under central noise the server adds the declared noise after secure aggregation,
so the node's ε rests on that one fact (the trust model says so); everything else
(sampling, sensitivity, rounds, which stages exist) the node enforces. Under
distributed noise the node draws its share itself and enforces the noise too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from fedpriv.errors import Refusal
from fedpriv.federation.node_stage import SCALED, NodeStage, StageMechanism, StageRelease
from fedpriv.federation.protocol import Query, ReplySensitivity
from fedpriv.privacy.events import ApproxDpEvent, BoundedRangeDpEvent, PureDpEvent
from fedpriv.privacy.participation import participation_event
from fedpriv.privacy.randomness import GRID, rounding_margin

#: Relative disagreement tolerated between the server's declared ε and the node's own.
#: The same accountant on the same mechanisms; they differ only where one side composes
#: a release in pieces (Lumberjack's per-tree leaf releases at z, a node's one release at
#: z/√k): the PLD's pessimistic grid then moves ε by parts in 10⁷ (4.4e-7 at its defaults).
#: A lie worth telling moves it by orders of magnitude more.
CROSS_CHECK = 1e-4
#: Relative slack on sensitivity and noise comparisons (float rounding only).
RELATIVE_SLACK = 1e-9

HandlerOf = Callable[[str], Any]


class _UnitView:
    """A handler as a node with unit-level privacy derives from it: every sensitivity is
    one unit's, ``handler.unit_sensitivity(query, m)`` (:mod:`fedpriv.privacy.units`)."""

    def __init__(self, handler: Any, unit_records: int) -> None:
        self.handler, self.unit_records = handler, unit_records

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        unit = getattr(self.handler, "unit_sensitivity", None)
        if unit is not None:
            return unit(query, self.unit_records)
        from fedpriv.federation.protocol import scaled_sensitivity

        return scaled_sensitivity(self.handler.reply_sensitivity(query), self.unit_records)


def per_unit(handler_of: HandlerOf, unit_records: int) -> HandlerOf:
    """``handler_of`` whose handlers state a unit's sensitivity, m = ``unit_records``
    records (its schema's ``max_records_per_unit``; 1: ``handler_of`` itself)."""
    if int(unit_records) == 1:
        return handler_of
    return lambda method: _UnitView(handler_of(method), int(unit_records))


class NodeRefusal(Refusal):
    """A node's own rules refuse a plan or a query; nothing was read or answered.

    Only its ``code`` leaves the node (``"not_approved"``, ``"over_budget"``,
    ``"plan_mismatch"``, ``"outside_plan"``, ``"out_of_scope"``, ``"refused"``); the
    text goes to the node's own log and audit log."""


@dataclass(frozen=True, kw_only=True)
class AdmittedStage:
    """A stage as the node holds it: the declared settings and what the node derived."""

    stage: NodeStage
    l1: float
    l2: float
    #: The noise multiplier the node derived (Gaussian: σ/(Δ₂ + γ√d); Laplace: b/(Δ₁ + γd)).
    multiplier: float | None
    #: The same for each of the stage's extra releases (``None``: not a scaled one).
    extra_multipliers: tuple[float | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage.to_dict(),
            "l1": self.l1,
            "l2": self.l2,
            "multiplier": self.multiplier,
            "extra_multipliers": list(self.extra_multipliers),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AdmittedStage:
        return cls(
            stage=NodeStage.from_dict(raw["stage"]),
            l1=float(raw["l1"]),
            l2=float(raw["l2"]),
            multiplier=None if raw["multiplier"] is None else float(raw["multiplier"]),
            extra_multipliers=tuple(
                None if m is None else float(m) for m in raw.get("extra_multipliers", ())
            ),
        )

    def required_std(self, reply_length: int) -> float:
        """The Gaussian std (value units) a release of ``reply_length`` coordinates of this
        stage must carry: z·(Δ₂ + γ√d), as the central mechanism draws it."""
        if self.stage.mechanism is not StageMechanism.GAUSSIAN or self.multiplier is None:
            raise NodeRefusal(f"stage {self.stage.name!r} declares no Gaussian noise")
        return self.multiplier * (self.l2 + rounding_margin(reply_length, "l2"))


def derive_stage(stage: NodeStage, handler_of: HandlerOf) -> AdmittedStage:
    """The node's own reading of one declared stage (module docstring, 1)."""
    try:
        handler = handler_of(stage.method)
        sens: ReplySensitivity = handler.reply_sensitivity(stage.template())
    except (KeyError, ValueError, TypeError) as err:
        raise NodeRefusal(
            f"stage {stage.name!r}: this node cannot derive its sensitivity ({err}); refused"
        ) from None
    if sens.stage != stage.name:
        raise NodeRefusal(
            f"stage {stage.name!r}: its declared settings make a {sens.stage!r} query; refused"
        )
    l1, l2 = _finite(stage.name, sens.l1, sens.l2)
    primary = stage.own_release
    multiplier = None if primary is None else _multiplier(stage, primary, (l1, l2))
    extras = []
    for release in stage.extra:
        if release.part is None:
            part = (l1, l2)
        elif release.part in sens.parts:
            part = _finite(stage.name, *sens.parts[release.part])
        else:
            raise NodeRefusal(
                f"stage {stage.name!r}: its reply has no part {release.part!r}; refused"
            )
        extras.append(_multiplier(stage, release, part))
    return AdmittedStage(
        stage=stage, l1=l1, l2=l2, multiplier=multiplier, extra_multipliers=tuple(extras)
    )


def _finite(name: str, l1: float, l2: float) -> tuple[float, float]:
    l1, l2 = float(l1), float(l2)
    if not (math.isfinite(l1) and math.isfinite(l2) and l1 >= 0 and l2 >= 0):
        raise NodeRefusal(f"stage {name!r}: non-finite sensitivity; refused")
    return l1, l2


def _multiplier(stage: NodeStage, release: StageRelease, sens: tuple[float, float]) -> float | None:
    """A scaled release's noise multiplier with the node's own sensitivity ``sens``
    (L1, L2); for another kind, the check that its unit covers that sensitivity."""
    l1, l2 = sens
    d = stage.reply_length if release.length is None else release.length
    if release.mechanism is StageMechanism.GAUSSIAN:
        return release.noise / (l2 + rounding_margin(d, "l2"))
    if release.mechanism is StageMechanism.LAPLACE:
        return release.noise / (l1 + rounding_margin(d, "l1"))
    if l1 > release.unit * (1 + RELATIVE_SLACK):
        raise NodeRefusal(
            f"stage {stage.name!r}: its {release.mechanism} release is calibrated for a "
            f"sensitivity of {release.unit:g}, but one record (a unit, with units) moves what "
            f"it releases by up "
            f"to {l1:g} under its settings; refused"
        )
    return None


def stage_events(admitted: AdmittedStage) -> list[tuple[dp_event.DpEvent, int]]:
    """The (event, count) items the node accounts for one stage (module docstring, 2):
    its own release's and each extra release's, each round."""
    st = admitted.stage
    if st.mechanism is StageMechanism.NONE or st.rounds == 0:
        return []
    primary = st.own_release
    pairs = [(primary, admitted.multiplier)] if primary is not None else []
    pairs += list(zip(st.extra, admitted.extra_multipliers, strict=True))
    # Every release of a round reads the same Poisson sample (and the same client coin):
    # amplifying two of them separately composes independent samples, which understates
    # the joint release (two Gaussians at z, q = 0.05, 100 rounds: 4.77 against the
    # joint 7.69). With two or more scaled releases the node takes no amplification.
    shared = sum(r.mechanism in SCALED for r, _ in pairs) > 1
    return [item for r, m in pairs for item in _release_events(st, r, m, amplify=not shared)]


def _release_events(
    st: NodeStage, release: StageRelease, multiplier: float | None, *, amplify: bool = True
) -> list[tuple[dp_event.DpEvent, int]]:
    if release.mechanism in SCALED:
        inner: dp_event.DpEvent
        if release.mechanism is StageMechanism.GAUSSIAN:
            inner = dp_event.GaussianDpEvent(multiplier)
        else:
            inner = dp_event.LaplaceDpEvent(multiplier)
        if not amplify:
            return [(inner, st.rounds)]
        event = participation_event(
            inner,
            sampling_probability=st.sampling_rate,
            participation=st.participation,
            accounting=st.accounting,
        )
        return [(event, st.rounds)]
    uses = st.rounds if release.uses is None else release.uses
    if uses == 0:
        return []
    if release.mechanism is StageMechanism.BOUNDED_RANGE:
        return [(BoundedRangeDpEvent(release.noise), uses)]
    if release.mechanism is StageMechanism.PURE:
        return [(PureDpEvent(release.noise), uses)]
    return [(ApproxDpEvent(release.noise, release.delta, "declared"), uses)]


def node_epsilon(admitted: Sequence[AdmittedStage], accounting_delta: float) -> float:
    """ε of the admitted stages by the node's own accountant at ``accounting_delta``."""
    items = [item for a in admitted for item in stage_events(a)]
    if not items:
        return 0.0
    from fedpriv.privacy import accounting

    return float(accounting.account(items, accounting_delta).epsilon)


def admit_stages(
    plan: Mapping[str, Any], handler_of: HandlerOf, *, run_id: str
) -> tuple[list[AdmittedStage], float]:
    """Read a declared plan's stages the node's own way; returns them and the node's ε.

    Refuses (:class:`NodeRefusal`) a plan without stages, with a malformed or
    underivable stage, two stages of one name, a round count that disagrees with
    its stages', or a declared ε (or declared events' ε) off the node's by more
    than :data:`CROSS_CHECK`.
    """
    raw = plan.get("stages")
    if not isinstance(raw, list) or not raw:
        raise NodeRefusal(f"run {run_id}: the plan declares no stages; refused")
    try:
        stages = [NodeStage.from_dict(s) for s in raw]
    except (TypeError, ValueError) as err:
        raise NodeRefusal(f"run {run_id}: a malformed stage ({err}); refused") from None
    names = [(s.method, s.name) for s in stages]
    if len(set(names)) != len(names):
        raise NodeRefusal(f"run {run_id}: two stages share a name; refused")
    admitted = [derive_stage(s, handler_of) for s in stages]
    declared_rounds = plan.get("rounds")
    total = sum(s.rounds for s in stages)
    if declared_rounds is not None and int(declared_rounds) != total:
        raise NodeRefusal(
            f"run {run_id}: the plan declares {declared_rounds} rounds, its stages {total}; refused"
        )
    delta_acc = float(plan.get("accounting_delta", plan.get("delta", 0.0)))
    eps = node_epsilon(admitted, delta_acc)
    claims = [float(plan["epsilon"])] if "epsilon" in plan else []
    if plan.get("events"):
        from fedpriv.privacy import accounting
        from fedpriv.privacy.events import event_from_dict

        try:
            items = [(event_from_dict(ev), int(n)) for ev, n in plan["events"]]
        except Exception as err:  # a malformed cross-check refuses, never crashes
            raise NodeRefusal(f"run {run_id}: malformed declared events ({err}); refused") from None
        claims.append(float(accounting.account(items, delta_acc).epsilon))
    for claim in claims:
        if not _agree(eps, claim):
            raise NodeRefusal(
                f"run {run_id}: the server declares ε = {claim!r} for its plan; this node's own "
                f"accountant, from the stages it enforces, says {eps!r}; refused",
                code="plan_mismatch",
            )
    return admitted, eps


def _agree(mine: float, theirs: float) -> bool:
    if math.isinf(mine) or math.isinf(theirs):
        return mine == theirs
    return abs(mine - theirs) <= CROSS_CHECK * max(1.0, abs(mine))


def match_query(
    admitted: Sequence[AdmittedStage],
    used: Sequence[int],
    query: Query,
    handler_of: HandlerOf,
    *,
    share: tuple[float, int] | None = None,
) -> int:
    """The index of the admitted stage ``query`` belongs to, or :class:`NodeRefusal`.

    ``used[i]``: rounds of stage i already answered. ``share``: under distributed
    noise, (σ_c in grid ticks, m survivors) this node is asked to add.
    """
    try:
        sens: ReplySensitivity = handler_of(query.method).reply_sensitivity(query)
    except (KeyError, ValueError, TypeError) as err:
        raise NodeRefusal(f"round {query.round}: not a query this node knows ({err})") from None
    for i, a in enumerate(admitted):
        st = a.stage
        if st.method != query.method or st.name != sens.stage:
            continue
        where = f"round {query.round} (stage {st.name!r})"
        if st.mechanism is StageMechanism.NONE:
            raise NodeRefusal(f"{where}: the stage declares no mechanism; reading rows refused")
        if used[i] >= st.rounds:
            raise NodeRefusal(f"{where}: all {st.rounds} declared rounds were answered")
        if query.sampling_rate != st.sampling_rate:
            raise NodeRefusal(
                f"{where}: sampling rate {query.sampling_rate!r} != the admitted "
                f"{st.sampling_rate!r}"
            )
        if query.reply_length > st.reply_length:
            raise NodeRefusal(
                f"{where}: reply length {query.reply_length} > the admitted {st.reply_length}"
            )
        slack = 1 + RELATIVE_SLACK
        if sens.l1 > a.l1 * slack or sens.l2 > a.l2 * slack:
            raise NodeRefusal(
                f"{where}: one record (a unit) could move the reply by (L1 {sens.l1:g}, "
                f"L2 {sens.l2:g}), over the admitted (L1 {a.l1:g}, L2 {a.l2:g})"
            )
        if share is not None:
            if st.participation < 1 and st.accounting != "valid":
                # The server draws the participation coins: under distributed noise the
                # node claims no amplification from them (it could be asked every round).
                raise NodeRefusal(
                    f"{where}: the stage claims amplification by the server's participation "
                    f"coins (ρ {st.participation:g}, {st.accounting}); not under distributed noise"
                )
            sigma_c, m = share
            have = math.sqrt(max(int(m), 0)) * float(sigma_c) * GRID
            need = a.required_std(query.reply_length)
            if not have >= need * (1 - RELATIVE_SLACK):
                raise NodeRefusal(
                    f"{where}: the noise shares give std {have:.6g} with {m} survivors, below "
                    f"the admitted stage's {need:.6g}"
                )
        return i
    raise NodeRefusal(
        f"round {query.round}: a {query.method!r} query of kind {sens.stage!r} lies outside "
        "every admitted stage"
    )
