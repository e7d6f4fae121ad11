"""What a privacy ledger records and reports: budget, entries, report, journal.

:class:`PrivacyBudget` (the target), :class:`LedgerEntry` (one recorded
release) and :class:`PrivacyReport` (the accounting of a run, and its JSON
form, ``privacy.json``), with the journal a ledger rewrites after every change
(:class:`FileJournal`, :data:`JOURNAL_DISCRETIZATION`).

Kept apart from :mod:`fedpriv.privacy.ledger` so that module holds only the
ledger's bookkeeping (reservations, budget checks, releases); the names are
re-exported there, and its docstring describes the journal.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from fedpriv import __version__
from fedpriv.atomic import write_json_atomic
from fedpriv.privacy import accounting
from fedpriv.privacy.cache import DP_ACCOUNTING_VERSION
from fedpriv.privacy.events import (
    PAPER_CAVEAT,
    BoundedRangeDpEvent,
    PureDpEvent,
    event_to_dict,
)
from fedpriv.validation import check_delta, check_positive


@dataclass(frozen=True, kw_only=True)
class PrivacyBudget:
    """The run's target (ε, δ). ``epsilon=math.inf`` marks a non-private run."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon, allow_inf=True))
        object.__setattr__(self, "delta", check_delta("delta", self.delta))


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release."""

    index: int
    label: str
    event: dp_event.DpEvent


@dataclass(frozen=True)
class PrivacyReport:
    """What a run spent. Serialises to JSON with :meth:`to_json`."""

    budget: PrivacyBudget
    accounting: accounting.Accounting
    entries: tuple[LedgerEntry, ...]
    discretization: float
    reserved: tuple[tuple[dp_event.DpEvent, int], ...] = field(default=())
    #: Why the run's guarantee does not hold whatever its ε (e.g. seeded private randomness).
    caveats: tuple[str, ...] = field(default=())
    #: What the figures cover when that is not a whole run (e.g. one estimator fit).
    scope: str = ""
    #: Total variation charged for distributed noise (:mod:`fedpriv.privacy.distributed`);
    #: ``delta`` covers (1 + e^ε)·slack of it, the accountants the rest.
    slack: float = 0.0
    #: The distributed-noise setting, when the run used it.
    distributed: Any = None
    #: Whom the guarantee protects: ``"record"``, or ``"<unit column>, at most m
    #: records"`` (:mod:`fedpriv.privacy.units`): neighbours differ by one such unit.
    unit: str = "record"

    @property
    def epsilon(self) -> float:
        return self.accounting.epsilon

    @property
    def pure_epsilon(self) -> float | None:
        """Basic composition (Dwork & Roth 2014, Thm. 3.16) of the releases when every
        one is pure ε-DP (Laplace, bounded-range, pure events): a (Σε, 0)-DP guarantee.
        ``None`` when any release is not pure (then only ``epsilon`` at ``delta`` holds)."""
        total = 0.0
        for e in self.entries:
            ev = e.event
            if isinstance(ev, dp_event.LaplaceDpEvent):
                total += 1.0 / ev.noise_multiplier
            elif isinstance(ev, (BoundedRangeDpEvent, PureDpEvent)):
                total += ev.epsilon
            else:
                return None
        return total if self.entries else None

    @property
    def certified(self) -> bool:
        """False when ``epsilon`` rests on the paper's ρ·q participation accounting,
        or when a caveat (e.g. private randomness from a public seed) voids it."""
        return self.accounting.certified and not self.caveats

    @property
    def caveat(self) -> str:
        reasons = [*self.caveats, *([] if self.accounting.certified else [PAPER_CAVEAT])]
        return "; ".join(reasons)

    def to_dict(self) -> dict[str, Any]:
        acc = self.accounting
        return {
            "budget": {"epsilon": _json_float(self.budget.epsilon), "delta": self.budget.delta},
            "delta": acc.delta,
            "epsilon": _json_float(acc.epsilon),
            "certified": self.certified,
            "caveat": self.caveat,
            "epsilon_pld": _json_float(acc.epsilon_pld),
            "pld_method": acc.pld_method,
            "epsilon_rdp": _json_float(acc.epsilon_rdp),
            "binding_accountant": acc.binding,
            **(
                {"epsilon_pure_basic_composition": self.pure_epsilon}
                if self.pure_epsilon is not None
                else {}
            ),
            "neighbouring_relation": "add_or_remove_one",
            "unit": self.unit,
            "pld_value_discretization": self.discretization,
            "n_releases": len(self.entries),
            "events": [
                {"index": e.index, "label": e.label, "event": event_to_dict(e.event)}
                for e in self.entries
            ],
            "unused_reservations": [
                {"event": event_to_dict(ev), "count": n} for ev, n in self.reserved
            ],
            "versions": {"fedpriv": __version__, "dp_accounting": DP_ACCOUNTING_VERSION},
            **({"scope": self.scope} if self.scope else {}),
            **(
                {
                    "noise": "distributed",
                    "tolerated_dropouts": self.distributed.dropouts,
                    "distributed_tv_slack": self.slack,
                    "delta_of_slack": _slack_delta(self.budget, self.slack),
                }
                if self.distributed is not None
                else {"noise": "central"}
            ),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)


def _json_float(x: float) -> float | str:
    # JSON has no infinity; a non-private run reports the string "inf".
    return "inf" if math.isinf(x) else x


def _slack_delta(budget: PrivacyBudget, slack: float) -> float:
    """The δ a total-variation slack H costs at the budget's ε: (1 + e^ε)·H
    (:mod:`fedpriv.privacy.distributed`)."""
    if not slack:
        return 0.0
    return (1.0 + math.exp(min(budget.epsilon, 700.0))) * slack


#: PLD discretisation of the journal's in-progress entries (module docstring).
JOURNAL_DISCRETIZATION = 1e-3


@dataclass(frozen=True)
class FileJournal:
    """A ledger journal kept in one JSON file, replaced atomically at every write."""

    path: str | os.PathLike[str]

    def __call__(self, report: dict[str, Any]) -> None:
        write_json_atomic(self.path, report)
