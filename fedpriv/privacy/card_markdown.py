"""The privacy card as a Markdown document (:meth:`PrivacyCard.to_markdown`).

The document states ε at δ with both accountants' figures and whether it is
certified, the neighbouring relation and trust model, the participation
accounting, every recorded DpEvent by label and ``repr``, the public values,
the caveats and the run's status (:mod:`fedpriv.privacy.card`).
"""

from __future__ import annotations

import math

from fedpriv.privacy.card import NEIGHBOURING, PrivacyCard

_NEIGHBOURING_TEXT = "datasets differing by adding or removing one record"
#: What a unit-level guarantee rests on besides the mechanisms (fedpriv.privacy.units).
_UNIT_PRECONDITION = (
    "**Unit precondition:** every unit's records are held by one node (the schema's "
    '`unit_scope = "node"`): the consortium guarantees it; a node cannot check it alone '
    "(a unit held by two nodes could contribute twice the bound)."
)


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "∞" if math.isinf(x) else f"{x:.6g}"


def render_markdown(card: PrivacyCard) -> str:
    """:meth:`PrivacyCard.to_markdown`."""
    lines = [f"# Privacy card: `{card.method}`", ""]
    if not card.private:
        lines += ["**Non-private run (ε = ∞): this model carries no privacy guarantee.**", ""]
    else:
        status = "**certified**" if card.certified else "**NOT certified** (see caveats)"
        lines += [
            f"(ε, δ) = ({_fmt(card.epsilon)}, {_fmt(card.delta)}), {status}; "
            f"budget ({_fmt(card.budget_epsilon)}, {_fmt(card.budget_delta)}).",
            "",
            "| accountant | ε | role |",
            "|---|---|---|",
            f"| PLD ({card.pld_method}) | {_fmt(card.epsilon_pld)} | primary |",
            f"| RDP | {_fmt(card.epsilon_rdp)} | cross-check |",
            "",
            f"The reported ε is the smaller sound bound; binding: `{card.binding_accountant}`"
            + (f"; certified figure: `{card.certified_accountant}`." if card.certified else "."),
            "",
        ]
    relation = _NEIGHBOURING_TEXT if card.neighbouring_relation == NEIGHBOURING else ""
    if relation and card.unit != "record":
        relation = "datasets differing by adding or removing one unit with all its records"
    lines += [
        f"**Neighbouring relation:** `{card.neighbouring_relation}` ({relation}); "
        f"unit: {card.unit}.",
        "",
        *([_UNIT_PRECONDITION, ""] if card.unit != "record" else []),
        "## Trust model",
        "",
    ]
    tm = card.trust_model
    for key in ("server", "peers", "observers"):
        if key in tm:
            lines.append(f"* **{key}**: {tm[key]}")
    if tm.get("secure_aggregation"):
        lines.append(
            f"* **secure aggregation**: on, threshold {tm.get('secagg_threshold')} "
            f"({tm.get('secagg_rule')})"
        )
    elif tm:
        lines.append("* **secure aggregation**: off")
    p = card.participation
    lines += [
        "",
        "## Participation",
        "",
        f"ρ = {p.get('rho')}, accounting: `{p.get('accounting') or 'n/a'}`",
        "",
        f"## Releases ({len(card.events)} DpEvents)",
        "",
    ]
    if card.events:
        lines += ["| # | label | event |", "|---|---|---|"]
        lines += [f"| {e.index} | {e.label} | `{e.event}` |" for e in card.events]
    else:
        lines.append("None recorded.")
    lines += ["", "## Public values", "", f"* schema digest: `{card.schema_digest}`"]
    for key, value in card.public_values.items():
        lines.append(f"* {key}: `{value}`")
    lines += ["", "## Caveats", ""]
    lines += [f"* {c}" for c in card.caveats] or ["None."]
    lines += ["", f"**Run status:** {card.run_status or 'not given'}"]
    if card.scope:
        lines.append(f"**Scope:** {card.scope}")
    versions = ", ".join(f"{k} {v}" for k, v in card.versions.items())
    lines += ["", f"_Versions: {versions}._", ""]
    return "\n".join(lines)
