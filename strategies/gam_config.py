"""Settings of DP histogram boosting (``dp_gam``): the one place their defaults and
ranges are stated (the learner: :mod:`fedpriv.strategies.gam`)."""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.federation.constraints import Interval, Options, check_fields, integers, setting
from fedpriv.federation.limits import SIZE_LIMITS
from fedpriv.models.gam import FINE_GRID

#: How round t ≥ 1 picks its term: ``cyclic`` in schema order; ``gain``: one
#: cyclic pass, then the term with the largest residual Newton gain estimated
#: from its latest released sums (:func:`fedpriv.models.gam.residual_gain`).
COLUMN_ORDERS = ("cyclic", "gain")
_LIMITS = SIZE_LIMITS["dp_gam"]
_POSITIVE = Interval(0, None, closed="neither")
_NONNEGATIVE = Interval(0, None, closed="left")


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

    rounds: int = setting(71, integers(2, most=_LIMITS["rounds"]))
    bins: int = setting(16, integers(2, FINE_GRID))
    quantile_bins: bool = True
    learning_rate: float = setting(1.0, _POSITIVE)
    lam: float = setting(5.0, _NONNEGATIVE)
    reg_lambda: float = setting(1.0, _POSITIVE)
    max_update: float = setting(2.0, _POSITIVE)
    column_order: str = setting("cyclic", Options(COLUMN_ORDERS))
    interactions: int = setting(0, integers(0, note="at most the candidates' pairs"))
    interaction_rounds: int = setting(15, integers(2, note="at most rounds − 2 with interactions"))
    interaction_candidates: int = setting(6, integers(2, most=_LIMITS["interaction_candidates"]))
    interaction_bins: int = setting(8, integers(2, FINE_GRID))
    smooth: float = setting(2.0, Interval(0, None, closed="left", unit="bins"))
    binary_group: int = setting(4, integers(0, zero="0: one round per binary column"))

    def __post_init__(self) -> None:
        check_fields(self)
        if not isinstance(self.quantile_bins, bool):
            raise TypeError(f"quantile_bins must be true or false; got {self.quantile_bins!r}")
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
