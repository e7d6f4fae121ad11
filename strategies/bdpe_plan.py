"""bdpe_α's privacy plan: the shares of the budget, and one scale that spends (ε, δ).

The plan (:mod:`fedpriv.strategies.bdpe`): T·D levels, each one exponential-mechanism
selection (a ``BoundedRangeDpEvent(ε_level)``: its nodes hold disjoint
records), T Laplace leaf releases at ε_pred and, with ``calibrate_share`` s > 0,
one Laplace release of the calibration counts at ε_cal. Their *shares* are
the paper's split of ε by basic composition:

    ε_level = β_tree (1 − s) ε / (T D),   ε_pred = (1 − β_tree)(1 − s) ε / T,   ε_cal = s ε,

which sum to ε, a (ε, 0)-DP guarantee. The run's ledger certifies (ε, δ) with
its PLD and RDP accountants (the bounded-range events as ε²/8-zCDP), which
compose a hundred small releases far tighter: the default plan split so
spends 0.22 of ε = 0.5 at δ = 1e-5, 0.93 of 2, 4.05 of 8. So the shares are
kept and all three ε are multiplied by one scale x, the largest whose plan the
ledger's accountants certify at or below ε at the run's δ
(:func:`fedpriv.privacy.calibration_plan.calibrate_pure_plan`, within 1 % of
ε, never above it): the default plan's x is about 2.2 at ε = 0.5, 2.05 at 2
and 1.9 at 8. The certified figure is (ε, δ)-DP; the report's basic-composition
sum (``epsilon_pure_basic_composition``) is then x·ε, a (x·ε, 0)-DP guarantee.
Where the plan cannot spend 99 % of ε, a WARNING says why and
:attr:`BDPEPlan.scale` keeps the reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dp_accounting import dp_event

from fedpriv.models.forest_sensitivity import leaf_mass_sensitivity, record_count_sensitivity
from fedpriv.privacy.calibration_plan import PlanScale, calibrate_pure_plan
from fedpriv.privacy.events import BoundedRangeDpEvent
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.mechanisms import LaplaceMechanism

if TYPE_CHECKING:
    from fedpriv.strategies.bdpe import BDPEConfig

log = logging.getLogger(__name__)

#: The target is ε shrunk by one part in 10⁹, so that float sums of it (a scoped
#: ledger's parent adds the record count's ε) never pass ε: no overshoot.
TARGET_MARGIN = 1e-9


@dataclass(frozen=True, kw_only=True)
class BDPEPlan:
    """The plan's releases at the calibrated scale, and the calibration's outcome."""

    trees: int
    depth: int
    split_event: BoundedRangeDpEvent
    leaves: LaplaceMechanism
    counts: LaplaceMechanism | None
    #: The calibration's outcome (``None`` while the search tries scales).
    scale: PlanScale | None

    @property
    def epsilon_level(self) -> float:
        return float(self.split_event.epsilon)

    @property
    def groups(self) -> list[tuple[dp_event.DpEvent, int]]:
        """(event, count) of every release, in the order they are reserved."""
        out = [(self.split_event, self.trees * self.depth), (self.leaves.dp_event, self.trees)]
        return out + ([(self.counts.dp_event, 1)] if self.counts is not None else [])

    def reserve(self, ledger: PrivacyLedger) -> None:
        """Reserve the whole plan (the ledger checks it before any noise is drawn)."""
        for event, count in self.groups:
            ledger.reserve(event, count)


def shares(
    *, trees: int, depth: int, beta_tree: float, calibrate_share: float
) -> tuple[float, float, float]:
    """(ε_level, ε_pred, ε_cal) per unit of ε: basic composition's split (they sum to 1)."""
    tree_part = 1.0 - calibrate_share
    return (
        beta_tree * tree_part / (trees * depth),
        (1.0 - beta_tree) * tree_part / trees,
        calibrate_share,
    )


def releases(
    config: BDPEConfig, epsilon: float, unit_records: int = 1
) -> tuple[BoundedRangeDpEvent, LaplaceMechanism, LaplaceMechanism | None]:
    """The plan's releases when its shares are of ``epsilon`` (x·ε at scale x); the
    Laplace ones at one unit's sensitivity, ``unit_records`` = m records' (m·Δ₁)."""
    level, pred, cal = shares(
        trees=config.trees, depth=config.depth, beta_tree=config.beta_tree,
        calibrate_share=config.calibrate_share,
    )  # fmt: skip
    split = BoundedRangeDpEvent(level * epsilon)
    m = int(unit_records)
    leaves = LaplaceMechanism(l1_sensitivity=m * leaf_mass_sensitivity()[0], epsilon=pred * epsilon)
    counts = (
        LaplaceMechanism(l1_sensitivity=m * record_count_sensitivity()[0], epsilon=cal * epsilon)
        if cal > 0
        else None
    )
    return split, leaves, counts


def plan_for(config: BDPEConfig, ledger: PrivacyLedger, unit_records: int = 1) -> BDPEPlan:
    """The plan calibrated jointly to the ledger's (ε, δ) (module docstring), every
    sensitivity one unit's of ``unit_records`` records (:mod:`fedpriv.privacy.units`)."""
    eps = ledger.budget.epsilon * (1.0 - TARGET_MARGIN)

    def build(x: float, scale: PlanScale | None = None) -> BDPEPlan:
        split, leaves, counts = releases(config, x * eps, unit_records)
        return BDPEPlan(trees=config.trees, depth=config.depth, split_event=split,
                        leaves=leaves, counts=counts, scale=scale)  # fmt: skip

    scale = calibrate_pure_plan(
        lambda x: build(x).groups,
        target_epsilon=eps,
        delta=ledger.accounting_delta,
        discretization=ledger.report().discretization,
    )
    if not scale.reached:
        log.warning("bdpe: %s; the rest of the budget is not spent", scale.shortfall)
    return build(scale.scale, scale)
