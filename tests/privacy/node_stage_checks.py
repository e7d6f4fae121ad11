"""Checks of a method's declared node stages against the queries a whole fit sends.

A node derives every stage's sensitivity from the handler's own
``reply_sensitivity(stage.template())`` and checks each query against it
(:mod:`fedpriv.federation.node_stage`). These helpers run a fit in process
while recording the queries, then check (a) the queries against the declared
stages, (b) the node's noise multiplier against the strategy's own, and (c)
the claimed bound against the reply's actual change when one adversarial
record joins a client's rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.participation import participation_event
from fedpriv.privacy.randomness import rounding_margin
from tests.keys import key_for

#: Slack on a float bound (the replies are sums of floats).
TOL = 1e-9


def recorded_fit(
    strategy, handler, clients: Sequence[ClientData], *, epsilon=2.0, key=3, participation=1.0
):
    """Fit ``strategy`` in process under (ε, 1e-5), recording every query it broadcasts
    (what each asked client receives; a round no client answers still counts against
    its stage). Returns (strategy, queries, ledger)."""
    queries: list[Query] = []
    emit = strategy.next_query

    def next_query():
        query = emit()
        if query is not None:
            queries.append(query)
        return query

    strategy.next_query = next_query
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    runtime = InProcessRuntime(
        clients=clients,
        handler=handler,
        seed=0,
        secret_key=key_for(key),
        participation=participation,
        secure_aggregation=False,
    )
    runtime.run(strategy, ledger=ledger)
    return strategy, queries, ledger


def check_queries(handler, stages: Sequence[NodeStage], queries: Sequence[Query]) -> dict:
    """(a): every query belongs to a declared stage, within its settings, and each stage
    gets exactly its declared rounds. Returns the queries by stage name."""
    declared = {s.name: s for s in stages}
    assert len(declared) == len(stages), "stage names must be unique"
    templates = {}
    for s in stages:
        t = handler.reply_sensitivity(s.template())
        assert t.stage == s.name, (t.stage, s.name)
        templates[s.name] = t
    by_stage: dict[str, list[Query]] = {name: [] for name in declared}
    for q in queries:
        got = handler.reply_sensitivity(q)
        assert got.stage in declared, (q.round, got.stage, sorted(declared))
        s, t = declared[got.stage], templates[got.stage]
        assert q.method == s.method
        assert q.sampling_rate == s.sampling_rate, (q.round, q.sampling_rate, s.sampling_rate)
        assert q.reply_length <= s.reply_length, (q.round, q.reply_length, s.reply_length)
        assert q.record_bound <= s.record_bound
        assert got.l1 <= t.l1 and got.l2 <= t.l2, (q.round, got, t)
        by_stage[got.stage].append(q)
    counts = {name: len(qs) for name, qs in by_stage.items()}
    assert counts == {s.name: s.rounds for s in stages}, counts
    return by_stage


@dataclass(frozen=True)
class Release:
    """What the strategy itself planned for a stage: its z, one round's event, and how
    many rounds that event was reserved for (shared by stages of one plan)."""

    noise_multiplier: float
    event: dp_event.DpEvent
    rounds: int


def check_multipliers(handler, stages: Sequence[NodeStage], own: Mapping[str, Release]) -> None:
    """(b): the multiplier the node derives with its own Δ is the strategy's z (1e-9), and
    the event it builds from the stage's q, ρ and accounting is the one the strategy
    reserved, for as many rounds in total."""
    assert sorted(own) == sorted(s.name for s in stages)
    rounds = Counter()
    for s in stages:
        assert s.mechanism is StageMechanism.GAUSSIAN
        delta = handler.reply_sensitivity(s.template()).l2
        z = s.noise / (delta + rounding_margin(s.reply_length, "l2"))
        mine = own[s.name]
        assert math.isclose(z, mine.noise_multiplier, rel_tol=1e-9), (s.name, z, mine)
        event = participation_event(
            dp_event.GaussianDpEvent(mine.noise_multiplier),
            sampling_probability=s.sampling_rate,
            participation=s.participation,
            accounting=s.accounting,
        )
        assert event == mine.event, (s.name, event, mine.event)
        rounds[id(mine)] += s.rounds
    for mine in own.values():
        assert rounds[id(mine)] == mine.rounds


def adversarial_records(d: int, labels: Sequence[float]) -> list[tuple[np.ndarray, float]]:
    """Extreme rows (the box's corners, far outside it, alternating signs, NaN) × labels."""
    alternating = np.where(np.arange(d) % 2 == 0, 1e3, -1e3)
    rows = [np.zeros(d), np.ones(d), np.full(d, 1e3), np.full(d, -1e3), alternating]
    rows.append(np.full(d, np.nan))
    return [(x, float(y)) for x in rows for y in labels]


def worst_change(handler, query: Query, data: ClientData, records) -> tuple[float, float]:
    """(c): the largest L1 and L2 change of ``data``'s reply to ``query`` when one of
    ``records`` joins it, with the same sample (all rows at q = 1; otherwise every third
    row, the new record included)."""
    n = data.n
    base = np.arange(n) if query.sampling_rate == 1.0 else np.arange(0, n, 3)
    before = handler.answer(query, data, base, {}, key_for(90))
    l1 = l2 = 0.0
    for x, y in records:
        grown = ClientData(
            client_id=data.client_id, X=np.vstack([data.X, x[None, :]]), y=np.append(data.y, y)
        )
        after = handler.answer(query, grown, np.append(base, n), {}, key_for(90))
        diff = np.asarray(after) - np.asarray(before)
        assert np.all(np.isfinite(diff)), (query.round, x, y)
        l1, l2 = max(l1, float(np.abs(diff).sum())), max(l2, float(np.linalg.norm(diff)))
    return l1, l2


def picks(queries: Sequence[Query], k: int = 3) -> list[Query]:
    """A few queries spread over a stage's rounds (first, middle, last)."""
    idx = sorted({0, len(queries) // 2, len(queries) - 1})[:k]
    return [queries[i] for i in idx]


def admitted(handler, stages: Sequence[NodeStage], query: Query) -> bool:
    """Whether the node's own per-query check (:func:`fedpriv.privacy.node_plan.match_query`,
    the code a node runs) admits ``query`` under ``stages``, none of their rounds used."""
    from fedpriv.privacy.node_plan import NodeRefusal, derive_stage, match_query

    def handler_of(_method):
        return handler

    held = [derive_stage(s, handler_of) for s in stages]
    try:
        match_query(held, [0] * len(held), query, handler_of)
    except NodeRefusal:
        return False
    return True


def with_config(query: Query, **changes) -> Query:
    """``query`` with some config entries replaced (``None``: removed)."""
    config = {**query.config, **changes}
    config = {k: v for k, v in config.items() if v is not None}
    return Query(**{**query.__dict__, "config": config})


def with_fields(query: Query, **changes) -> Query:
    return Query(**{**query.__dict__, **changes})
