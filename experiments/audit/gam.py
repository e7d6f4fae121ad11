"""The audits of DP-EBM (``dp_gam``): a column round, and the binary columns' group round
(:mod:`fedpriv.models.gam_group`). Kept beside :mod:`fedpriv.experiments.audit.learners`, whose
helpers they use and whose :func:`~fedpriv.experiments.audit.learners.all_audits` lists them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from fedpriv.clients.gam import GAMClient
from fedpriv.experiments.audit.learners import N_FEATURES, LearnerAudit, corner_rows, honest_or_twin
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig

from fedpriv.models.gam import Terms


def gam_audit(
    *,
    group: bool = False,
    epsilon: float = 2.0,
    delta: float = 1e-5,
    n_rows: int = 200,
    twin_factor: float = 20.0,
) -> LearnerAudit:
    """DP-EBM, the intercept round and one more round, λ = 17 σ_H.

    D is ``n_rows`` rows at x = 0 all labelled 0, so the released intercept is
    near −1.3, and the canary (1, 1) labelled 1 carries g = σ(b) − 1 ≈ −0.8, most
    of the sensitivity.

    * ``group=False`` (``"dp_gam"``): term 0 numeric with 2 equal bins; the canary
      is alone in bin 1 and the statistic is that bin's shape value (≈ linear in
      its Σg: λ ≈ 50 dwarfs the noise on its Σh).
    * ``group=True`` (``"dp_gam-group"``): both features binary columns, so the
      round is the group round (s = 2); the canary is the only record in either
      positive bin and counts in both at full weight, under noise z·√2·Δ on each.
      The statistic is the sum of the two positive bins' values, which sees the
      canary at the strength of a one-column round.

    Twin: noise / ``twin_factor`` in the second round.
    """
    data = corner_rows(n_rows)
    data = replace(data, y=tuple(np.zeros_like(y) for y in data.y), _cache={})
    common = dict(rounds=2, quantile_bins=False, learning_rate=1.0, lam=17.0, reg_lambda=1.0,
                  max_update=100.0)  # fmt: skip
    if group:
        terms = Terms(
            np.arange(N_FEATURES),
            np.zeros(N_FEATURES),
            np.full(N_FEATURES, -1),
            np.zeros(N_FEATURES, dtype=bool),
            tuple(np.array([0.5]) for _ in range(N_FEATURES)),
        )
        config = GAMConfig(**common, binary_group=N_FEATURES)
        make_strategy = honest_or_twin(DPGAMStrategy, twin_factor, config, terms=terms)

        def statistic(run):
            return float(sum(s[1] for s in run.model.shapes))
    else:
        make_strategy = honest_or_twin(DPGAMStrategy, twin_factor, GAMConfig(**common, bins=2))

        def statistic(run):
            return float(run.model.shapes[0][1])

    return LearnerAudit(
        name="dp_gam-group" if group else "dp_gam",
        epsilon=epsilon,
        delta=delta,
        twin=f"noise / {twin_factor:g}",
        data=data,
        make_strategy=make_strategy,
        make_handler=GAMClient,
        statistic=statistic,
    )
