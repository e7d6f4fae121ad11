"""DP federated gradient boosting with random trees: the server half.

Benchmark paper §3.4. Each round draws a depth-D tree with random splits
inside the public feature box (no privacy cost), asks the clients for the
per-leaf sums (Σg, Σh) of their Poisson(q) samples, adds Gaussian noise to the
securely aggregated sums and sets damped Newton leaf values
−η Σg / (max(Σh, 0) + λ).

Regularisation. In a private run λ = max(``lam`` · σ_H, ``reg_lambda``) with
σ_H = z · Δ₂ the standard deviation of the Gaussian noise added to every
coordinate of a reply, each released Σh included (z the calibrated noise
multiplier, Δ₂ the reply's L2 sensitivity below). A fixed λ = 1 is far below
that noise (σ_H ≈ 14.5 at q = 1, T = 50, ε = 2): a small leaf's noisy Σh can
reach 0 and its step is then several logits of pure noise. The non-private
reference uses ``reg_lambda``.

Intercept. With ``intercept`` (default) round 0 asks for the total (Σg, Σh)
at margin 0 (a one-leaf tree) and sets the base logit(s) b = −G̃/(max(H̃, 0) + λ)
from the released sums; it is one more event of the same plan (same q and
z), so ``rounds`` counts it: T rounds grow T − 1 trees. Without it the model
starts at margin 0, as in the paper.

Multiclass (C ≥ 3, softmax Newton; Friedman 2001, XGBoost ``multi:softprob``).
One random tree per round with C-vector leaves; each record contributes
g = p − e_y and the diagonal hessian h_k = p_k(1 − p_k), p = softmax(margin).
Sensitivity, per record:

* ‖g‖₂² = (1 − p_y)² + Σ_{k≠y} p_k² ≤ (1 − p_y)² + (Σ_{k≠y} p_k)² = 2(1 − p_y)² ≤ 2,
  approached as p_y → 0 with the mass on one other class: ‖g‖₂ ≤ √2.
* ‖h‖₂² = Σ_k p_k · p_k(1 − p_k)² ≤ max_{u∈[0,1]} u(1 − u)² · Σ_k p_k = 4/27,
  since u(1 − u)² peaks at u = 1/3; attained at three classes with
  p = (1/3, 1/3, 1/3) (for C > 3 approached, the others → 0): ‖h‖₂ ≤ √(4/27).

One record sits in one leaf, so the L2 sensitivity of a reply is
√(2 + 4/27) (binary: √(1 + 1/16), below). The client kernel clips each
record's (g, h) to exactly these bounds where it computes them
(:func:`fedpriv.models._kernels.softmax_grad_hess`).

Privacy. One record changes one leaf's (Σg, Σh) by at most (1, 0.25), so the
L2 sensitivity of the whole reply is √(1 + 0.25²). The client kernel clips each
record's g to [−1, 1] and h to [0, 1/4] (:data:`GRAD_BOUND`, :data:`HESS_BOUND`),
so this holds for any label, not only for y ∈ {0, 1}. A round is a Gaussian
mechanism on a Poisson(q) sample; T rounds are recorded as T such events and
the noise multiplier is calibrated for exactly that plan.

Participation. Each client may also answer only with probability ρ. A
client's records are all in or all out together, and its presence is visible
in the aggregate (its other records move the sums far more than the noise), so
a record's inclusion is not an independent Poisson(ρ·q) event. The per-round
privacy profile is ρ·δ_q(ε). ``participation_accounting`` chooses
(:mod:`fedpriv.privacy.participation`): ``valid`` (default) calibrates at q,
which covers ρ·δ_q(ε) ≤ δ_q(ε), so ρ never lowers the noise
(docs/explanation/architecture.md §1); ``tight`` accounts the mixture PLD whose
profile is exactly ρ·δ_q(ε); ``paper`` calibrates at ρ·q as the benchmark paper
does (§5.6), which is *not a valid guarantee (comparison only)*: the ledger
reports ε as not certified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from fedpriv.federation.constraints import Interval, check_fields, setting
from fedpriv.federation.limits import SIZE_LIMITS
from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models._kernels import GRAD_BOUND, HESS_BOUND
from fedpriv.models.trees import (
    INTERCEPT,
    TREE,
    RandomTree,
    TreeEnsemble,
    leaf_sums_sensitivity,
    newton_leaf_values,
    sample_tree,
    split_feature_weights,
)
from fedpriv.options import SplitFeatures
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting, parse_accounting
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.validation import (
    check_count,
    check_probability,
)

METHOD = "boosting"
# GRAD_BOUND (|g| ≤ 1) and HESS_BOUND (h ≤ 1/4) live with the client kernel, which
# clips every record's (g, h) to them: the bound assumed here is the one enforced there,
# and the one the client's reply_sensitivity reports (one function for both).
L2_SENSITIVITY = leaf_sums_sensitivity(2)[1]
#: The same for C ≥ 3 classes: √(2 + 4/27) (module docstring).
SOFTMAX_L2_SENSITIVITY = leaf_sums_sensitivity(3)[1]


@dataclass(frozen=True, kw_only=True)
class BoostingConfig:
    """Hyper-parameters of DP boosting (paper Table 5: depth 5, lr 0.4, q 0.05).

    ``rounds`` is the number of federated rounds: one per tree, plus the
    intercept round with ``intercept``; 75 is the paper's per-budget choice on
    130-US at ε = 2 (§5.3; 50 on BRFSS).
    ``lam``: λ = max(``lam`` · σ_H, ``reg_lambda``) in a private run, σ_H = z·Δ₂
    the std of the noise on each released Σh (module docstring); ``reg_lambda``
    alone in the non-private reference. ``intercept``: an accounted round-0
    base logit (``False``: margin 0, the paper's start). ``lam = 0`` with
    ``intercept = False`` is the paper's algorithm (λ = ``reg_lambda`` = 1).
    ``split_features``: how a random split picks its feature
    (:class:`~fedpriv.models.lumberjack.SplitFeatures`). The privacy budget is
    the run ledger's, not a setting here. ``participation_accounting`` is
    ``valid`` (default), ``tight`` or ``paper`` (not a valid guarantee;
    module docstring). ``lam`` = 10 and ``intercept`` measured on the synthetic
    task, BRFSS and Diabetes 130-US at ε ∈ {0.5, 8} with the other defaults
    (``experiments/boosting_check.py``; ``lam`` ∈ {0, 2.5, 5, 10, 20}): the best
    or within one sd of it in every cell, and from 2.5 on every Brier score is
    below the base rate's. A bound on each leaf step (as ``dp_gam``'s
    ``max_update``) never bound at ``lam`` ≥ 2.5 there, so there is none.
    """

    rounds: int = setting(
        75,
        Interval(
            1,
            None,
            kind=int,
            most=SIZE_LIMITS["boosting"]["rounds"],
            note="and rounds × 2^depth ≤ 2^23",
        ),
    )
    depth: int = setting(5, Interval(1, 12, kind=int))
    learning_rate: float = setting(0.4, Interval(0, None, closed="neither"))
    sampling_rate: float = setting(0.05, Interval(0, 1, closed="right"))
    lam: float = setting(10.0, Interval(0, None, closed="left"))
    reg_lambda: float = setting(1.0, Interval(0, None, closed="neither"))
    intercept: bool = True
    split_features: SplitFeatures = SplitFeatures.COLUMNS
    participation_accounting: ParticipationAccounting = ParticipationAccounting.VALID

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "participation_accounting", parse_accounting(self.participation_accounting)
        )
        object.__setattr__(self, "split_features", SplitFeatures.parse(self.split_features))
        check_fields(self)
        if not isinstance(self.intercept, bool):
            raise TypeError(f"intercept must be true or false; got {self.intercept!r}")

    @property
    def n_leaves(self) -> int:
        return 1 << self.depth

    @property
    def n_trees(self) -> int:
        """Trees grown: one per round but the intercept's."""
        return self.rounds - int(self.intercept)


class DPBoostingStrategy(Strategy):
    """Server half of DP boosting; speaks only :class:`Query` and aggregates."""

    method = METHOD

    def __init__(
        self,
        config: BoostingConfig,
        *,
        feature_weights: np.ndarray | None = None,
        participation: float = 1.0,
        n_records: int | None = None,
        n_classes: int = 2,
        unit_records: int = 1,
    ) -> None:
        """``feature_weights``: public split-feature probabilities (default uniform);
        ``participation``: the runtime's client participation ρ (for the accounting);
        ``n_records``: public bound on the records behind a sum, for the range check of
        each released sum (:mod:`fedpriv.privacy.range_guard`; ``None``: no check);
        ``n_classes``: size of the public label set (≥ 3: softmax, C-vector leaves);
        ``unit_records``: m, a privacy unit's records (:mod:`fedpriv.privacy.units`)."""
        self.config = config
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.feature_weights = feature_weights
        self.participation = check_probability("participation", participation)
        self.n_classes = check_count("n_classes", n_classes, minimum=2)
        self.unit_records = check_count("unit_records", unit_records)
        self.noise_multiplier_: float | None = None
        self._t = 0

    @property
    def n_outputs(self) -> int:
        """Logits per record: 1 (binary) or C."""
        return 1 if self.n_classes == 2 else self.n_classes

    @property
    def l2_sensitivity(self) -> float:
        """Δ₂ of one round's reply (module docstring): one unit's, m records' (m·Δ₂)."""
        return self.unit_records * leaf_sums_sensitivity(self.n_classes)[1]

    # -- Strategy protocol ----------------------------------------------------
    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        cfg, c = self.config, self.n_outputs
        self._n_features = check_count("n_features", n_features)
        self._rng = rng  # public: tree structure
        self._t = 0
        n_internal = cfg.n_leaves - 1
        self._feature = np.zeros((cfg.n_trees, n_internal), dtype=np.int64)
        self._threshold = np.zeros((cfg.n_trees, n_internal))
        self._values = np.zeros((cfg.n_trees, cfg.n_leaves * c))
        self._base = np.zeros(c)  # margin 0 until the intercept round releases one
        # (ε, δ) are the ledger's; no ledger: the non-private reference.
        self._noise = GaussianRounds.plan(
            ledger,
            l2_sensitivity=self.l2_sensitivity,
            sampling_rate=cfg.sampling_rate,
            rounds=cfg.rounds,
            participation=self.participation,
            accounting=cfg.participation_accounting,
            rng=check_private("secret_rng", secret_rng),  # private: noise
            sum_bound=sum_bound(
                max(GRAD_BOUND, HESS_BOUND), self.n_records, sampling_rate=cfg.sampling_rate
            ),
            dims=2 * cfg.n_leaves * c,  # a tree round's reply, the longest
        )
        if self._noise is not None:
            self.noise_multiplier_ = self._noise.noise_multiplier

    def node_stages(self) -> list[NodeStage]:
        """The plan a node enforces (after :meth:`begin`; ``[]`` in a non-private run):
        the intercept round (with ``intercept``) and the tree rounds, one plan's q and z."""
        if self._noise is None:
            return []
        cfg, c = self.config, self.n_outputs
        shapes = [(INTERCEPT, int(cfg.intercept), 2 * c), (TREE, cfg.n_trees, 2 * cfg.n_leaves * c)]
        stages = []
        for phase, rounds, length in shapes:
            if rounds:
                stage = self._noise.node_stage(
                    name=phase,
                    method=METHOD,
                    rounds=rounds,
                    reply_length=length,
                    record_bound=max(GRAD_BOUND, HESS_BOUND),
                    config=self._settings(phase),
                )
                stages.append(stage)
        return stages

    def _settings(self, phase: str) -> dict[str, str | int]:
        """A query's sensitivity-setting config (:meth:`fedpriv.clients.boosting.BoostingClient.
        reply_sensitivity`)."""
        return {"phase": phase, "n_classes": self.n_classes}

    def noise_std(self, query: Query) -> float | None:
        """The std the release of ``query``'s sum needs (distributed noise's shares)."""
        return None if self._noise is None else self._noise.std(query.reply_length)

    @property
    def reg_lambda_(self) -> float:
        """λ of every Newton step: max(lam · σ_H, reg_lambda), σ_H = z·Δ₂ (private runs)."""
        if self._noise is None:
            return self.config.reg_lambda
        sigma = self.noise_multiplier_ * self.l2_sensitivity
        return max(self.config.lam * sigma, self.config.reg_lambda)

    @property
    def rounds(self) -> int:
        """Federated rounds this strategy asks for: one per tree (+ the intercept's)."""
        return self.config.rounds

    @property
    def round_event(self) -> dp_event.DpEvent:
        """The DpEvent one round releases (private runs only)."""
        if self._noise is None:
            raise ValueError("non-private run: no event")
        return self._noise.event

    def _is_intercept(self, t: int) -> bool:
        return self.config.intercept and t == 0

    def next_query(self) -> Query | None:
        cfg, t = self.config, self._t
        if t >= cfg.rounds:
            return None
        c = self.n_outputs
        if self._is_intercept(t):
            return Query(
                round=0,
                method=METHOD,
                sampling_rate=cfg.sampling_rate,
                reply_length=2 * c,
                record_bound=max(GRAD_BOUND, HESS_BOUND),
                arrays={"base": self._base},
                config=self._settings(INTERCEPT),
            )
        k = t - int(cfg.intercept)  # the tree this round fills
        tree = sample_tree(
            depth=cfg.depth,
            n_features=self._n_features,
            rng=self._rng,
            feature_weights=self.feature_weights,
        )
        self._feature[k], self._threshold[k] = tree.feature, tree.threshold
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=cfg.sampling_rate,
            reply_length=2 * cfg.n_leaves * c,
            record_bound=max(GRAD_BOUND, HESS_BOUND),
            # Views, not copies: trees 0..k (k is the one to fill) and the
            # released leaf values of trees 0..k-1.
            arrays={
                "feature": self._feature[: k + 1],
                "threshold": self._threshold[: k + 1],
                "leaf_values": self._values[:k],
                "base": self._base,
            },
            config={**self._settings(TREE), "depth": cfg.depth},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg, t = self.config, self._t
        if query.round != t:
            raise ValueError(f"update for round {query.round}, expected round {t}")
        k = t - int(cfg.intercept)
        if aggregate is None:
            # Aborted round: nothing released, the tree (or base) contributes zero.
            if k >= 0:
                self._values[k] = 0.0
        else:
            stats = aggregate
            label = "round 0: intercept (Σg, Σh)" if k < 0 else f"round {t}: leaf (Σg, Σh)"
            if self._noise is not None:
                stats = self._noise.release(aggregate, label=label)
            half = stats.size // 2
            step = newton_leaf_values(
                stats[:half],
                stats[half:],
                learning_rate=1.0 if k < 0 else cfg.learning_rate,
                reg_lambda=self.reg_lambda_,
            )
            if k < 0:
                self._base = np.asarray(step, dtype=np.float64).copy()
            else:
                self._values[k] = step
        self._t += 1

    # -- result ---------------------------------------------------------------
    def model(self) -> TreeEnsemble:
        """The released ensemble so far."""
        k, c = max(self._t - int(self.config.intercept), 0), self.n_outputs
        trees = tuple(
            RandomTree(self._feature[j].copy(), self._threshold[j].copy()) for j in range(k)
        )
        if c == 1:
            return TreeEnsemble(
                base=float(self._base[0]), trees=trees, leaf_values=tuple(self._values[:k].copy())
            )
        return TreeEnsemble(
            base=self._base.copy(),
            trees=trees,
            leaf_values=tuple(v.reshape(-1, c) for v in self._values[:k].copy()),
        )


def build(config: BoostingConfig, context: StrategyContext) -> DPBoostingStrategy:
    """The registry's factory: split features weighted by the public schema's columns."""
    widths = context.schema.column_widths if context.schema is not None else None
    return DPBoostingStrategy(
        config,
        feature_weights=split_feature_weights(config.split_features, widths),
        participation=context.participation,
        n_records=context.n_records,
        n_classes=context.n_classes,
        unit_records=context.unit_records,
    )
