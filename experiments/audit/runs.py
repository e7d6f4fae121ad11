"""One recorded end-to-end fit: strategy + client + in-process runtime + ledger.

:func:`fit` runs exactly what :meth:`fedpriv.server.estimator_base.Estimator._fit_on`
runs (a fresh :class:`~fedpriv.privacy.PrivacyLedger`, the
:class:`~fedpriv.federation.runtime.InProcessRuntime` with its secure
aggregation, a public seed and a secret key) and keeps two records:

* the *transcript*: every query, i.e. everything any client receives; the
  attacker of docs/explanation/architecture.md §1 knows it, together with the
  released model and the public seed;
* the *curator's view*: each client's exact reply and each ledger release's
  exact input and output. Only the tests' ground truth reads it (what an
  attack should not be able to recover); no attack does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.ledger import PrivacyReport
from fedpriv.privacy.randomness import SecretKey


def _frozen_copy(query: Query) -> Query:
    # Strategies may hand out views of arrays they fill later: keep what was sent.
    arrays = {k: np.array(v, copy=True) for k, v in query.arrays.items()}
    return Query(
        round=query.round,
        method=query.method,
        sampling_rate=query.sampling_rate,
        reply_length=query.reply_length,
        record_bound=query.record_bound,
        arrays=arrays,
        config=dict(query.config),
    )


class RecordingHandler:
    """Wraps a client handler; keeps each query once and each client's exact reply."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.method = getattr(inner, "method", None)
        self.queries: list[Query] = []
        self.replies: list[dict[int, np.ndarray]] = []

    def _see(self, query: Query) -> dict[int, np.ndarray]:
        if not self.queries or self.queries[-1].round != query.round:
            self.queries.append(_frozen_copy(query))
            self.replies.append({})
        return self.replies[-1]

    def reply_sensitivity(self, query):
        return self.inner.reply_sensitivity(query)  # what a node derives its plan from

    def unit_sensitivity(self, query, max_records):
        return self.inner.unit_sensitivity(query, max_records)

    def answer(self, query, data, sample, state, key=None):
        reply = self.inner.answer(query, data, sample, state, key)
        self._see(query)[data.client_id] = np.array(reply, dtype=np.float64)
        return reply


class RecordingBatchHandler(RecordingHandler):
    """:class:`RecordingHandler` for handlers with the vectorised ``answer_many``."""

    def answer_many(self, query, datas, samples, state, keys=None):
        batch = self.inner.answer_many(query, datas, samples, state, keys)
        seen = self._see(query)
        for data, row in zip(datas, batch, strict=True):
            seen[data.client_id] = np.array(row, dtype=np.float64)
        return batch


def recording(handler: Any) -> RecordingHandler:
    """The recording wrapper that keeps ``handler``'s fast path, if it has one."""
    cls = RecordingBatchHandler if hasattr(handler, "answer_many") else RecordingHandler
    return cls(handler)


class RecordingLedger(PrivacyLedger):
    """A ledger that also keeps each release's exact input and released output."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.releases: list[tuple[np.ndarray, np.ndarray]] = []

    def release(self, mechanism, value, **kwargs):
        out = super().release(mechanism, value, **kwargs)
        self.releases.append((np.array(value, dtype=np.float64), np.array(out)))
        return out


@dataclass
class Run:
    """A finished fit: the release, the transcript, and the curator's view."""

    model: Any
    strategy: Any
    seed: int
    queries: list[Query]
    replies: list[dict[int, np.ndarray]]
    ledger: RecordingLedger
    _report: PrivacyReport | None = field(default=None, repr=False)

    @property
    def report(self) -> PrivacyReport:
        if self._report is None:
            self._report = self.ledger.report()
        return self._report

    @property
    def releases(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.ledger.releases


def run_fit(
    *,
    strategy: Any,
    handler: Any,
    clients: Sequence[ClientData],
    epsilon: float,
    delta: float,
    seed: int,
    key: SecretKey | None,
    secure_aggregation: bool = True,
    noise: Any = None,
) -> Run:
    """Train ``strategy`` against ``handler`` clients under a fresh (recording) ledger.

    ``noise``: a :class:`~fedpriv.privacy.distributed.DistributedNoise` (the clients
    add the noise inside secure aggregation), or ``None`` (central).

    ``key=None`` draws a fresh secret key from OS entropy, as the estimators do.
    """
    rec = recording(handler)
    runtime = InProcessRuntime(
        clients=clients,
        handler=rec,
        seed=seed,
        secret_key=key,
        secure_aggregation=secure_aggregation,
        noise=noise,
    )
    ledger = RecordingLedger(budget=PrivacyBudget(epsilon=epsilon, delta=delta))
    runtime.run(strategy, ledger=ledger)
    return Run(
        model=strategy.model(),
        strategy=strategy,
        seed=seed,
        queries=rec.queries,
        replies=rec.replies,
        ledger=ledger,
    )
