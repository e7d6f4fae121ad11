"""The privacy card: JSON round trip, Markdown lists every release, non-private and
uncertified runs say so, a malformed card is refused naming the key."""

import json
import math

import pytest
from dp_accounting import dp_event

from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.card import (
    NON_PRIVATE_CAVEAT,
    CardError,
    PrivacyCard,
    build_card,
    report_from_dict,
)
from fedpriv.privacy.events import PAPER_CAVEAT, EffectiveRateDpEvent

LABELS = ("round 1 gradient sum", "round 2 gradient sum", "leaf counts")


def _ledger() -> PrivacyLedger:
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=8.0, delta=1e-5))
    sampled = dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.5))
    ledger.spend(sampled, label=LABELS[0])
    ledger.spend(sampled, label=LABELS[1])
    ledger.spend(dp_event.GaussianDpEvent(4.0), label=LABELS[2])
    return ledger


def _card(report, **kw) -> PrivacyCard:
    return build_card(
        report,
        method="boosting",
        participation=0.5,
        participation_accounting="valid",
        schema_digest="0123456789abcdef",
        public_values={"seed": 7, "num_clients": 3, "record_bound": 100},
        run_status="completed",
        **kw,
    )


def test_card_states_the_report_and_round_trips_through_json():
    report = _ledger().report()
    card = _card(report)
    assert card.private and card.certified and card.certified_accountant == card.binding_accountant
    assert card.epsilon == report.epsilon
    assert card.epsilon == min(card.epsilon_pld, card.epsilon_rdp)
    assert (card.delta, card.budget_epsilon, card.budget_delta) == (1e-5, 8.0, 1e-5)
    assert card.neighbouring_relation == "add_or_remove_one"
    assert card.participation == {"rho": 0.5, "accounting": "valid"}
    assert card.trust_model["secure_aggregation"] and card.trust_model["secagg_threshold"] == 0.5
    assert [e.label for e in card.events] == list(LABELS)
    assert card.events[2].event == repr(dp_event.GaussianDpEvent(4.0))
    again = PrivacyCard.from_dict(json.loads(json.dumps(card.to_dict(), allow_nan=False)))
    assert again == card
    # The journal's dict (privacy.json) gives the same card as the report object.
    assert _card(_ledger().close()) == card


def test_markdown_names_every_release_and_the_guarantee():
    card = _card(_ledger().report())
    md = card.to_markdown()
    for e in card.events:
        assert f"| {e.index} | {e.label} | `{e.event}` |" in md
    assert "**certified**" in md and "add_or_remove_one" in md
    assert f"{card.epsilon_pld:.6g}" in md and f"{card.epsilon_rdp:.6g}" in md
    assert "ρ = 0.5, accounting: `valid`" in md and "0123456789abcdef" in md
    assert "threshold 0.5" in md and "**Run status:** completed" in md


@pytest.mark.parametrize("report", [None, {"epsilon": "inf", "complete": True}])
def test_a_non_private_run_gets_a_card_that_says_so(report):
    card = _card(report)
    assert not card.private and not card.certified and math.isinf(card.epsilon)
    assert card.caveats == (NON_PRIVATE_CAVEAT,) and card.events == ()
    d = card.to_dict()
    assert d["epsilon"] == "inf" and d["delta"] is None
    assert PrivacyCard.from_dict(json.loads(json.dumps(d, allow_nan=False))) == card
    assert "Non-private run (ε = ∞)" in card.to_markdown()


def test_caveats_void_the_card_and_survive_the_journal_dict():
    ledger = _ledger()
    ledger.mark_uncertified("private randomness from a public seed")
    inner = dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(3.0))
    ledger.spend(EffectiveRateDpEvent(0.5, inner), label="paper-accounted round")
    card = _card(ledger.report())
    assert not card.certified and card.certified_accountant is None
    assert card.caveats == ("private randomness from a public seed", PAPER_CAVEAT)
    assert _card(ledger.report().to_dict()).caveats == card.caveats
    assert "**NOT certified**" in card.to_markdown()


def test_report_is_rebuilt_from_its_dict():
    ledger = _ledger()
    ledger.mark_uncertified("why")
    report = ledger.report()
    rebuilt = report_from_dict(report.to_dict(), report.caveats)
    assert rebuilt.to_dict() == report.to_dict()
    assert rebuilt.epsilon == report.epsilon and rebuilt.entries == report.entries


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"epsilon": "a lot"}, "epsilon must be a number or 'inf'"),
        ({"certified": "yes"}, "certified must be true or false"),
        ({"card_version": 99}, "card_version must be 1"),
    ],
)
def test_a_malformed_card_is_refused_naming_the_key(change, message):
    d = _card(_ledger().report()).to_dict()
    with pytest.raises(CardError, match=message):
        PrivacyCard.from_dict({**d, **change})
    del d["method"]
    with pytest.raises(CardError, match="missing key 'method'"):
        PrivacyCard.from_dict(d)
