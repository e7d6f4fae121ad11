"""Lumberjack's settings: :class:`LumberjackConfig` (the strategy is :mod:`fedpriv.strategies.lumberjack`).

Lebeda, Erb, Cebere & Bellet, "Lumberjack": k = 30 random trees, ε₁ = 0.75ε
for the structure, δ = 1e-6; depth d = 49 here (the paper's 100 costs more
once growth is staged: see Accuracy below). How stages, m and the caps
follow from these settings: the strategy's module docstring.

Accuracy (Adult, ε = 1, 30 trees, 5 injected keys, README): exact growth
at d = 100 (leaky) .835 ± .002 accuracy, .884 AUC; staged, d = 100:
.829 / .886; d = 49: .834 / .887; top-down (h = 1): .823 / .884. With τ
about 1.8x the one-shot threshold, pruned trees stop shallower and depths
beyond ~50 only add queries.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.models.lumberjack import STAGE_HEIGHT, lumberjack_rounds, stage_heights
from fedpriv.options import LeafMechanism, SplitFeatures
from fedpriv.privacy import staged_queries_per_record
from fedpriv.validation import check_count, check_open_unit


@dataclass(frozen=True, kw_only=True)
class LumberjackConfig:
    """Lumberjack's settings (paper §6: 30 trees, ε₁ = 0.75ε; depth 49 staged).

    The privacy budget (paper: δ = 1e-6) is the run ledger's. ``recalibrate_share``
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

    trees: int = 30
    depth: int = 49
    structure_fraction: float = 0.75
    leaf_mechanism: LeafMechanism = LeafMechanism.GAUSSIAN
    split_features: SplitFeatures = SplitFeatures.COLUMNS
    two_sided: bool = False
    #: Algorithm 2's deterministic gate: counts ≤ ``gate`` answer ⊥ without noise
    #: (τ = gate + 1 + Δ; the paper's τ = 1 + Δ is 0). It no longer steers growth.
    gate: int = 0
    #: Levels per stage (:mod:`fedpriv.strategies.lumberjack`): m = k·Σ_s (1 + ⌊log₂ h_s⌋).
    stage_height: int = STAGE_HEIGHT
    #: Most Heavy bottom nodes a stage grows from, per tree (a public memory bound;
    #: the record bound's cap B may be lower: :mod:`fedpriv.models.lumberjack_bounds`).
    max_frontier: int = 128
    recalibrate_share: float = 0.0

    def __post_init__(self) -> None:
        check_count("trees", self.trees)
        check_count("depth", self.depth)
        if self.depth > 200:
            raise ValueError(f"depth must lie in [1, 200]; got {self.depth}")
        check_open_unit("structure_fraction", self.structure_fraction)
        object.__setattr__(self, "leaf_mechanism", LeafMechanism.parse(self.leaf_mechanism))
        object.__setattr__(self, "split_features", SplitFeatures.parse(self.split_features))
        check_count("gate", self.gate, minimum=0)
        check_count("stage_height", self.stage_height)
        if self.stage_height > 10:
            raise ValueError(
                f"stage_height must lie in [1, 10] (2^h nodes per root); got {self.stage_height}"
            )
        check_count("max_frontier", self.max_frontier)
        rs = self.recalibrate_share
        if not (isinstance(rs, int | float) and not isinstance(rs, bool) and 0 <= rs < 1):
            raise ValueError(f"recalibrate_share must lie in [0, 1); got {rs!r}")

    @property
    def heights(self) -> list[int]:
        """The stages' heights: ``stage_height`` levels each, the last one shorter."""
        return stage_heights(self.depth, self.stage_height)

    @property
    def m(self) -> int:
        """Queries one record can enter: k·Σ_s (1 + ⌊log₂ h_s⌋) (Lemma 3 per stage)."""
        return staged_queries_per_record(self.trees, self.heights)

    @property
    def rounds(self) -> int:
        """One round per stage, the leaf counts, then the recalibration (if any)."""
        return lumberjack_rounds(self.depth, self.stage_height) + int(self.recalibrate_share > 0)
