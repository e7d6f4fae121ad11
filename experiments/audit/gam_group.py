"""The audit of DP-EBM's group round of binary columns (:mod:`fedpriv.models.gam_group`).

Kept beside :mod:`experiments.audit.learners` (whose helpers it uses) and listed by
its :func:`~experiments.audit.learners.all_audits`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from clients.gam import GAMClient
from experiments.audit.learners import N_FEATURES, LearnerAudit, corner_rows, honest_or_twin
from fedpriv.models.gam import Terms
from strategies.gam import DPGAMStrategy, GAMConfig


def gam_group_audit(
    *,
    epsilon: float = 2.0,
    delta: float = 1e-5,
    n_rows: int = 200,
    twin_factor: float = 20.0,
) -> LearnerAudit:
    """DP-EBM on two binary columns: the intercept round and one group round (s = 2).

    D is ``n_rows`` rows at x = 0 (negative in both columns) labelled 0; the canary
    (1, 1) labelled 1 is the only record in either positive bin and counts in both at
    full weight, so it moves both released Σg by g ≈ −0.8 under noise z·√2·Δ each.
    The statistic is the sum of the two positive bins' values (≈ linear in their Σg,
    λ = 17 σ_H), which sees the canary at the strength of a one-column round.
    Twin: noise / ``twin_factor`` in the group round.
    """
    data = corner_rows(n_rows)
    data = replace(data, y=tuple(np.zeros_like(y) for y in data.y), _cache={})
    terms = Terms(
        np.arange(N_FEATURES),
        np.zeros(N_FEATURES),
        np.full(N_FEATURES, -1),
        np.zeros(N_FEATURES, dtype=bool),
        tuple(np.array([0.5]) for _ in range(N_FEATURES)),
    )
    config = GAMConfig(
        rounds=2,
        quantile_bins=False,
        learning_rate=1.0,
        lam=17.0,
        reg_lambda=1.0,
        max_update=100.0,
        binary_group=N_FEATURES,
    )
    return LearnerAudit(
        name="dp_gam-group",
        epsilon=epsilon,
        delta=delta,
        twin=f"noise / {twin_factor:g}",
        data=data,
        make_strategy=honest_or_twin(DPGAMStrategy, twin_factor, config, terms=terms),
        make_handler=GAMClient,
        statistic=lambda run: float(sum(s[1] for s in run.model.shapes)),
    )
