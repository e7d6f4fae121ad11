"""Lumberjack's settings: :class:`LumberjackConfig`.

The strategy is :mod:`fedpriv.strategies.lumberjack`.

Lebeda, Erb, Cebere & Bellet, "Lumberjack": k = 30 random trees, ε₁ = 0.75ε
for the structure, δ = 1e-6; depth d = 49 here (the paper's 100 costs more
once growth is staged: see Accuracy below). Those are the largest sizes of
the automatic default (``trees = depth = 0``), which keeps them while the
public record bound fills them and takes fewer stages, then fewer trees,
when it cannot (:mod:`fedpriv.models.lumberjack_sizes`). How stages, m and
the caps follow from these settings: the strategy's module docstring.

Accuracy (Adult, ε = 1, 30 trees, 5 injected keys; the docs, forests page): exact growth
at d = 100 (leaky) .835 ± .002 accuracy, .884 AUC; staged, d = 100:
.829 / .886; d = 49: .834 / .887; top-down (h = 1): .823 / .884. With τ
about 1.8x the one-shot threshold, pruned trees stop shallower and depths
beyond ~50 only add queries.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fedpriv.federation.constraints import Interval, check_fields, integers, setting
from fedpriv.federation.limits import SIZE_LIMITS
from fedpriv.models.lumberjack import STAGE_HEIGHT, lumberjack_rounds, stage_heights
from fedpriv.models.lumberjack_sizes import (
    AUTO,
    PAPER_DEPTH,
    PAPER_TREES,
    auto_size,
    sizing_records,
)
from fedpriv.options import LeafMechanism, SplitFeatures
from fedpriv.privacy import calibrate_sparse_threshold, staged_queries_per_record

_LIMITS = SIZE_LIMITS["lumberjack"]


@dataclass(frozen=True, kw_only=True)
class LumberjackConfig:
    """Lumberjack's settings (paper §6: 30 trees, ε₁ = 0.75ε; depth 49 staged).

    ``trees`` and ``depth``: 0 (the default) is automatic, at most the paper's 30
    trees and depth 49, fewer where the public record bound (without a declared one,
    the released record count) cannot fill them at the run's (ε, δ)
    (:mod:`fedpriv.models.lumberjack_sizes`; :meth:`resolved` fixes them once the
    budget and the bound are known); a value set here is kept. The
    privacy budget (paper: δ = 1e-6) is the run ledger's. ``recalibrate_share``
    s > 0 gives s of it to a last round that fits the Brier-optimal affine map
    of the forest's probabilities (:mod:`fedpriv.models.recalibration`; it needs
    the public record count); ``structure_fraction`` splits the rest between
    the structure (ε₁, δ₁) and the leaves. The federated rounds follow from
    ``depth``: one per stage, the leaf round, then the recalibration round.

    When to recalibrate: where the forest has little signal and many records.
    On Diabetes 130-US (AUC 0.54) the noisy leaves spread the predictions and
    the Brier score is above the base rate's at ε ≤ 2 (0.0822 against 0.08164
    at ε = 0.5); with s = 0.1 it is 0.08160 (mean of 10 fits). On 4,800 rows
    the map's own noise costs more than it saves (0.200 → 0.206 at ε = 0.5),
    hence off by default.
    """

    trees: int = setting(AUTO, integers(
        0, zero="0: automatic", most=_LIMITS["trees"],
        note="and trees × max-frontier × 2^stage-height ≤ 2^23",
    ))  # fmt: skip
    depth: int = setting(AUTO, integers(0, 200, zero="0: automatic"))
    structure_fraction: float = setting(0.75, Interval(0, 1, closed="neither"))
    leaf_mechanism: LeafMechanism = LeafMechanism.GAUSSIAN
    split_features: SplitFeatures = SplitFeatures.COLUMNS
    two_sided: bool = False
    #: Algorithm 2's deterministic gate: counts ≤ ``gate`` answer ⊥ without noise
    #: (τ = gate + 1 + Δ; the paper's τ = 1 + Δ is 0). It no longer steers growth.
    gate: int = setting(0, integers(0))
    #: Levels per stage (:mod:`fedpriv.strategies.lumberjack`): m = k·Σ_s (1 + ⌊log₂ h_s⌋).
    stage_height: int = setting(STAGE_HEIGHT, integers(1, 10))
    #: Most Heavy bottom nodes a stage grows from, per tree (a public memory bound;
    #: the record bound's cap B may be lower: :mod:`fedpriv.models.lumberjack_bounds`).
    max_frontier: int = setting(128, integers(1, most=_LIMITS["max_frontier"]))
    recalibrate_share: float = setting(0.0, Interval(0, 1, closed="left"))

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "leaf_mechanism", LeafMechanism.parse(self.leaf_mechanism))
        object.__setattr__(self, "split_features", SplitFeatures.parse(self.split_features))

    @property
    def automatic(self) -> bool:
        """Whether ``trees`` or ``depth`` is still 0 (automatic): :meth:`resolved` fixes it."""
        return self.trees == AUTO or self.depth == AUTO

    @property
    def heights(self) -> list[int]:
        """The stages' heights: ``stage_height`` levels each, the last one shorter
        (automatic depth: the paper's 49, the most it can be)."""
        return stage_heights(self.depth or PAPER_DEPTH, self.stage_height)

    @property
    def m(self) -> int:
        """Queries one record can enter: k·Σ_s (1 + ⌊log₂ h_s⌋) (Lemma 3 per stage;
        automatic sizes: their largest)."""
        return staged_queries_per_record(self.trees or PAPER_TREES, self.heights)

    @property
    def rounds(self) -> int:
        """One round per stage, the leaf counts, then the recalibration (if any).
        With an automatic depth, the most a run can take; the resolved
        configuration (:meth:`resolved`) has the run's own count."""
        stages = lumberjack_rounds(self.depth or PAPER_DEPTH, self.stage_height)
        return stages + int(self.recalibrate_share > 0)

    def structure_budget(self, epsilon: float, delta: float) -> tuple[float, float]:
        """(ε₁, δ₁): the structure's share of the run's (ε, δ), after the recalibration's."""
        share, f = 1.0 - self.recalibrate_share, self.structure_fraction
        return f * (share * epsilon), f * (share * delta)

    def tau(self, *, epsilon: float, delta: float, trees: int, depth: int) -> float:
        """The sparse threshold's τ = gate + 1 + Δ of the plan (``trees``, ``depth``) at the
        run's (ε, δ): the calibration :meth:`fedpriv.strategies.lumberjack.LumberjackStrategy.begin`
        makes (public)."""
        eps1, d1 = self.structure_budget(epsilon, delta)
        m = staged_queries_per_record(trees, stage_heights(depth, self.stage_height))
        cal = calibrate_sparse_threshold(epsilon=eps1, delta=d1, m=m, two_sided=self.two_sided)
        return cal.mechanism(gate=self.gate).tau

    def resolved(
        self,
        *,
        epsilon: float | None,
        delta: float | None,
        n_records: float | None,
        released_count: float | None = None,
    ) -> LumberjackConfig:
        """This configuration with automatic ``trees`` and ``depth`` fixed
        (:func:`fedpriv.models.lumberjack_sizes.auto_size`) from public facts only: the
        learner's (ε, δ) and ``n_records``, the public bound on all records (never a
        count), or, when that bound is a released count's upper bound, the released
        count ``released_count`` itself (:func:`~fedpriv.models.lumberjack_sizes.sizing_records`).
        Non-private (ε ``None`` or ∞) or without a bound: the paper's sizes.
        Set values are kept; a resolved configuration resolves to itself."""
        if not self.automatic:
            return self
        if epsilon is None or not math.isfinite(epsilon) or delta is None or n_records is None:
            trees, depth = self.trees or PAPER_TREES, self.depth or PAPER_DEPTH
        else:
            trees, depth = auto_size(
                n_records=sizing_records(n_records, released_count),
                tau=lambda k, d: self.tau(epsilon=epsilon, delta=delta, trees=k, depth=d),
                trees=self.trees,
                depth=self.depth,
                stage_height=self.stage_height,
            )
        return dataclasses.replace(self, trees=trees, depth=depth)
