"""One release stage: how every strategy releases a noisy statistic.

A learner's release has four steps, in this order, and a strategy that did
them by hand could skip one (the range check was found missing in such a
place once). :class:`ReleaseStage` does all four:

1. **reserve** the stage's planned releases in the run's ledger (a plan over
   budget raises before any noise is drawn);
2. **draw**: the budget is checked and the event recorded by the ledger, then
   the mechanism runs on the value with the stage's private generator
   (:meth:`fedpriv.privacy.ledger.PrivacyLedger.release`);
3. **range-check** the noisy value against the public bound on what honest
   clients can produce (:func:`fedpriv.privacy.range_guard.check_release`):
   a far-out value raises :class:`~fedpriv.privacy.range_guard.ReleaseOutOfRange`
   and must be discarded (its event stays recorded: its noise was drawn);
4. **record**: the ledger's entry carries the release's label.

Mechanisms whose output is a selection or a draw made by the caller's own
routine (the exponential mechanism's leaf labels, Lumberjack's leaf noise on
the fixed-point grid) go through :meth:`ReleaseStage.select`: the event is
recorded first (over budget raises before anything is drawn), then the
routine draws with the stage's generator.

:class:`~fedpriv.privacy.noise_stage.GaussianRounds` (a stage of T subsampled
Gaussian rounds, with calibration and distributed noise) releases through
this class too; an architecture test keeps ``ledger.release`` out of every
strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event

from fedpriv.privacy.ledger import PrivacyLedger, release_event
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import check_release, noise_margin


@dataclass(frozen=True, kw_only=True)
class ReleaseStage:
    """Releases of one mechanism in one ledger (module docstring).

    Attributes
    ----------
    ledger : PrivacyLedger
        The run's ledger: the budget, and where every release is recorded.
    rng : numpy.random.Generator
        The private generator of the noise (a CSPRNG stream; a seeded one is refused).
    mechanism
        A :mod:`fedpriv.privacy.mechanisms` mechanism (``apply``, ``dp_event``;
        ``std`` or ``scale`` for the range check's margin); ``None`` for a stage of
        selections only (:meth:`ReleaseStage.select` with ``event`` given).
    bound : float or None
        Public bound on each coordinate of an honest value; ``None``: no range check
        (no public record bound is known).
    sampling_probability : float
        Poisson rate of the records behind each value (1: every record).
    event : DpEvent or None
        The event each release records, wrapping the mechanism's own (e.g. a
        participation event); ``None``: :func:`~fedpriv.privacy.ledger.release_event`.
    """

    ledger: PrivacyLedger
    rng: np.random.Generator
    mechanism: Any = None
    bound: float | None = None
    sampling_probability: float = 1.0
    event: dp_event.DpEvent | None = None

    @property
    def planned_event(self) -> dp_event.DpEvent:
        """The event one release records."""
        if self.event is not None:
            return self.event
        if self.mechanism is None:
            raise ValueError("a release stage needs a mechanism or an event")
        return release_event(self.mechanism, self.sampling_probability)

    def reserve(self, count: int = 1) -> None:
        """Reserve ``count`` releases now; raises if they do not fit the budget."""
        self.ledger.reserve(self.planned_event, count)

    def release(self, value: Any, *, label: str, bound: float | None = None) -> np.ndarray:
        """The noisy ``value``, recorded under ``label`` and range-checked against
        ``bound`` (default: the stage's)."""
        noisy = self.ledger.release(
            self.mechanism,
            value,
            rng=self.rng,
            sampling_probability=self.sampling_probability,
            event=self.event,
            label=label,
        )
        noisy = np.asarray(noisy, dtype=np.float64)
        limit = self.bound if bound is None else bound
        check_release(
            noisy, bound=limit, margin=noise_margin(self.mechanism, noisy.size), label=label
        )
        return noisy

    def charge(self, *, label: str, events: int = 1) -> None:
        """Record ``events`` of the stage's event now, for a mechanism that draws later
        and over several rounds with the stage's generator (the sparse threshold's
        checks of a structure released stage by stage): over budget raises before
        its first draw."""
        check_private("rng", self.rng)
        for _ in range(events):
            self.ledger.spend(self.planned_event, label=label)

    def select(
        self,
        draw: Callable[[np.random.Generator], Any],
        *,
        label: str | Sequence[str],
        events: int = 1,
        bound: float | None = None,
        margin: Callable[[int], float] | None = None,
    ) -> Any:
        """Record the stage's event, then ``draw(rng)`` with its generator.

        For a release whose randomness is the caller's routine (a selection, or
        noise drawn on a grid the mechanism does not know): every event is
        recorded first, so over budget raises before anything is drawn. ``label``:
        one label for ``events`` events, or one event per label. With ``bound``
        the output (an array, or a sequence of arrays) is range-checked, with
        ``margin(d)`` for its d values (default: the mechanism's noise margin).
        """
        labels = [label] * events if isinstance(label, str) else list(label)
        for name in labels:
            self.charge(label=name)
        out = draw(self.rng)
        if bound is not None:
            parts = out if isinstance(out, list | tuple) else [out]
            flat = np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])
            width = margin(flat.size) if margin else noise_margin(self.mechanism, flat.size)
            label_text = labels[0] if len(labels) == 1 else f"{labels[0]} … {labels[-1]}"
            check_release(flat, bound=bound, margin=width, label=label_text)
        return out
