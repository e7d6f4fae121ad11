"""Lumberjack DP random forest: the server half (staged growth, DP pruning, DP leaves).

Lebeda, Erb, Cebere & Bellet, "Lumberjack": k = 30 random trees, ε₁ = 0.75ε
for the structure, δ = 1e-6; depth d = 49 here (the paper's 100 costs more
once growth is staged: Accuracy in :mod:`fedpriv.strategies.lumberjack_config`).
Those are the largest automatic sizes: :meth:`LumberjackStrategy.begin`
resolves ``trees = depth = 0`` from the ledger's (ε, δ) and the public
record bound (:mod:`fedpriv.models.lumberjack_sizes`), as the run did before
counting its rounds.

Federated design: nothing exact reaches a client
------------------------------------------------
The server owns the trees and sees only sums (the curator); clients count,
and everything a client receives is public configuration or a released
mechanism output. Levels 0..d−1 are cut into stages of h = 7 levels (the
last one shorter). Round s sends, for all k trees at once, the *complete*
subtrees of height h_s under the stage's roots — every node's split, drawn
from its path key and public range (:func:`fedpriv.models.lumberjack.expand`)
— and, after the first stage, the previous stage's released bits "this
bottom node was grown". Each client walks its rows through the subtrees and
returns one count per node (``clients/lumberjack.py``); the shim reveals the
sum. The server runs MarkHeavyHitters (Algorithm 1) with the Gaussian sparse
threshold (Algorithm 2, or 3 with ``two_sided``) on every stage's subtrees:
Heavy nodes become splits, their other children leaves, and both children
of each Heavy node of the stage's bottom level are the next stage's roots.
After the last stage one more round asks for the class counts of the leaves
of the released structure, and the leaves are released with the exponential
mechanism (η = √(8ρ/k) per tree, one η-bounded-range event each) or as
Gaussian class counts (std √(k/(2ρ)), one Gaussian event per tree), ρ the
largest with (ε₂, δ₂) by Lemma 9.

So which nodes a query holds, every reply length (Σ_trees roots·(2^h − 1)
counts in a stage, C per released leaf at the end) and the communication
report are functions of public values and released Heavy bits only. A
client cannot tell an empty node from one under the gate or one whose noisy
count fell below τ: all three are "not grown". (Until this design, nodes
were grown while they held more than the gate's g rows — exact counts — and
the index maps told the clients which nodes were empty, gated or grown.)

Privacy: Theorem 6, stage by stage. A record sits in at most one root of
each stage of each tree (its path; none once the path left the grown
frontier), so Lemma 3 on that root's subtree bounds the threshold queries
it enters in the stage by 1 + ⌊log₂ h_s⌋. Which queries stage s asks is a
function of public values and of the answers of stages < s; Lemma 15 (the
Gaussian sparse histogram's δ) holds for adaptively chosen counting
queries in which each record appears at most m times. Hence Theorem 6's
(ε₁, δ₁) holds with m = k·Σ_s (1 + ⌊log₂ h_s⌋) (d = 49, h = 7: 21 per
tree, m = 630 for 30 trees), recorded once as an ``ApproxDpEvent`` when the
first bits are released; the frontier cap (``max_frontier``) and the
leaves' structure are post-processing. The answers are the same mechanism
on the same kind of queries; what changes is m: Algorithm 1 on the whole
depth-d tree at once (m = k(1 + ⌊log₂ d⌋), 210 at k = 30, d = 100) needs the whole tree before
its first answer, which exact growth provided. Checking level by level as
the tree grows (h = 1) is *not* the same set of checks: a record enters one
query per level per tree, m = k·d (3,000 at d = 100; σ and τ ×3.8). Stages
trade m against 2^h nodes per root.

Memory: every data-sized structure is capped by public values, so a client
that inflates its counts cannot blow up memory or time: at most B Heavy
nodes per level per tree (from the public record bound n, exceeded by an
honest run with probability ≤ 1e-9; without n, what the frontier cap
allows) and F = min(max_frontier, B) at a stage's bottom, keeping the
smallest path keys (a public order; post-processing of released bits).
The resulting caps on nodes, leaves, reply lengths and server memory
(``caps_``), and their derivation: :mod:`fedpriv.models.lumberjack_bounds`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event
from fedpriv.strategies.lumberjack_config import LumberjackConfig
from fedpriv.strategies.lumberjack_leaves import LumberjackLeaves
from fedpriv.strategies.lumberjack_nodes import LumberjackNodeStages
from fedpriv.strategies.lumberjack_queries import LumberjackQueries
from fedpriv.strategies.recalibration import LinearRecalibrationRound

from fedpriv import logs
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models.heavy_hitters import ForestModel, PrunedTree, assemble
from fedpriv.models.lumberjack import FeatureSpace, Layer, Stage, children, root_layer
from fedpriv.models.lumberjack_bounds import GrowthCaps, growth_caps, heavy_bits
from fedpriv.options import SplitFeatures
from fedpriv.privacy import calibrate_sparse_threshold, largest_rho
from fedpriv.privacy.calibration import largest_certified
from fedpriv.privacy.events import ApproxDpEvent, BoundedRangeDpEvent
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import budget_of
from fedpriv.privacy.randomness import check_private, rounding_margin
from fedpriv.privacy.release_stage import ReleaseStage
from fedpriv.validation import check_count

__all__ = ["METHOD", "LumberjackConfig", "LumberjackStrategy", "build", "feature_space"]

log = logs.get_logger(__name__)

METHOD = "lumberjack"
#: How far the leaves' ρ may grow past Lemma 9's split when the whole plan is
#: certified at once (the tighter composition frees a few per cent of ε, not more).
LEAF_SCALE_MAX = 4.0


class LumberjackStrategy(LumberjackNodeStages, LumberjackQueries, LumberjackLeaves, Strategy):
    """Server half of Lumberjack; speaks only :class:`Query` and aggregates."""

    method = METHOD

    def __init__(
        self,
        config: LumberjackConfig,
        *,
        space: FeatureSpace,
        n_classes: int = 2,
        n_records: int | None = None,
        unit_records: int = 1,
    ) -> None:
        #: m, the records of one privacy unit (:mod:`fedpriv.privacy.units`): the sparse
        #: threshold answers counts / m over m times the queries, the leaves m·Δ.
        self.unit_records = check_count("unit_records", unit_records)
        #: The settings as given (``trees``/``depth`` may be 0, automatic); ``config`` is
        #: their resolution for the run's budget and record bound once :meth:`begin` ran.
        self.requested = self.config = config
        self.space = space
        #: The public bound on the run's records (``build`` passes the context's): it
        #: caps every data-sized structure and bounds an honest leaf count for the range
        #: check (:mod:`fedpriv.privacy.range_guard`). ``None``: ``max_frontier`` alone
        #: caps growth, and there is no range check.
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.n_classes = check_count("n_classes", n_classes, minimum=2)
        self.noise_multiplier_ = None  # DP-SGD/boosting API compatibility: not one z here
        self.calibration_ = None
        self._model: ForestModel | None = None

    # -- Strategy protocol ----------------------------------------------------
    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        if n_features != self.space.n_features:
            raise ValueError(
                f"data has {n_features} features; the feature space {self.space.n_features}"
            )
        # (ε, δ) are the ledger's; no ledger: the non-private reference.
        self._budget = budget = budget_of(ledger)
        # Automatic trees and depth, from the budget and the public record bound only
        # (the run's settings were resolved the same way before its rounds were counted).
        self.config = cfg = self.requested.resolved(
            epsilon=None if budget is None else budget.epsilon,
            delta=None if budget is None else budget.delta,
            n_records=self.n_records,
        )
        if self.requested.automatic:
            log.info(
                "lumberjack: %d trees, depth %d (automatic; public record bound %s)",
                cfg.trees, cfg.depth, self.n_records,
            )  # fmt: skip
        self._ledger, self._t = ledger, 0
        self._secret_rng = check_private("secret_rng", secret_rng)  # noise, EM draws
        # Public per-tree keys and split salts, from the server's generator.
        keys = rng.integers(0, 2**63, size=cfg.trees, dtype=np.int64).astype(np.uint64)
        self._salts = rng.integers(0, 2**62, size=cfg.trees, dtype=np.int64)
        self._roots: list[Layer] | None = [
            root_layer(int(k), self.space, np.zeros(1)) for k in keys
        ]
        # Per tree, per depth: the released structure (keys, splits; feature −1 = leaf).
        self._levels: list[list[tuple[np.ndarray, ...]]] = [[] for _ in keys]
        self._grow: list[np.ndarray] | None = None  # last stage's released bottom bits
        self._stages: list[Stage] | None = None
        self._trees: list[PrunedTree] | None = None
        self._model = None
        self.gate_ = cfg.gate
        self._recal = None
        if cfg.recalibrate_share > 0:
            if self.n_records is None:
                raise ValueError(
                    "recalibrate_share > 0 needs the public record count (n_records); "
                    "set recalibrate_share = 0 without it"
                )
            self._recal = LinearRecalibrationRound(
                n_classes=self.n_classes, n_records=self.n_records, share=cfg.recalibrate_share,
                unit_records=self.unit_records,
            )  # fmt: skip
        if budget is None:
            self.caps_ = self._caps(None)
            self._events = []
            return
        share = 1.0 - cfg.recalibrate_share  # the rest: the recalibration round's
        eps, delta = share * budget.epsilon, share * budget.delta
        eps1, d1 = cfg.structure_budget(budget.epsilon, budget.delta)
        eps2, d2 = (1 - cfg.structure_fraction) * eps, (1 - cfg.structure_fraction) * delta
        # A unit's m records enter up to m·cfg.m threshold queries, each moving a count
        # by at most m: on counts / m (the mechanism's unit) every query moves by ≤ 1,
        # Theorem 6 at m·cfg.m queries.
        queries = cfg.m * self.unit_records
        self.calibration_ = calibrate_sparse_threshold(
            epsilon=eps1, delta=d1, m=queries, two_sided=cfg.two_sided
        )
        self.rho_ = largest_rho(epsilon=eps2, delta=d2)
        cal = self.calibration_
        self.caps_ = self._caps(cal.mechanism(gate=self.gate_))
        structure = ApproxDpEvent(
            eps1,
            cal.delta_certified,
            f"lumberjack-theorem-6(m={queries}, stages={len(cfg.heights)}x<={cfg.stage_height}, "
            f"sigma={cal.sigma:.6g}, gap={cal.gap:.6g}, gate={self.gate_}, "
            f"tau={self.gate_ + 1 + cal.gap:.6g}{', two-sided' if cfg.two_sided else ''})",
        )
        # The paper's leaf parameter is the largest ρ with (ε₂, δ₂) by Lemma 9, ρ/k
        # per tree. Split that way, the pieces' (ε, δ) add up (basic composition),
        # while the run's ledger composes the whole plan far tighter: the fit would
        # spend ~97 % of its ε. So ρ is scaled (up or down) to the largest value
        # whose whole plan (structure, leaves and the recalibration round) the
        # ledger certifies at the run's (ε, δ): the learner spends its budget and
        # never more.
        recal: list[tuple[Any, int]] = []
        if self._recal is not None:
            self._recal.plan(ledger, rng=self._secret_rng)
            recal = [(self._recal.noise.event, 1)]
        scale = largest_certified(
            lambda x: [(structure, 1), (self._leaf_event(self.rho_ * x), cfg.trees), *recal],
            epsilon=budget.epsilon,
            delta=budget.delta,
            upper=LEAF_SCALE_MAX,
        )
        self.rho_ *= scale
        leaf = self._leaf_event(self.rho_)
        self._events = [(structure, "structure (sparse threshold)"), (leaf, "leaf labels")]
        ledger.reserve(structure, 1)
        ledger.reserve(leaf, cfg.trees)

    def _caps(self, mech) -> GrowthCaps:
        """The public caps (module docstring, Memory); ``mech=None``: no privacy."""
        cfg = self.config
        return growth_caps(
            n_records=self.n_records,
            n_trees=cfg.trees,
            heights=cfg.heights,
            n_classes=self.n_classes,
            max_frontier=cfg.max_frontier,
            gate=self.gate_,
            tau=None if mech is None else self.unit_records * mech.tau,  # in records
            sigma=None if mech is None else self.unit_records * mech.sigma,
        )

    def _leaf_event(self, rho: float) -> dp_event.DpEvent:
        """One tree's leaf release at ρ/k-zCDP: η = √(8ρ/k) EM, or std √(k/(2ρ)) counts."""
        k = self.config.trees
        if self.config.leaf_mechanism == "exponential":
            self.eta_ = math.sqrt(8.0 * rho / k)
            return BoundedRangeDpEvent(self.eta_)
        self.leaf_std_ = math.sqrt(k / (2.0 * rho))
        return dp_event.GaussianDpEvent(self.leaf_std_)  # sensitivity 1 per tree

    def leaf_noise(self, reply_length: int) -> float:
        """The Gaussian leaves' std per count for a reply of ``reply_length`` counts:
        z·(m√k + γ√d), z = σ/√k the whole reply's multiplier (k releases of std mσ and
        sensitivity m, one unit's, compose to one of multiplier σ/√k at sensitivity
        m√k; m = 1 at record level), widened by
        the grid's rounding margin as every Gaussian release is, so that a node derives
        exactly z from the declared std (:meth:`node_stages`)."""
        k, m = self.config.trees, self.unit_records  # a unit moves a tree's counts by m
        return self.leaf_std_ * (m + rounding_margin(reply_length, "l2") / math.sqrt(k))

    def next_query(self) -> Query | None:
        cfg, t = self.config, self._t
        heights = cfg.heights
        # Always every stage and the leaf round: stopping early would be control flow on data.
        if t < len(heights):
            return self._stage_query(t, heights[t])
        if t == len(heights):
            return self._leaf_query(t)
        if t == len(heights) + 1 and self._recal is not None:
            return self._recal.query(
                round=t, method=METHOD, arrays=self._model.to_arrays(), config={}
            )
        return None

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        if query.round != self._t:
            raise ValueError(f"update for round {query.round}, expected round {self._t}")
        if aggregate is None:
            raise RuntimeError("a Lumberjack round cannot be skipped (it was aborted)")
        heights = self.config.heights
        if self._t > len(heights):
            # A row's own label is in one leaf per tree: the forest's effective
            # degrees of freedom are about its leaves per tree (public structure).
            dof = float(np.mean([tree.is_leaf.sum() for tree in self._trees]))
            fitted = self._recal.update(aggregate, label="recalibration sums", dof=dof)
            self._model = dataclasses.replace(self._model, recalibration=fitted)
            self._t += 1
            return
        counts = np.rint(aggregate).astype(np.int64)
        if self._t < len(heights):
            self._finish_stage(counts, last=self._t + 1 == len(heights))
        else:
            self._release_leaves(counts)
        self._t += 1

    # -- release --------------------------------------------------------------
    def _check(self):
        """CheckThreshold: Algorithm 2 (or 3), or ``count > 0`` without privacy."""
        if self._budget is None:
            return lambda c: c > 0  # non-private: every non-empty node splits
        mech = self.calibration_.mechanism(gate=self.gate_, unit=self.unit_records)
        return lambda c: mech.check(c, rng=self._secret_rng)

    def _finish_stage(self, counts: np.ndarray, *, last: bool) -> None:
        """Algorithm 1 on every tree's stage; keep the released bits, drop the counts."""
        if self._t == 0 and self._budget is not None:
            # The stage's Heavy bits are released (the next query carries them):
            # the whole structure's (ε₁, δ₁) covers every stage (module docstring).
            structure, label = self._events[0]
            ReleaseStage(ledger=self._ledger, rng=self._secret_rng, event=structure).charge(
                label=label
            )
        check, start = self._check(), 0
        roots, grow = [], []
        for k, stage in enumerate(self._stages):
            block = counts[start : start + stage.size]
            start += stage.size
            split = self._heavy(stage, block, check)
            for level in range(len(stage.key)):
                width = stage.n_roots << level
                kept = (
                    np.ones(width, dtype=bool)
                    if level == 0
                    else split[level - 1][np.arange(width) // 2]
                )
                s = split[level][kept]
                self._levels[k].append(
                    (
                        stage.key[level][kept],
                        np.where(s, stage.feature[level][kept], -1),
                        np.where(s, stage.threshold[level][kept], 0.0),
                    )
                )
            grow.append(split[-1])
            roots.append(children(stage.bottom, np.flatnonzero(split[-1]), self.space))
        if start != counts.size:
            raise ValueError(f"reply holds {counts.size} counts; the stage has {start}")
        self._stages = None
        if not last:
            self._roots, self._grow = roots, grow
            return
        # Depth d: the children of the last Heavy nodes are leaves.
        self._trees = []
        for k, leaves in enumerate(roots):
            none = np.full(leaves.size, -1, dtype=np.int64)
            self._levels[k].append((leaves.key, none, np.zeros(leaves.size)))
            self._trees.append(assemble(*map(list, zip(*self._levels[k], strict=True))))
        self._roots = self._grow = self._levels = None

    def _heavy(self, stage: Stage, block: np.ndarray, check) -> list[np.ndarray]:
        """The stage's split bits: Heavy, at most B per level and F at the bottom (``caps_``)."""
        return heavy_bits(stage, block, check, self.caps_)

    def model(self) -> ForestModel | None:
        """The released forest; ``None`` until the leaf round is in."""
        return self._model

    def status_notes(self) -> list[str]:
        """A forest whose every tree is one leaf (no node passed the sparse threshold:
        too few records for the structure's ε) predicts the released class rates only;
        the run then says so (degraded). Read from the released structure only."""
        if self._trees is None or any((~t.is_leaf).any() for t in self._trees):
            return []
        return ["no node passed the sparse threshold: every tree is one leaf and the forest "
                "predicts the class rates only (too few records for this ε)"]  # fmt: skip


def build(config: LumberjackConfig, context: StrategyContext) -> LumberjackStrategy:
    """The registry's factory: the feature space of the public schema (or the unit box)."""
    return LumberjackStrategy(
        config,
        space=feature_space(context, config.split_features),
        n_classes=context.n_classes,
        n_records=context.n_records,
        unit_records=context.unit_records,
    )


def feature_space(context: StrategyContext, split_features: SplitFeatures) -> FeatureSpace:
    """The public feature space: the schema's, or [0, 1]^d for bare arrays."""
    if context.schema is not None:
        return FeatureSpace.from_schema(context.schema, split_features)
    return FeatureSpace.unit_box(context.n_features)
