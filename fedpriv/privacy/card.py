"""The privacy card: what a released model's guarantee is, machine-readable and in Markdown.

A :class:`PrivacyCard` travels with every saved model (:mod:`fedpriv.artefact`).
It is built from the run's :class:`~fedpriv.privacy.ledger.PrivacyReport` (or
the dict its journal wrote, ``privacy.json``) plus public facts about the run,
and states:

* ε at δ, with the PLD figure (primary) and the RDP figure (cross-check),
  which accountant binds, and whether the figure is *certified* (a caveat,
  e.g. seeded private randomness or the paper's ρ·q participation
  accounting, voids it);
* the neighbouring relation (add/remove one record, or one unit with all its
  records: ``unit``, e.g. ``patient_nbr, at most 4 records``) and the trust
  model (docs/explanation/trust-model.md);
* every recorded DpEvent, by label and by its ``repr`` (and its
  :func:`~fedpriv.privacy.events.event_to_dict` form);
* the participation accounting mode and ρ;
* the schema digest and the values that were public (bounds and domains,
  label set, declared record bound, seed, number of clients, the query
  structure);
* the caveats and the run's status.

A non-private run (ε = inf, no ledger) gets a card that says so.

Everything here is plain data: :meth:`PrivacyCard.to_dict` /
:meth:`PrivacyCard.from_dict` round-trip through JSON (``inf`` as the string
``"inf"``, since JSON has none), and :meth:`PrivacyCard.to_markdown` renders it
(:mod:`fedpriv.privacy.card_markdown`).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from fedpriv import __version__
from fedpriv.privacy import accounting
from fedpriv.privacy.events import PAPER_CAVEAT, event_from_dict, is_certified
from fedpriv.privacy.ledger import LedgerEntry, PrivacyBudget, PrivacyReport

#: Card layout version (bumped when a field changes meaning).
CARD_VERSION = 1

#: The caveat of a non-private run.
NON_PRIVATE_CAVEAT = (
    "non-private run (epsilon = inf): no differential privacy guarantee; the released "
    "parameters are exact functions of the training rows"
)

#: The neighbouring relation every fedpriv guarantee is stated under.
NEIGHBOURING = "add_or_remove_one"

#: Shamir threshold rule of secure aggregation (``fedpriv.federation.secagg_common``).
SECAGG_RULE = (
    "Shamir t = max(2, floor(threshold * n) + 1, floor(n / 2) + 1) of a round's n "
    "participants (a node's secagg-min-threshold may raise its own floor); a survivor "
    "list is unmasked only with t survivors' signatures on it (consistency round)"
)


class CardError(ValueError):
    """A card dict that is not a valid privacy card (the message names the key)."""


@dataclass(frozen=True, kw_only=True)
class CardEvent:
    """One recorded release: its ledger index, label, ``repr`` and serialised event."""

    index: int
    label: str
    event: str
    spec: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "event": self.event, "spec": self.spec}


@dataclass(frozen=True, kw_only=True)
class PrivacyCard:
    """A run's privacy guarantee and the public facts it rests on (module docstring)."""

    method: str
    private: bool
    epsilon: float
    delta: float | None
    epsilon_pld: float
    epsilon_rdp: float
    pld_method: str | None
    binding_accountant: str | None
    certified: bool
    budget_epsilon: float
    budget_delta: float | None
    neighbouring_relation: str = NEIGHBOURING
    #: Whom the relation adds or removes: ``"record"``, or ``"<unit column>, at most m
    #: records"`` (:mod:`fedpriv.privacy.units`).
    unit: str = "record"
    trust_model: dict[str, Any] = field(default_factory=dict)
    participation: dict[str, Any] = field(default_factory=dict)
    events: tuple[CardEvent, ...] = ()
    schema_digest: str | None = None
    public_values: dict[str, Any] = field(default_factory=dict)
    caveats: tuple[str, ...] = ()
    run_status: str | None = None
    scope: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    card_version: int = CARD_VERSION

    @property
    def certified_accountant(self) -> str | None:
        """The accountant whose figure is the certified ε (None if not certified)."""
        return self.binding_accountant if self.certified else None

    # -- JSON ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "events":
                value = [e.to_dict() for e in value]
            elif f.name == "caveats":
                value = list(value)
            elif isinstance(value, float) and math.isinf(value):
                value = "inf"
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyCard:
        """Inverse of :meth:`to_dict`; an unknown or missing key is a :class:`CardError`."""
        if not isinstance(data, dict):
            raise CardError(f"a privacy card must be a JSON object; got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CardError(f"privacy card: unknown key {unknown[0]!r}; allowed: {sorted(names)}")
        required = {f.name for f in fields(cls) if f.default is f.default_factory is MISSING}
        absent = sorted(required - set(data))
        if absent:
            raise CardError(f"privacy card: missing key {absent[0]!r}")
        values = dict(data)
        for key in ("epsilon", "epsilon_pld", "epsilon_rdp", "budget_epsilon"):
            values[key] = _float(key, values[key])
        for key in ("delta", "budget_delta"):
            if values[key] is not None:
                values[key] = _float(key, values[key])
        for key in ("private", "certified"):
            if not isinstance(values[key], bool):
                raise CardError(f"privacy card: {key} must be true or false; got {values[key]!r}")
        try:
            values["events"] = tuple(CardEvent(**e) for e in values.get("events", ()))
        except TypeError as exc:
            raise CardError(f"privacy card: events: {exc}") from None
        values["caveats"] = tuple(str(c) for c in values.get("caveats", ()))
        if values.get("card_version", CARD_VERSION) != CARD_VERSION:
            raise CardError(
                f"privacy card: card_version must be {CARD_VERSION}; got {values['card_version']!r}"
            )
        return cls(**values)

    # -- Markdown ------------------------------------------------------------
    def to_markdown(self) -> str:
        """The card as a Markdown document (every DpEvent listed by label and repr)."""
        from fedpriv.privacy.card_markdown import render_markdown

        return render_markdown(self)


def spent_text(privacy: dict[str, Any]) -> str:
    """``ε spent <a> (<accountant>), <b> (<other>)`` of a privacy report's dict, the
    certified figure (the smaller sound bound, ``binding_accountant``) first."""
    figures = [
        (privacy.get("epsilon_pld", "inf"), "PLD"),
        (privacy.get("epsilon_rdp", "inf"), "RDP"),
    ]
    if privacy.get("binding_accountant") == "rdp":
        figures.reverse()
    return f"ε spent {figures[0][0]} ({figures[0][1]}), {figures[1][0]} ({figures[1][1]})"


def _float(key: str, value: Any) -> float:
    if value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(f"privacy card: {key} must be a number or 'inf'; got {value!r}")
    return float(value)


def _num(value: Any) -> float:
    return math.inf if value in ("inf", None) else float(value)


def trust_model(*, secure_aggregation: bool, secagg_threshold: float | None) -> dict[str, Any]:
    """The parties and what each sees (docs/explanation/trust-model.md)."""
    sums = (
        "the exact sum of the asked clients' statistics each round (never one client's vector)"
        if secure_aggregation
        else "each asked client's exact statistics (secure aggregation was off)"
    )
    return {
        "server": (
            f"honest-but-curious curator: sees the public schema and configuration, {sums}, "
            "and which clients answered; adds the noise before any release"
        ),
        "peers": "public configuration and released (noisy) outputs only; no seed, no timing",
        "observers": "the model, metrics, logs and files hold released values only",
        "secure_aggregation": bool(secure_aggregation),
        "secagg_threshold": secagg_threshold if secure_aggregation else None,
        "secagg_rule": SECAGG_RULE if secure_aggregation else None,
    }


def build_card(
    report: PrivacyReport | dict[str, Any] | None,
    *,
    method: str,
    participation: float = 1.0,
    participation_accounting: str | None = None,
    secure_aggregation: bool = True,
    secagg_threshold: float | None = 0.5,
    schema_digest: str | None = None,
    public_values: dict[str, Any] | None = None,
    run_status: str | None = None,
) -> PrivacyCard:
    """The card of a run from its privacy report and public facts.

    Parameters
    ----------
    report : PrivacyReport, dict or None
        The ledger's report, or its dict (``PrivacyReport.to_dict()``,
        ``PrivacyLedger.close()``, a ``privacy.json``). ``None`` or a dict
        whose ``epsilon`` is ``"inf"``: a non-private run.
    participation, participation_accounting :
        ρ and how it was accounted (``valid``, ``tight``, ``paper``; ``None``
        when the method has no such setting).
    secure_aggregation, secagg_threshold :
        Whether replies were summed through the masking shim, and its
        threshold fraction.
    schema_digest, public_values :
        :meth:`fedpriv.data.Schema.digest` and the public values (bounds,
        domains, label set, record bound, seed, clients, query structure).
    run_status :
        ``completed``, ``degraded`` or ``failed`` (``fedpriv.federation.status``).
    """
    common = {
        "method": method,
        "trust_model": trust_model(
            secure_aggregation=secure_aggregation, secagg_threshold=secagg_threshold
        ),
        "participation": {"rho": float(participation), "accounting": participation_accounting},
        "schema_digest": schema_digest,
        "public_values": dict(public_values or {}),
        "run_status": None if run_status is None else str(run_status),
        "versions": {"fedpriv": __version__},
    }
    d = report.to_dict() if isinstance(report, PrivacyReport) else report
    if d is None or _num(d.get("epsilon")) == math.inf:
        budget = {} if d is None else d.get("budget", {})
        return PrivacyCard(
            private=False,
            epsilon=math.inf,
            delta=None,
            epsilon_pld=math.inf,
            epsilon_rdp=math.inf,
            pld_method=None,
            binding_accountant=None,
            certified=False,
            budget_epsilon=_num(budget.get("epsilon")),
            budget_delta=budget.get("delta"),
            events=_events(d),
            caveats=(NON_PRIVATE_CAVEAT,),
            scope=(d or {}).get("scope", ""),
            **common,
        )
    if isinstance(report, PrivacyReport):
        caveats = [*report.caveats, *([] if report.accounting.certified else [PAPER_CAVEAT])]
    else:
        caveats = _split_caveat(d.get("caveat", ""))
    common["versions"] = {**common["versions"], **d.get("versions", {})}
    return PrivacyCard(
        private=True,
        epsilon=_num(d["epsilon"]),
        delta=float(d["delta"]),
        epsilon_pld=_num(d["epsilon_pld"]),
        epsilon_rdp=_num(d["epsilon_rdp"]),
        pld_method=d.get("pld_method"),
        binding_accountant=d.get("binding_accountant"),
        certified=bool(d["certified"]),
        budget_epsilon=_num(d["budget"]["epsilon"]),
        budget_delta=float(d["budget"]["delta"]),
        neighbouring_relation=d.get("neighbouring_relation", NEIGHBOURING),
        unit=str(d.get("unit", "record")),
        events=_events(d),
        caveats=tuple(caveats),
        scope=d.get("scope", ""),
        **common,
    )


def _split_caveat(text: str) -> list[str]:
    # The report joins its caveats with "; " and appends the paper caveat last.
    if not text:
        return []
    if text.endswith(PAPER_CAVEAT):
        head = text[: -len(PAPER_CAVEAT)].rstrip("; ")
        return [*([head] if head else []), PAPER_CAVEAT]
    return [text]


def _events(d: dict[str, Any] | None) -> tuple[CardEvent, ...]:
    out = []
    for e in (d or {}).get("events", ()):
        try:
            text = repr(event_from_dict(e["event"]))
        except (KeyError, TypeError, ValueError, AttributeError, ImportError):
            text = str(e["event"])  # an event class this install lacks: its dict
        out.append(CardEvent(index=int(e["index"]), label=e["label"], event=text, spec=e["event"]))
    return tuple(out)


def report_from_dict(d: dict[str, Any], caveats: tuple[str, ...] = ()) -> PrivacyReport:
    """A :class:`PrivacyReport` from its :meth:`~PrivacyReport.to_dict` form.

    ``caveats`` are the report's own (its dict joins them with the paper
    caveat into one string); the rebuilt report's ``to_dict()`` equals ``d``
    up to ``versions`` (the current install's).
    """
    entries = tuple(
        LedgerEntry(index=int(e["index"]), label=e["label"], event=event_from_dict(e["event"]))
        for e in d["events"]
    )
    acc = accounting.Accounting(
        delta=float(d["delta"]),
        epsilon_pld=_num(d["epsilon_pld"]),
        pld_method=d["pld_method"],
        epsilon_rdp=_num(d["epsilon_rdp"]),
        epsilon=_num(d["epsilon"]),
        binding=d["binding_accountant"],
        certified=all(is_certified(e.event) for e in entries),
    )
    budget = PrivacyBudget(epsilon=_num(d["budget"]["epsilon"]), delta=d["budget"]["delta"])
    reserved = tuple(
        (event_from_dict(r["event"]), int(r["count"])) for r in d.get("unused_reservations", ())
    )
    return PrivacyReport(
        budget=budget,
        accounting=acc,
        entries=entries,
        discretization=float(d["pld_value_discretization"]),
        reserved=reserved,
        caveats=tuple(caveats),
        scope=d.get("scope", ""),
        unit=str(d.get("unit", "record")),
    )
