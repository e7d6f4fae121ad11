"""The run's privacy ledger: every DpEvent in release order, one budget.

A run owns exactly one :class:`PrivacyLedger`. Every release goes through
:meth:`PrivacyLedger.release` (or :meth:`PrivacyLedger.spend` for a release
whose noise is drawn elsewhere): the ledger accounts the run *including* the
new event first, raises :class:`PrivacyBudgetExceededError` if that would pass
the budget, and only then records the event and draws the noise.

Checking the whole composition before every release is exact but costs one
PLD composition per check. A learner that knows its plan (T rounds of the same
subsampled Gaussian) calls :meth:`reserve` once: the plan is checked as a
whole, and later releases that match reserved events draw the reservation
down without re-accounting. This is sound because composing fewer mechanisms
never costs more privacy (post-processing: drop the extra outputs).

Journal. A ledger given ``journal=`` (a path, or a callable taking the report
dict) rewrites its whole report after every change (reservation, spend,
release, caveat), with ``"complete": false`` until :meth:`PrivacyLedger.close`
writes the final one with ``"complete": true``. A path is replaced atomically
(a fsync'd temporary file renamed over it, :mod:`fedpriv.atomic`) and written
before a release's output is returned: a run that crashes at any point leaves
a journal listing exactly the releases made. Each in-progress rewrite
re-accounts the run on a coarser PLD grid (:data:`JOURNAL_DISCRETIZATION`,
stated in the entry's ``pld_value_discretization``): still an upper bound on
ε, at a few ms instead of the ~0.1-0.3 s of the final figure, which a round of
~0.3 s could not carry. ``close`` writes the final report at the ledger's own
discretisation.

Several fits on the same rows spend together. :meth:`PrivacyLedger.scope`
gives one fit a child ledger with the fit's own budget (what its strategy
calibrates to) inside a parent that holds the total: every reservation and
release is checked against both budgets before anything is recorded or any
noise drawn, and recorded in both, so the parent accounts the composition
of all fits. A ledger is the one account of its data's spend: ``copy`` and
``deepcopy`` return the ledger itself (scikit-learn's ``clone`` deep-copies
parameters, so clones of an estimator keep charging the same ledger).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from dp_accounting import dp_event

from fedpriv.privacy import accounting
from fedpriv.privacy.ledger_accounting import LedgerAccounting
from fedpriv.privacy.ledger_report import (  # noqa: F401 - JOURNAL_DISCRETIZATION, PrivacyReport re-exported
    JOURNAL_DISCRETIZATION,
    FileJournal,
    LedgerEntry,
    PrivacyBudget,
    PrivacyReport,
    _slack_delta,
)
from fedpriv.privacy.mechanisms import Mechanism
from fedpriv.privacy.pld import flatten
from fedpriv.privacy.randomness import check_private
from fedpriv.validation import check_count, check_positive, check_probability


def release_event(mechanism: Mechanism, sampling_probability: float = 1.0) -> dp_event.DpEvent:
    """The DpEvent :meth:`PrivacyLedger.release` records for ``mechanism`` at rate q.

    Below q = 1 a ``PoissonSampledDpEvent`` (amplification by subsampling); at
    q = 1 the mechanism's own event. Learners reserve their plan with this, so
    reserved and released events match exactly.
    """
    q = check_probability("sampling_probability", sampling_probability)
    event = mechanism.dp_event
    return dp_event.PoissonSampledDpEvent(q, event) if q < 1.0 else event


def _innermost(event: dp_event.DpEvent) -> dp_event.DpEvent:
    while isinstance(getattr(event, "event", None), dp_event.DpEvent):
        event = event.event
    return event


class PrivacyBudgetExceededError(RuntimeError):
    """A release would take the run past its (ε, δ) budget; nothing was released."""


class PrivacyLedger(LedgerAccounting):
    """Records every DpEvent of a run and refuses releases past the budget.

    Parameters
    ----------
    budget : PrivacyBudget
        Target (ε, δ); the ledger reports ε at ``budget.delta``.
    discretization : float
        PLD value discretisation, in (0, 1e-2]. Calibration guarantees its
        targets at 1e-4, so the default matches it.
    journal : path or callable, optional
        Where to keep the report current (module docstring): a file rewritten
        atomically after every change, or a callable given the report dict
        (with ``"complete"``). ``None`` (default): no journal.
    """

    def __init__(
        self,
        *,
        budget: PrivacyBudget,
        discretization: float = accounting.PLD_DISCRETIZATION,
        journal: str | os.PathLike[str] | Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        vdi = check_positive("discretization", discretization)
        if vdi > 1e-2:
            raise ValueError(f"discretization must lie in (0, 1e-2]; got {discretization!r}")
        self._budget = budget
        self._vdi = vdi
        self._entries: list[LedgerEntry] = []
        self._caveats: list[str] = []
        # Counts are kept per interned flat event id: dp-accounting's attrs
        # events rehash their whole tree on every lookup (~2.5 µs each), which
        # dominated a DP-SGD step's bookkeeping. ``_events[i]`` is event i.
        self._events: list[dp_event.DpEvent] = []
        self._ids: dict[dp_event.DpEvent, int] = {}
        self._spent: Counter[int] = Counter()
        self._reserved: Counter[int] = Counter()
        # (mechanism, q) -> (event, its flat (id, count) groups), for repeated releases.
        self._releases: dict[tuple[Mechanism, float], tuple[dp_event.DpEvent, Counter[int]]] = {}
        if journal is not None and not callable(journal):
            journal = FileJournal(journal)
        self._journal: Callable[[dict[str, Any]], None] | None = journal
        self._complete = False
        self._slack = 0.0  # total variation charged for distributed noise
        self.distributed = None  # DistributedNoise, set once by the runtime before any event
        self._journal_write()  # the file exists (empty ledger) before the first release
        self._parent: PrivacyLedger | None = None

    def __repr__(self) -> str:
        b = self._budget
        return (
            f"PrivacyLedger(budget=(ε={b.epsilon:g}, δ={b.delta:g}), "
            f"releases={len(self._entries)}{', scoped' if self._parent else ''})"
        )

    def __copy__(self) -> PrivacyLedger:
        return self  # one account per data: a copy would fork the spend (module docstring)

    def __deepcopy__(self, memo: dict) -> PrivacyLedger:
        return self

    def scope(self, budget: PrivacyBudget) -> PrivacyLedger:
        """A child ledger for one fit: ``budget`` is the fit's, this ledger's is the total.

        The child's reservations and releases are checked against its own
        budget and against every ancestor's (with the ancestors' spend and
        reservations) before anything is recorded; then recorded in all. A
        fit that would take this ledger past its budget raises
        :class:`PrivacyBudgetExceededError` at its first reservation, before
        any noise is drawn. The child's report covers the fit; this one's,
        every fit charged to it.
        """
        if not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        child = PrivacyLedger(budget=budget, discretization=self._vdi)
        child._parent = self
        return child

    def _chain(self) -> list[PrivacyLedger]:
        """This ledger, then its ancestors."""
        out: list[PrivacyLedger] = []
        led: PrivacyLedger | None = self
        while led is not None:
            out.append(led)
            led = led._parent
        return out

    @staticmethod
    def _shared(what: str, led: PrivacyLedger, own: PrivacyLedger) -> str:
        return what if led is own else f"{what}, charged to the shared ledger,"

    # -- accounting -----------------------------------------------------
    @property
    def budget(self) -> PrivacyBudget:
        return self._budget

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries)

    def _groups(self, event: dp_event.DpEvent, count: int = 1) -> Counter[int]:
        """``event`` flattened into interned (id, count) groups."""
        groups: Counter[int] = Counter()
        for flat, n in flatten(event, count):
            if (i := self._ids.get(flat)) is None:
                i = self._ids[flat] = len(self._events)
                self._events.append(flat)
            groups[i] += n
        return groups

    def _check(self, extra: Counter[int], what: str) -> None:
        if math.isinf(self._budget.epsilon):
            return
        acc = self._account(extra)
        if acc.epsilon > self._budget.epsilon:
            raise PrivacyBudgetExceededError(
                f"{what} would spend ε={acc.epsilon:.6g} at δ={self._budget.delta:g} "
                f"(PLD {acc.epsilon_pld:.6g}, RDP {acc.epsilon_rdp:.6g}), "
                f"over the budget ε={self._budget.epsilon:g}; nothing was released"
            )

    # -- spending -------------------------------------------------------
    def reserve(self, event: dp_event.DpEvent, count: int = 1) -> None:
        """Check a planned ``count`` releases of ``event`` now; raise if they don't fit."""
        if not isinstance(event, dp_event.DpEvent):
            raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}")
        check_count("count", count)
        what = f"reserving {count} × {event}"
        extras = [(led, led._groups(event, count)) for led in self._chain()]
        for led, extra in extras:  # every budget first, then record in all
            led._check(extra, self._shared(what, led, self))
        for led, extra in extras:
            led._reserved.update(extra)
        for led, _ in extras:
            led._journal_write()

    def use_distributed_noise(self, setting) -> None:
        """Mark this run's noise as distributed (:mod:`fedpriv.privacy.distributed`);
        before any event, in this ledger and its ancestors' view of it."""
        if self._entries or self._reserved:
            raise RuntimeError("the noise placement is set before any reservation or release")
        for led in self._chain():  # a scoped fit's parent reports it too
            led.distributed = setting

    def reserve_slack(self, tv: float) -> None:
        """Charge a total-variation slack H (distributed noise) against δ, now and for good.

        The run's transcript is then within H of one the accountants cover, so it
        is (ε, δ_acc + (1 + e^ε)·H)-DP; the accountants get δ − (1 + e^ε)·H. Raises
        (nothing recorded) if that leaves no δ, or if the plan no longer fits.
        """
        tv = float(tv)
        if not (math.isfinite(tv) and tv >= 0.0):
            raise ValueError(f"tv must be a finite number >= 0; got {tv!r}")
        chain = self._chain()
        for led in chain:
            if _slack_delta(led._budget, led._slack + tv) >= led._budget.delta / 2:
                raise PrivacyBudgetExceededError(
                    f"distributed noise's slack {led._slack + tv:.3g} would cost over half of "
                    f"δ = {led._budget.delta:g}; use more noise or fewer coordinates"
                )
        for led in chain:
            led._slack += tv
            try:
                led._check(Counter(), f"the distributed-noise slack {tv:.3g}")
            except PrivacyBudgetExceededError:
                for back in chain[: chain.index(led) + 1]:
                    back._slack -= tv
                raise
        for led in chain:
            led._journal_write()

    def spend_instead(
        self, planned: dp_event.DpEvent, actual: dp_event.DpEvent, *, label: str = ""
    ) -> None:
        """Record ``actual`` in place of one reserved ``planned``: the survivors' actual
        noise, never the planned one (:mod:`fedpriv.privacy.distributed`).

        The caller guarantees that ``actual`` is a post-processing of ``planned``
        (the same event with more Gaussian noise: adding independent noise to a
        release of ``planned`` gives one of ``actual``), so the budget check the
        reservation passed still holds and is not repeated. Without a reservation
        of ``planned`` in every ledger of the chain, ``actual`` is checked as a
        release of its own.
        """
        chain = self._chain()
        held = [led._groups(planned) for led in chain]
        if not all(
            all(led._reserved[i] >= n for i, n in g.items())
            for led, g in zip(chain, held, strict=True)
        ):
            self.spend(actual, label=label)
            return
        for led, groups in zip(chain, held, strict=True):
            for i, n in groups.items():
                led._reserved[i] -= n
            led._commit(actual, label, (led._groups(actual), False))

    def cancel_reservations(self) -> None:
        """Drop whatever is still reserved (e.g. a learner stopped early), in the ancestors too."""
        for led in self._chain()[1:]:
            for i, n in self._reserved.items():
                for j, m in led._groups(self._events[i], n).items():
                    left = led._reserved[j] - m
                    if left > 0:
                        led._reserved[j] = left
                    else:
                        led._reserved.pop(j, None)
            led._journal_write()
        self._reserved.clear()
        self._journal_write()

    def _admit(
        self, event: dp_event.DpEvent, label: str, groups: Counter[int] | None = None
    ) -> tuple[Counter[int], bool]:
        if groups is None:
            if not isinstance(event, dp_event.DpEvent):
                raise TypeError(
                    f"event must be a dp_accounting DpEvent, got {type(event).__name__}"
                )
            groups = self._groups(event)
        covered = all(self._reserved[i] >= n for i, n in groups.items())
        if not covered:
            self._check(groups, f"release {label or event!s}")
        return groups, covered

    def _admit_all(
        self, event: dp_event.DpEvent, label: str, groups: Counter[int] | None = None
    ) -> list[tuple[PrivacyLedger, tuple[Counter[int], bool]]]:
        """:meth:`_admit` in this ledger and every ancestor (all checks before any record)."""
        admitted = [(self, self._admit(event, label, groups))]
        for led in self._chain()[1:]:
            admitted.append((led, led._admit(event, self._shared(label or str(event), led, self))))
        return admitted

    def _commit(
        self, event: dp_event.DpEvent, label: str, admitted: tuple[Counter[int], bool]
    ) -> None:
        groups, covered = admitted
        for i, n in groups.items():
            if covered:
                left = self._reserved[i] - n
                if left > 0:
                    self._reserved[i] = left
                else:
                    del self._reserved[i]
            self._spent[i] += n
        self._entries.append(LedgerEntry(index=len(self._entries), label=label, event=event))
        # Journalled before the release's output goes anywhere (module docstring).
        self._journal_write()

    def spend(self, event: dp_event.DpEvent, *, label: str = "") -> None:
        """Record ``event`` after checking the budget; raise before recording if over."""
        for led, admitted in self._admit_all(event, label):
            led._commit(event, label, admitted)

    def release(
        self,
        mechanism: Mechanism,
        value,
        *,
        rng: np.random.Generator,
        sampling_probability: float = 1.0,
        event: dp_event.DpEvent | None = None,
        label: str = "",
    ):
        """Check, record, then run ``mechanism`` on ``value``.

        ``sampling_probability`` is the Poisson rate at which the records behind
        ``value`` were sampled; below 1 the event is recorded as a
        ``PoissonSampledDpEvent`` (privacy amplification by subsampling).
        ``event`` replaces that default with a wrapper of the mechanism's own
        event, e.g. a participation event from
        :func:`fedpriv.privacy.participation.participation_event`; its innermost event
        must be ``mechanism.dp_event``, so the recorded noise is the noise drawn.
        """
        key = (mechanism, sampling_probability, event)
        try:
            known = self._releases.get(key)
        except TypeError:  # an unhashable mechanism: no shortcut
            key, known = None, None
        if known is None:
            if event is None:
                event = release_event(mechanism, sampling_probability)
            elif _innermost(event) != mechanism.dp_event:
                raise ValueError(
                    f"event {event} does not wrap the mechanism's own {mechanism.dp_event}"
                )
            known = (event, self._groups(event))
            if key is not None:
                self._releases[key] = known
        event, groups = known
        check_private("rng", rng)  # before the budget check: a seeded rng is a bug, not a spend
        admitted = self._admit_all(event, label, groups)
        # Noise is drawn only after the budget checks; the event is recorded
        # only once the mechanism has actually produced an output.
        out = mechanism.apply(value, rng=rng)
        for led, adm in admitted:
            led._commit(event, label, adm)
        return out
