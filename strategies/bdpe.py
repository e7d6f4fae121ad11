"""bdpe_α: boosted DP ensembles of greedy decision trees, federated: the server half.

Nock & Henecka, "Boosted and Differentially Private Ensembles of Decision
Trees"; the maths and its reconstructions: :mod:`fedpriv.models.bdpe`.

Rounds. T trees of depth D, grown top-down one level per round (T·D rounds).
In round (t, k) every client returns, for each of the 2^k nodes of level k of
tree t and each public candidate split g, the (w¹, w⁰) weight sums of the
left child, plus each node's (w¹, w⁰) (:func:`fedpriv.models.bdpe.level_sums`;
weights w = ψ_α⁻¹(−y±H) of the released ensemble, clipped to [0, 1] where they
are computed). The secure-aggregation shim reveals only their sum. The server
scores every candidate by the decrease of the weighted M_α risk and picks each
node's split by the exponential mechanism on the *aggregated* scores. Under
DP there is no purity test: every leaf reaches depth D. The last level's sums
already hold every leaf's (w¹, w⁰), released by the Laplace mechanism; leaf
values are ψ_α of the released class rates and β_t comes from the released
sums (post-processing, the paper's "faster but more conservative" route).

Candidates (public, §5 of the paper): v_q = ``split_levels`` equally spaced
thresholds inside each numeric feature's public box, ½ on each binary (one-hot
level or 0/1) feature.

Calibration (``calibrate_share`` s > 0, one last round): each client counts
its records of each class in public bins of the released margin H
(:func:`fedpriv.models.bdpe_calibration.calibration_edges`, from the released trees and leaf sums);
the counts are released by the Laplace mechanism (L1 sensitivity 1: a record
is one count) with s·ε, and the server fits Platt's σ(aH + b), a > 0, to them
(post-processing). The trees' own probabilities (ψ_Mat⁻¹(H)) rank well but sit
near ½ whatever the base rate: on the benchmark's corpora their Brier score is
above the constant base-rate predictor's.

Privacy ((ε, δ)-DP at the run's δ; :mod:`fedpriv.strategies.bdpe_plan`). The shares
are the paper's split: the trees get (1 − s)·ε, each tree an equal share: a
share ``beta_tree`` for the structure, spread evenly over the D levels, the
rest for the leaves. All of them are then multiplied by one scale x ≥ 1, so
that the whole plan spends ε at δ (below).

* A level: each node's split by the exponential mechanism with ε_level =
  x·β_tree·(1 − s)·ε/(T·D) and the score sensitivity Δ_α(m) = 2α√m + 2(1 − α)
  of the level's α (:func:`~fedpriv.models.bdpe.score_sensitivity`, m the public
  record bound). The nodes of a level partition the records, so the level is
  one ε_level-DP (and ε_level-bounded-range) release by parallel composition:
  one ``BoundedRangeDpEvent(ε_level)``. The scores are monotone in the data
  (every weighted risk term only rises when a record is added), so with
  ``monotone_scores`` the mechanism samples ∝ exp(ε s/Δ) (McSherry & Talwar
  2007; McKenna & Sheldon 2020, §3), else the paper's exp(ε s/(2Δ)).
* The leaves: one record adds a weight ≤ 1 to one of the 2^D × 2 sums, so L1
  sensitivity 1 and Laplace noise of scale 1/ε_pred, ε_pred =
  x·(1 − β_tree)·(1 − s)·ε/T: one ``LaplaceDpEvent``.

The plan (T·D BR events, T Laplace events and the calibration's) is reserved
before any noise is drawn. At x = 1 its pure ε's sum to ε (basic
composition); the ledger's PLD and RDP accountants (the BR events as
ε²/8-zCDP) compose them far tighter at the run's δ, so x is the largest scale
they certify at or below ε (within 1 %).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from fedpriv.strategies.bdpe_nodes import BDPENodeStages
from fedpriv.strategies.bdpe_plan import plan_for

from fedpriv.federation.constraints import Interval, check_fields, setting
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models.bdpe import (
    CALIBRATION_BINS,
    bin_centres,
    calibrated_alpha,
    calibration_edges,
    candidate_thresholds,
    leaf_rates,
    leveraging,
    link,
    max_platt_slope,
    platt_fit,
    score_sensitivity,
    split_scores,
)
from fedpriv.models.bdpe_model import BDPEModel
from fedpriv.options import Objective, SplitFeatures
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import budget_of
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.privacy.release_stage import ReleaseStage
from fedpriv.privacy.selection import ExponentialMechanism
from fedpriv.validation import check_count

METHOD = "bdpe"


@dataclass(frozen=True, kw_only=True)
class BDPEConfig:
    """T trees of depth D, the M_α loss and the budget split (module docstring).

    ``trees`` T ∈ [1, 1000] and ``depth`` D ∈ [1, 10] (the paper: T ∈ {2, 5,
    10, 20}, D ∈ 1..6); ``alpha`` ∈ (0, 1]: the loss M_α (weights, leaf link,
    and the split criterion when ``objective = "fixed"``); ``objective``:
    ``"fixed"`` or ``"calibrated"`` (O.C.: the split criterion's α per depth
    and per tree, :func:`fedpriv.models.bdpe.calibrated_alpha`, at most
    ``alpha``); ``beta_tree`` ∈ (0, 1): the structure's share of each tree's
    budget; ``split_levels`` v_q ∈ [1, 255] thresholds per numeric feature (the
    paper: 10, or 50); ``monotone_scores``: exp(εs/Δ) rather than exp(εs/(2Δ));
    ``oc_edge`` γ ∈ (0, 1] and ``oc_k`` K ∈ [0, inf): O.C.'s weak-learning edge
    and K-monotonicity constant; ``calibrate_share`` s ∈ [0, 1): the budget share
    of the calibration round (0: none, probabilities ψ_Mat⁻¹(H)).
    """

    trees: int = setting(20, Interval(1, 1000, kind=int))
    depth: int = setting(4, Interval(1, 10, kind=int))
    alpha: float = setting(1.0, Interval(0, 1, closed="right"))
    objective: Objective = Objective.CALIBRATED
    beta_tree: float = setting(0.5, Interval(0, 1, closed="neither"))
    split_levels: int = setting(10, Interval(1, 255, kind=int))
    monotone_scores: bool = True
    oc_edge: float = setting(0.1, Interval(0, 1, closed="right"))
    oc_k: float = setting(1.0, Interval(0, None, closed="left"))
    calibrate_share: float = setting(
        0.1, Interval(0, 1, closed="left", zero="0: no calibration round")
    )

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "objective", Objective.parse(self.objective))
        if not isinstance(self.monotone_scores, bool):
            raise TypeError(f"monotone_scores must be true or false; got {self.monotone_scores!r}")

    @property
    def rounds(self) -> int:
        """One round per level of every tree, and the calibration round."""
        return self.trees * self.depth + int(self.calibrate_share > 0)


class BDPEStrategy(BDPENodeStages, Strategy):
    """Server half of bdpe_α; speaks only :class:`Query` and aggregated sums."""

    method = METHOD

    def __init__(
        self, config: BDPEConfig, *, numeric: np.ndarray, n_records: int, unit_records: int = 1
    ) -> None:
        """``numeric``: which encoded features are numeric (public box [0, 1]) rather
        than binary; ``n_records``: the public bound m on the records (sensitivity);
        ``unit_records``: the records of one privacy unit (:mod:`fedpriv.privacy.units`):
        a unit moves a score by its records' sum of Δ_α, the sums by as many."""
        self.config = config
        self.numeric = np.asarray(numeric, dtype=bool)
        self.n_records = check_count("n_records", n_records)
        self.unit_records = check_count("unit_records", unit_records)
        self.noise_multiplier_ = None  # no Gaussian noise: exponential and Laplace only
        self._thresholds = candidate_thresholds(self.numeric, config.split_levels)
        self.cand_feature = np.concatenate(
            [np.full(len(t), j, dtype=np.int64) for j, t in enumerate(self._thresholds)]
        )
        self.cand_threshold = np.concatenate(self._thresholds)

    @property
    def rounds(self) -> int:
        return self.config.rounds

    @property
    def n_candidates(self) -> int:
        return int(self.cand_feature.size)

    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        cfg = self.config
        if n_features != self.numeric.size:
            raise ValueError(f"data has {n_features} features; the schema {self.numeric.size}")
        self._ledger, self._rng = ledger, rng  # public rng: splits of an aborted level
        self._secret_rng = check_private("secret_rng", secret_rng)  # EM and Laplace draws
        self._t = 0
        self._model = BDPEModel.empty(cfg.depth, cfg.alpha)
        self._mass: list[np.ndarray] = []  # released leaf masses w¹ + w⁰, per tree
        self._budget = budget = budget_of(ledger)
        self.epsilon_level_ = self.epsilon_pred_ = self.epsilon_calibration_ = None
        self.plan_ = None
        if budget is not None:
            # Shares of ε at one calibrated scale, every sensitivity one unit's.
            self.plan_ = plan = plan_for(cfg, ledger, self.unit_records)
            self._split_event, self._leaves = plan.split_event, plan.leaves
            self._counts = plan.counts
            self.epsilon_level_ = plan.epsilon_level
            self.epsilon_pred_ = plan.leaves.epsilon
            if plan.counts is not None:
                self.epsilon_calibration_ = plan.counts.epsilon
            plan.reserve(ledger)
        self.alphas_: list[np.ndarray] = []  # the split criterion's α, per tree and depth
        self._start_tree()

    def _start_tree(self) -> None:
        cfg = self.config
        inner = (1 << cfg.depth) - 1
        self._feature = np.zeros(inner, dtype=np.int64)
        self._threshold = np.zeros(inner)
        if cfg.objective is Objective.CALIBRATED:
            alphas = calibrated_alpha(
                depth=cfg.depth,
                total_weight=self._total_weight(),
                epsilon_level=self.epsilon_level_,
                n_candidates=self.n_candidates,
                max_records=self.n_records,
                edge=cfg.oc_edge,
                k_monotonic=cfg.oc_k,
                alpha_root=cfg.alpha,
                monotone=cfg.monotone_scores,
            )
        else:
            alphas = np.full(cfg.depth, cfg.alpha)
        self._alphas = alphas
        self.alphas_.append(alphas)

    def next_query(self) -> Query | None:
        cfg = self.config
        if self._t >= cfg.rounds:
            return None
        if self._t == cfg.trees * cfg.depth:
            self._edges = calibration_edges(
                self._model.beta, self._model.leaf_values, np.asarray(self._mass)
            )
            return Query(
                round=self._t,
                method=METHOD,
                sampling_rate=1.0,
                reply_length=2 * CALIBRATION_BINS,
                record_bound=1.0,
                arrays={**self._model.to_arrays(), "edges": self._edges.copy()},
                config={"phase": "calibrate"},
            )
        level = self._t % cfg.depth
        nodes = 1 << level
        return Query(
            round=self._t,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=2 * nodes * (self.n_candidates + 1),
            record_bound=1.0,
            arrays={
                **self._model.to_arrays(),
                "tree_feature": self._feature.copy(),
                "tree_threshold": self._threshold.copy(),
                "cand_feature": self.cand_feature,
                "cand_threshold": self.cand_threshold,
            },
            config={**self._level_config(), "level": level},
        )

    def _level_config(self) -> dict:
        """A level query's settings that fix its sensitivity (its ``level`` aside)."""
        return {"phase": "level", "depth": self.config.depth, "candidates": self.n_candidates}

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg = self.config
        if query.round != self._t:
            raise ValueError(f"update for round {query.round}, expected round {self._t}")
        if self._t == cfg.trees * cfg.depth:
            if aggregate is not None:  # aborted: no calibration, ψ_Mat⁻¹(H) stays
                self._calibrate(np.asarray(aggregate, dtype=np.float64))
            self._t += 1
            return
        level = self._t % cfg.depth
        nodes, G = 1 << level, self.n_candidates
        if aggregate is None:
            # Aborted: nothing released. Public (data-independent) splits keep the tree
            # growing; an aborted last level drops the tree (its leaves cannot be released).
            choice = self._rng.integers(0, G, size=nodes)
            left = total = None
        else:
            stats = np.asarray(aggregate, dtype=np.float64)
            if stats.shape != (2 * nodes * (G + 1),):
                raise ValueError(f"round {self._t}: need {2 * nodes * (G + 1)} sums")
            # Honest sums lie in [0, m] and left ≤ node; clipping changes none of them
            # and bounds what a hostile reply can do to the scores.
            total = np.clip(stats[: 2 * nodes].reshape(nodes, 2), 0.0, self.n_records)
            left = np.clip(stats[2 * nodes :].reshape(nodes, G, 2), 0.0, total[:, None, :])
            choice = self._select(level, left, total)
        self._set_splits(level, choice)
        if level == cfg.depth - 1:
            if left is not None:
                self._finish_tree(left, total, choice)
            if self._t + 1 < cfg.trees * cfg.depth:
                self._start_tree()
        self._t += 1

    def _select(self, level: int, left: np.ndarray, total: np.ndarray) -> np.ndarray:
        """Each node's split: the exponential mechanism on the aggregated scores."""
        alpha = float(self._alphas[level])
        scores = split_scores(left, total, alpha)
        if self._budget is None:
            return np.argmax(scores, axis=1)
        em = ExponentialMechanism(
            epsilon=self.epsilon_level_,
            # A unit's records each move a score by ≤ Δ_α (a node's, added one by one).
            sensitivity=self.unit_records * score_sensitivity(alpha, self.n_records),
            monotone=self.config.monotone_scores,
        )
        # One event for the level: its nodes hold disjoint records (parallel composition).
        tree = self._t // self.config.depth
        stage = ReleaseStage(ledger=self._ledger, rng=self._secret_rng, event=self._split_event)
        return stage.select(
            lambda rng: np.array([em.apply(s, rng=rng) for s in scores], dtype=np.int64),
            label=f"tree {tree} level {level}: splits",
        )

    def _set_splits(self, level: int, choice: np.ndarray) -> None:
        first = (1 << level) - 1
        span = slice(first, first + choice.size)
        self._feature[span] = self.cand_feature[choice]
        self._threshold[span] = self.cand_threshold[choice]

    def _total_weight(self) -> float:
        """O.C.'s public estimate of Σw for the next tree: the last tree's released leaf
        masses (w = ½ for every record before the first tree)."""
        if not self._mass:
            return 0.5 * self.n_records
        return float(max(self._mass[-1].sum(), 1.0))

    def _finish_tree(self, left: np.ndarray, total: np.ndarray, choice: np.ndarray) -> None:
        """Release the leaves' (w¹, w⁰) (Laplace) and append the tree."""
        cfg = self.config
        nodes = left.shape[0]
        chosen = left[np.arange(nodes), choice]  # (nodes, 2): each node's chosen left child
        sums = np.stack([chosen, total - chosen], axis=1).reshape(2 * nodes, 2)
        prior = 0.0
        if self._budget is not None:
            label = f"tree {self._t // cfg.depth}: leaf (w¹, w⁰)"
            stage = ReleaseStage(
                ledger=self._ledger,
                mechanism=self._leaves,
                rng=self._secret_rng,
                bound=sum_bound(1.0, self.n_records, sampling_rate=1.0),
            )
            sums = stage.release(sums.ravel(), label=label).reshape(2 * nodes, 2)
            prior = self._leaves.scale
        rates = leaf_rates(sums[:, 0], sums[:, 1], prior)
        values = link(rates, cfg.alpha)
        beta = leveraging(sums[:, 0], sums[:, 1], values, cfg.alpha, self.n_records)
        self._model = self._model.with_tree(self._feature, self._threshold, values, beta)
        self._mass.append(np.maximum(sums, 0.0).sum(axis=1))

    def _calibrate(self, counts: np.ndarray) -> None:
        """Release the (n¹, n⁰) counts per margin bin (Laplace) and fit Platt's map."""
        B = CALIBRATION_BINS
        if counts.shape != (2 * B,):
            raise ValueError(f"round {self._t}: need {2 * B} calibration counts")
        counts = np.clip(counts, 0.0, self.n_records)  # honest counts lie in [0, m]
        if self._budget is not None:
            label = "calibration: (n¹, n⁰) per margin bin"
            stage = ReleaseStage(
                ledger=self._ledger,
                mechanism=self._counts,
                rng=self._secret_rng,
                bound=float(self.n_records),
            )
            counts = stage.release(counts, label=label)
        counts = counts.reshape(B, 2)
        platt = platt_fit(
            counts[:, 0],
            counts[:, 1],
            bin_centres(self._edges),
            max_slope=max_platt_slope(self._edges),
        )
        self._model = self._model.with_platt(platt)

    def model(self) -> BDPEModel:
        """The released ensemble so far."""
        return self._model


def build(config: BDPEConfig, context: StrategyContext) -> BDPEStrategy:
    """The registry's factory: candidates from the public schema (or the unit box)."""
    from fedpriv.strategies.lumberjack import feature_space

    space = feature_space(context, SplitFeatures.COLUMNS)
    if context.n_classes != 2:
        raise ValueError(f"bdpe learns two classes; the label set has {context.n_classes}")
    return BDPEStrategy(
        config,
        numeric=space.numeric,
        n_records=context.n_records,
        unit_records=context.unit_records,
    )
