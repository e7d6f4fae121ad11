"""Checks of a method's declared node stages against the queries of a recorded full fit.

A node derives every stage's sensitivity from ``handler.reply_sensitivity`` of the
stage's template and checks each query against it (:mod:`fedpriv.federation.node_stage`).
These helpers run a fit in process while recording the queries client 0 receives,
then check (a) membership, counts, rates, lengths and Δ; (b) the node's derived
noise multiplier; (c) one record's actual effect on real replies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for
from tests.privacy.node_stage_checks import check_queries

#: Slack on a float comparison of sensitivities (sums of a few hundred floats).
TOL = 1e-9


class Recorder:
    """A handler that answers as ``handler`` does and keeps every query client 0 gets."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.method = handler.method
        self.queries: list[Query] = []

    def answer(self, query, data, sample, state, key=None):
        if data.client_id == 0:
            self.queries.append(query)
        return self.handler.answer(query, data, sample, state, key)

    def reply_sensitivity(self, query):
        return self.handler.reply_sensitivity(query)


def data(n: int = 400, d: int = 4, n_classes: int = 2, seed: int = 0):
    """Small synthetic rows in [0, 1]^d with labels that depend on the first two."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    score = 2.0 * X[:, 0] + X[:, 1] + 0.3 * rng.standard_normal(n)
    y = np.minimum((score / 3.0 * n_classes).astype(int), n_classes - 1).astype(float)
    return X, y


def clients_of(X: np.ndarray, y: np.ndarray, k: int = 3) -> list[ClientData]:
    parts = np.array_split(np.arange(len(y)), k)
    return [ClientData(client_id=i, X=X[p], y=y[p]) for i, p in enumerate(parts)]


def fit(
    strategy, handler, clients, *, epsilon=1.0, delta=1e-6, key=0, noise=None
) -> tuple[Recorder, Any]:
    """Train ``strategy`` in process (injected key; ``noise``: a distributed-noise
    setting, else central); the recorder holds client 0's queries."""
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=delta))
    recorder = Recorder(handler)
    runtime = InProcessRuntime(
        clients=clients,
        handler=recorder,
        seed=0,
        secret_key=key_for(key),
        secure_aggregation=noise is not None,
        noise=noise,
    )
    runtime.run(strategy, ledger=ledger)
    return recorder, ledger


def check_membership(handler, stages: Sequence[NodeStage], queries: Sequence[Query]) -> dict:
    """(a): :func:`tests.privacy.node_stage_checks.check_queries` (every query in a declared
    stage, counts = rounds, q equal, length and Δ within the stage's), and non-scaled
    stages' units cover their Δ₁. Returns each stage's template Δ."""
    check_queries(handler, stages, queries)
    template = {s.name: handler.reply_sensitivity(s.template()) for s in stages}
    for s in stages:
        if s.unit is not None:
            assert template[s.name].l1 <= s.unit * (1 + TOL), (s.name, template[s.name])
    return template


def node_multiplier(handler, stage: NodeStage) -> float:
    """(b): the noise multiplier a node derives for a scaled stage (z = σ/(Δ₂ + γ√d), or
    1/ε = b/(Δ₁ + γd)): the node's own code, :func:`fedpriv.privacy.node_plan.derive_stage`."""
    from fedpriv.privacy.node_plan import derive_stage

    assert stage.mechanism in (StageMechanism.GAUSSIAN, StageMechanism.LAPLACE)
    return derive_stage(stage, lambda _method: handler).multiplier


def node_epsilon(handler, stages: Sequence[NodeStage], delta: float) -> float:
    """The ε a node accounts for ``stages`` at ``delta``: the node's own code
    (:func:`fedpriv.privacy.node_plan.admit_stages`) with this handler."""
    from fedpriv.privacy.node_plan import admit_stages

    plan = {"stage": "s", "delta": delta, "accounting_delta": delta,
            "stages": [s.to_dict() for s in stages]}  # fmt: skip
    return admit_stages(plan, lambda _method: handler, run_id="test")[1]


def adversaries(d: int, n_classes: int) -> list[tuple[np.ndarray, float]]:
    """Extreme records: features all 0, all 1, far outside the box either way, mid; each
    with every label."""
    rows = [np.zeros(d), np.ones(d), np.full(d, 1e6), np.full(d, -1e6), np.full(d, 0.5)]
    return [(x, float(c)) for x in rows for c in range(n_classes)]


def replay(handler, queries, client: ClientData, extra, key=None) -> dict[str, float]:
    """(c): every query answered on ``client``'s rows and on them plus each extra record
    (every row in the sample: q = 1), in order, each dataset with its own state. Asserts
    each change is within the query's Δ (L1 and L2); returns, per stage, the largest
    change relative to the claimed Δ (max of L1/Δ₁ and L2/Δ₂)."""
    rows = [ClientData(client.client_id, client.X, client.y)]
    for x, label in extra:
        rows.append(
            ClientData(client.client_id, np.vstack([client.X, x]), np.append(client.y, label))
        )
    states: list[dict] = [{} for _ in rows]
    worst: dict[str, float] = {}
    for q in queries:
        rs = handler.reply_sensitivity(q)
        out = [
            handler.answer(q, r, np.arange(r.n), s, key) for r, s in zip(rows, states, strict=True)
        ]
        for other in out[1:]:
            diff = other - out[0]
            l1, l2 = float(np.abs(diff).sum()), float(np.linalg.norm(diff))
            assert l1 <= rs.l1 + TOL and l2 <= rs.l2 + TOL, (q.round, rs, l1, l2)
            seen = max(l1 / rs.l1, l2 / rs.l2)
            worst[rs.stage] = max(worst.get(rs.stage, 0.0), seen)
    return worst
