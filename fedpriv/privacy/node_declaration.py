"""What the server declares to the nodes: a begun strategy's plan (stages, rounds, ε).

The server side of the node-enforced budget (:mod:`fedpriv.privacy.node_budget`):
it builds the plan each node then checks with its own accountant. Kept apart
from the node's ledger, which never needs to build a plan, only to judge one;
re-exported from :mod:`fedpriv.privacy.node_budget`.
"""

from __future__ import annotations

import math
from typing import Any


def declared_plan(
    ledger: Any, *, stage: str, rounds: int | None, stages: list[dict]
) -> dict[str, Any]:
    """What the server declares to the nodes for one strategy: its stages and, as a
    cross-check, its ledger's reserved events and ε.

    ``ledger`` ``None`` is the non-private reference: ε = ∞, which any node refuses.
    ``stages``: each :class:`~fedpriv.federation.node_stage.NodeStage`'s ``to_dict()``.
    """
    if ledger is None:
        return {"stage": stage, "epsilon": math.inf, "delta": 1.0, "rounds": rounds,
                "events": [], "stages": []}  # fmt: skip
    from fedpriv.privacy.events import event_to_dict

    reserved = ledger.planned_items()  # the stage's ledger: fresh (or scoped) at its begin
    return {
        "stage": stage,
        "epsilon": float(ledger.planned_epsilon()),
        "delta": float(ledger.budget.delta),
        "accounting_delta": float(ledger.accounting_delta),
        "rounds": None if rounds is None else int(rounds),
        "events": [[event_to_dict(ev), int(n)] for ev, n in reserved],
        "stages": stages,
    }


def strategy_plan(strategy: Any, ledger: Any, *, stage: str) -> dict[str, Any]:
    """The plan a begun ``strategy`` declares (:func:`declared_plan`): its node stages
    (``strategy.node_stages()``), their total rounds, and its ledger's reservations."""
    stages = [s.to_dict() for s in strategy.node_stages()] if ledger is not None else []
    rounds = sum(s["rounds"] for s in stages) if stages else None
    return declared_plan(ledger, stage=stage, rounds=rounds, stages=stages)
