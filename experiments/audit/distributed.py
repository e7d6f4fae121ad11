"""The distributed-noise audit: boosting whose noise the clients add inside secure aggregation.

The same canary and statistic as the central boosting audit
(:func:`~fedpriv.experiments.audit.learners.boosting_audit`), run with
``noise = "distributed"`` (:mod:`fedpriv.privacy.distributed`): two clients, no
tolerated dropout, so each adds a share of std σ/√2 and the server unmasks
x + N(0, σ²) ticks. The broken twin is a server that *under-declares* the shares
(σ/20 in the query) while its ledger records the honest event: the bug the
nodes' own budgets exist to catch (:mod:`fedpriv.privacy.node_budget`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fedpriv.experiments.audit.learners import LearnerAudit, boosting_audit
from fedpriv.strategies.boosting import DPBoostingStrategy

from fedpriv.privacy.distributed import DistributedNoise

#: Both clients must survive (two parties, no tolerated dropout).
NOISE = DistributedNoise(dropouts=0, max_parties=2)


def shares_cut(cls: type, factor: float) -> type:
    """``cls`` whose queries ask for 1/``factor`` of the noise its ledger records."""

    class SharesCut(cls):
        def noise_std(self, query: Any) -> float | None:
            std = super().noise_std(query)
            return None if std is None else std / factor

    SharesCut.__name__ = SharesCut.__qualname__ = f"SharesCut{cls.__name__}"
    return SharesCut


def distributed_boosting_audit(*, twin_factor: float = 20.0) -> LearnerAudit:
    """:func:`boosting_audit` under distributed noise; twin: shares under-declared."""
    base = boosting_audit(twin_factor=twin_factor)
    config = base.make_strategy(False).config
    twin_cls = shares_cut(DPBoostingStrategy, twin_factor)

    def make_strategy(twin: bool) -> Any:
        return (twin_cls if twin else DPBoostingStrategy)(config)

    return replace(
        base,
        name="boosting-distributed",
        twin=f"shares / {twin_factor:g}",
        make_strategy=make_strategy,
        noise=NOISE,
    )
