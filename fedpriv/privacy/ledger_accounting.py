"""The ledger's read side: ε of what is spent or planned, its report, its journal.

:class:`LedgerAccounting` holds the methods of
:class:`~fedpriv.privacy.ledger.PrivacyLedger` that only read its counts
(accounting them, reporting them, journalling the report); the ledger keeps
everything that checks and records a spend. Separate so each module stays
readable; the ledger's state and its journal rules are documented in
:mod:`fedpriv.privacy.ledger`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from dp_accounting import dp_event

from fedpriv.privacy import accounting
from fedpriv.privacy.ledger_report import JOURNAL_DISCRETIZATION, PrivacyReport, _slack_delta
from fedpriv.privacy.pld_size import PLDSizeError


class LedgerAccounting:
    """Mixin of :class:`~fedpriv.privacy.ledger.PrivacyLedger`: accounting, report, journal.

    Reads the ledger's ``_budget``, ``_vdi``, ``_events``, ``_spent``,
    ``_reserved``, ``_entries``, ``_caveats``, ``_slack``, ``distributed``,
    ``_journal`` and ``_complete`` (set in ``PrivacyLedger.__init__``).
    """

    def _items(self, counts: Counter[int]) -> list[tuple[dp_event.DpEvent, int]]:
        return [(self._events[i], n) for i, n in counts.items() if n > 0]

    @property
    def accounting_delta(self) -> float:
        """The δ the accountants may use: the budget's, less what the slack costs."""
        return self._budget.delta - _slack_delta(self._budget, self._slack)

    def _account(self, extra: Counter[int]) -> accounting.Accounting:
        total = self._spent + self._reserved + extra
        return accounting.account(
            self._items(total), self.accounting_delta, discretization=self._vdi
        )

    def planned_items(self) -> list[tuple[dp_event.DpEvent, int]]:
        """Everything spent and reserved so far: the run's whole declared plan."""
        return self._items(self._spent + self._reserved)

    def planned_epsilon(self) -> float:
        """ε of everything spent and reserved (the whole plan), at :attr:`accounting_delta`."""
        return self._account(Counter()).epsilon

    def epsilon(self) -> float:
        """Certified ε spent so far at the budget's δ."""
        return self.report().epsilon

    def epsilon_upper_bound(self, *, discretization: float = 1e-3) -> float:
        """A cheap upper bound on ε spent so far, for progress output.

        A pessimistic PLD on a coarser grid still upper-bounds ε (Doroshenko
        et al. 2022, Thm. 3.2) and costs a fraction of the 1e-4 figure.
        """
        if not self._spent:
            return 0.0
        spent = self._items(self._spent)
        try:
            eps, _ = accounting.pld_epsilon(
                spent, self._budget.delta, discretization=discretization, cache=False
            )
        except PLDSizeError:  # too large to PLD-account: the RDP figure alone
            eps = math.inf
        return min(eps, accounting.rdp_epsilon(spent, self._budget.delta))

    def report(self, *, discretization: float | None = None) -> PrivacyReport:
        """Accounting of everything released so far (reservations excluded).

        ``discretization`` coarser than the ledger's gives cheaper figures that
        still upper-bound ε (a pessimistic PLD on a coarser grid, Doroshenko et
        al. 2022, Thm. 3.2); the report states the one used.
        """
        vdi = self._vdi if discretization is None else max(self._vdi, discretization)
        acc = accounting.account(
            self._items(self._spent), self.accounting_delta, discretization=vdi
        )
        return PrivacyReport(
            budget=self._budget,
            accounting=acc,
            entries=tuple(self._entries),
            discretization=vdi,
            reserved=tuple(self._items(self._reserved)),
            caveats=tuple(self._caveats),
            slack=self._slack,
            distributed=self.distributed,
            unit=self.unit,
        )

    @property
    def unit(self) -> str:
        """Whom the figures protect: ``"record"``, or ``"<unit column>, at most m
        records"`` once every fit charged here declared that unit (:meth:`declare_unit`)."""
        return getattr(self, "_unit", None) or "record"

    def declare_unit(self, unit: str) -> None:
        """A fit's privacy unit (:attr:`fedpriv.data.Schema.privacy_unit`), declared before
        it spends: a ledger that holds only fits of one unit reports it; a ledger that
        also holds another's (or undeclared releases) reports ``"record"``, the weaker
        guarantee that holds for all of them. Applies to every ancestor too."""
        for led in self._chain():
            fresh = getattr(led, "_unit", None) is None and not led._spent and not led._reserved
            if fresh:
                led._unit = str(unit)
            elif led.unit != unit:
                led._unit = "record"
            led._journal_write()

    def mark_uncertified(self, reason: str) -> None:
        """Void the run's guarantee with ``reason`` (reported as ``certified: false``);
        a scoped ledger voids its ancestors' too."""
        for led in self._chain():
            if reason and reason not in led._caveats:
                led._caveats.append(str(reason))
                led._journal_write()

    # -- journal --------------------------------------------------------
    def _journal_write(self) -> dict[str, Any] | None:
        if self._journal is None:
            return None
        # In progress: ε on the coarser grid (an upper bound, ~1/40 of the cost);
        # the final entry at the ledger's own discretisation.
        vdi = None if self._complete else JOURNAL_DISCRETIZATION
        entry = {**self.report(discretization=vdi).to_dict(), "complete": self._complete}
        self._journal(entry)
        return entry

    def close(self) -> dict[str, Any]:
        """Write the final journal entry (``"complete": true``): the run ended normally.

        Returns that entry (the report's dict). A ledger that is never closed (a
        crashed run) leaves ``"complete": false``.
        """
        self._complete = True
        return self._journal_write() or {**self.report().to_dict(), "complete": True}
