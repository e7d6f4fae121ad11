"""Settings of DP histogram boosting (``dp_gam``): the one place their defaults and
ranges are stated (the learner: :mod:`fedpriv.strategies.gam`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedpriv.models.gam import FINE_GRID
from fedpriv.validation import check_count, check_positive

#: How round t ≥ 1 picks its term: ``cyclic`` in schema order; ``gain``: one
#: cyclic pass, then the term with the largest residual Newton gain estimated
#: from its latest released sums (:func:`fedpriv.models.gam.residual_gain`).
COLUMN_ORDERS = ("cyclic", "gain")


@dataclass(frozen=True, kw_only=True)
class GAMConfig:
    """Hyper-parameters of DP histogram boosting (DP-EBM).

    ``rounds``: federated rounds, the intercept's plus one per column visit
    (cyclic in schema order; 1 + passes × columns for whole passes), plus the
    pair stage's ``interaction_rounds`` when ``interactions`` > 0.
    ``bins``: equal-width bins of a numeric column (a categorical column has one
    bin per level, a binary one two), or the number of quantile bins with
    ``quantile_bins`` (one extra accounted release: the numeric columns'
    histograms on a fine public grid). ``learning_rate`` η scales each Newton
    step; the step's regulariser is λ = max(``lam`` · σ_H, ``reg_lambda``), σ_H
    the std of the noise on each released Σh; ``max_update`` bounds each bin's
    step (logits). ``column_order`` (:data:`COLUMN_ORDERS`): ``cyclic``, or
    ``gain`` (better where few of many columns carry the signal, e.g. Diabetes
    130-US; worse on Adult). ``interactions``: pair terms fitted in the last
    ``interaction_rounds`` rounds (0: none), chosen among the pairs of the
    ``interaction_candidates`` most important columns, on ``interaction_bins``
    coarse bins per side. ``smooth``: the widest Gaussian kernel (std, in bins)
    over a numeric term's ordered bins applied to its released (Σg, Σh) before
    the step; each visit picks its bandwidth from ``smooth`` × (0, ¼, ½, ¾, 1)
    by Stein's unbiased risk estimate (0: never smooth;
    :mod:`fedpriv.models.gam_smooth`). ``binary_group`` s > 0: the binary
    columns share one round (one *unit* of a pass, placed after the other
    columns), each record counting at full weight in at most s of them
    (:mod:`fedpriv.models.gam_group`); 0: each binary column its own round. Two
    classes only (a softmax GAM visits binary columns one by one). The privacy
    budget is the run ledger's.
    Defaults measured on Adult (ε = 0.5), BRFSS (ε = 0.5) and Diabetes 130-US (ε = 2)
    (``experiments/gam_check.py``): 70 column rounds (5 passes over Adult's 14
    columns, 1.7 over 130-US's 41), 16 quantile bins, η = 1, λ = 5 σ_H;
    ``smooth`` = 2 measured on 130-US (ε = 0.5, 1), BRFSS (ε = 0.5, 2) and Adult
    (ε = 0.5); ``binary_group`` = 4 on 130-US (ε = 0.5 and 1, four settings:
    +0.002 to +0.021 test AUC over 20 seeds; s = 2 and 8 did worse at ε = 0.5)
    and BRFSS (ε = 0.5: 0.8180 → 0.8168, within the 4 seeds' spread).
    """

    rounds: int = 71
    bins: int = 16
    quantile_bins: bool = True
    learning_rate: float = 1.0
    lam: float = 5.0
    reg_lambda: float = 1.0
    max_update: float = 2.0
    column_order: str = "cyclic"
    interactions: int = 0
    interaction_rounds: int = 15
    interaction_candidates: int = 6
    interaction_bins: int = 8
    smooth: float = 2.0
    binary_group: int = 4

    def __post_init__(self) -> None:
        check_count("rounds", self.rounds, minimum=2)
        check_count("bins", self.bins, minimum=2)
        if self.bins > FINE_GRID:
            raise ValueError(f"bins must lie in [2, {FINE_GRID}]; got {self.bins}")
        if not isinstance(self.quantile_bins, bool):
            raise TypeError(f"quantile_bins must be true or false; got {self.quantile_bins!r}")
        check_positive("learning_rate", self.learning_rate)
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"lam must lie in [0, inf); got {self.lam!r}")
        check_positive("reg_lambda", self.reg_lambda)
        check_positive("max_update", self.max_update)
        if self.column_order not in COLUMN_ORDERS:
            raise ValueError(
                f"column_order must be one of {list(COLUMN_ORDERS)}; got {self.column_order!r}"
            )
        if not (math.isfinite(self.smooth) and self.smooth >= 0):
            raise ValueError(f"smooth must lie in [0, inf) bins; got {self.smooth!r}")
        check_count("binary_group", self.binary_group, minimum=0)
        check_count("interactions", self.interactions, minimum=0)
        check_count("interaction_rounds", self.interaction_rounds, minimum=2)
        check_count("interaction_candidates", self.interaction_candidates, minimum=2)
        check_count("interaction_bins", self.interaction_bins, minimum=2)
        if self.interaction_bins > FINE_GRID:
            raise ValueError(
                f"interaction_bins must lie in [2, {FINE_GRID}]; got {self.interaction_bins}"
            )
        if self.interactions:
            if self.interaction_rounds > self.rounds - 2:
                raise ValueError(
                    f"interaction_rounds must lie in [2, rounds − 2 = {self.rounds - 2}] "
                    f"with interactions; got {self.interaction_rounds}"
                )
            n_pairs = self.interaction_candidates * (self.interaction_candidates - 1) // 2
            if self.interactions > n_pairs:
                raise ValueError(
                    f"interactions must lie in [0, {n_pairs}] (pairs among "
                    f"interaction_candidates = {self.interaction_candidates}); "
                    f"got {self.interactions}"
                )

    @property
    def main_rounds(self) -> int:
        """Rounds before the pair stage (the intercept's and the column rounds)."""
        return self.rounds - (self.interaction_rounds if self.interactions else 0)

    @property
    def sampling_rate(self) -> float:
        """Every record counts in every round (q = 1)."""
        return 1.0
