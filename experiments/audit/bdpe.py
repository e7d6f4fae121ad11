"""The audit of bdpe_α (``bdpe``): a whole fit, the canary alone in its leaf.

Kept beside :mod:`fedpriv.experiments.audit.learners`, whose helpers it uses and whose
:func:`~fedpriv.experiments.audit.learners.all_audits` lists it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.clients.bdpe import BDPEClient
from fedpriv.experiments.audit.learners import N_FEATURES, LearnerAudit, corner_rows
from fedpriv.experiments.audit.twins import UnderNoised
from fedpriv.strategies.bdpe import BDPEConfig, BDPEStrategy

from fedpriv.models.trees import RandomTree, route
from fedpriv.privacy.mechanisms import LaplaceMechanism


class UnderNoisedLaplace(UnderNoised):
    """A Laplace twin: claims ``claimed``'s LaplaceDpEvent with ``1/factor`` of its noise."""

    @property
    def scale(self) -> float:
        return self.claimed.scale / self.factor

    def real(self) -> LaplaceMechanism:
        eps = self.claimed.epsilon * self.factor
        return LaplaceMechanism(l1_sensitivity=self.claimed.l1_sensitivity, epsilon=eps)


def under_noised(factor: float) -> type:
    """:class:`BDPEStrategy` whose leaf noise is divided by ``factor`` after the plan is
    reserved: the ledger still says the honest ε."""

    class UnderNoisedBDPE(BDPEStrategy):
        def begin(self, **kwargs: Any) -> None:
            super().begin(**kwargs)
            self._leaves = UnderNoisedLaplace(self._leaves, factor)

    return UnderNoisedBDPE


def bdpe_audit(
    *, epsilon: float = 2.0, delta: float = 1e-5, n_rows: int = 20, twin_factor: float = 20.0
) -> LearnerAudit:
    """bdpe_α, one tree of depth 1, half the budget on the split, half on the leaves.

    D is ``n_rows`` rows at x = 0 (labels alternate) and the canary (1, 1) is
    labelled 1. Every public candidate threshold lies strictly inside (0, 1), so
    whichever split the exponential mechanism picks, the canary is alone in its
    leaf, with weight ψ⁻¹(0) = ½ (half the leaves' sensitivity: one canary
    cannot carry more in the first tree). The statistic is the released value
    of the canary's leaf, increasing in its noisy w¹. Twin: the leaves' Laplace
    noise / ``twin_factor``.
    """
    data = corner_rows(n_rows)
    config = BDPEConfig(trees=1, depth=1, beta_tree=0.5, split_levels=1)
    numeric = np.ones(N_FEATURES, dtype=bool)
    n_public = data.n + 1  # the public record bound m, the same for D and D'
    cx = data.canary_x[None, :]

    def make_strategy(twin: bool):
        cls = under_noised(twin_factor) if twin else BDPEStrategy
        return cls(config, numeric=numeric, n_records=n_public)

    def statistic(run) -> float:
        m = run.model
        leaf = route(RandomTree(m.feature[0], m.threshold[0]), cx)[0]
        return float(m.leaf_values[0][leaf])

    return LearnerAudit(
        name="bdpe",
        epsilon=epsilon,
        delta=delta,
        twin=f"leaf noise / {twin_factor:g}",
        data=data,
        make_strategy=make_strategy,
        make_handler=BDPEClient,
        statistic=statistic,
    )
