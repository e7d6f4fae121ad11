"""DP federated gradient boosting with random trees: the server half.

Benchmark paper §3.4. Each round draws a depth-D tree with random splits
inside the public feature box (no privacy cost), asks the clients for the
per-leaf sums (Σg, Σh) of their Poisson(q) samples, adds Gaussian noise to the
securely aggregated sums and sets damped Newton leaf values.

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
which covers ρ·δ_q(ε) ≤ δ_q(ε), so ρ never lowers the noise (ARCHITECTURE.md
§1); ``tight`` accounts the mixture PLD whose profile is exactly ρ·δ_q(ε);
``paper`` calibrates at ρ·q as the benchmark paper does (§5.6), which is *not
a valid guarantee (comparison only)*: the ledger reports ε as not certified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from fedpriv.federation.protocol import Query
from fedpriv.methods import StrategyContext
from fedpriv.models._kernels import GRAD_BOUND, HESS_BOUND
from fedpriv.models.trees import (
    RandomTree,
    TreeEnsemble,
    column_balanced_weights,
    newton_leaf_values,
    sample_tree,
)
from fedpriv.options import SplitFeatures
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting, parse_accounting
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.validation import (
    check_count,
    check_positive,
    check_probability,
)

METHOD = "boosting"
# GRAD_BOUND (|g| ≤ 1) and HESS_BOUND (h ≤ 1/4) live with the client kernel, which
# clips every record's (g, h) to them: the bound assumed here is the one enforced there.
L2_SENSITIVITY = math.sqrt(GRAD_BOUND**2 + HESS_BOUND**2)


def split_feature_weights(
    mode: SplitFeatures | str, column_widths: tuple[int, ...] | None
) -> np.ndarray | None:
    """Public split-feature probabilities for ``mode``.

    ``"columns"``: each schema column equally likely, shared by its one-hot
    levels (needs the schema's column widths; without a schema, uniform).
    ``"uniform"``: each encoded feature equally likely.
    """
    mode = SplitFeatures.parse(mode)
    if mode is SplitFeatures.COLUMNS and column_widths is not None:
        return column_balanced_weights(column_widths)
    return None


@dataclass(frozen=True, kw_only=True)
class BoostingConfig:
    """Hyper-parameters of DP boosting (paper Table 5: depth 5, lr 0.4, q 0.05).

    ``rounds`` is the number of trees, one per federated round; 75 is the
    paper's per-budget choice on 130-US at ε = 2 (§5.3; 50 on BRFSS).
    ``split_features``: how a random split picks its feature
    (:class:`~fedpriv.models.lumberjack.SplitFeatures`). The privacy budget is
    the run ledger's, not a setting here. ``participation_accounting`` is
    ``valid`` (default), ``tight`` or ``paper`` (not a valid guarantee;
    module docstring).
    """

    rounds: int = 75
    depth: int = 5
    learning_rate: float = 0.4
    sampling_rate: float = 0.05
    reg_lambda: float = 1.0
    split_features: SplitFeatures = SplitFeatures.COLUMNS
    participation_accounting: ParticipationAccounting = ParticipationAccounting.VALID

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "participation_accounting", parse_accounting(self.participation_accounting)
        )
        object.__setattr__(self, "split_features", SplitFeatures.parse(self.split_features))
        check_count("rounds", self.rounds)
        check_count("depth", self.depth)
        if self.depth > 12:
            raise ValueError(f"depth must lie in [1, 12]; got {self.depth}")
        check_positive("learning_rate", self.learning_rate)
        check_probability("sampling_rate", self.sampling_rate)
        check_positive("reg_lambda", self.reg_lambda)

    @property
    def n_leaves(self) -> int:
        return 1 << self.depth


class DPBoostingStrategy:
    """Server half of DP boosting; speaks only :class:`Query` and aggregates."""

    method = METHOD

    def __init__(
        self,
        config: BoostingConfig,
        *,
        feature_weights: np.ndarray | None = None,
        participation: float = 1.0,
        n_records: int | None = None,
    ) -> None:
        """``feature_weights``: public split-feature probabilities (default uniform);
        ``participation``: the runtime's client participation ρ (for the accounting);
        ``n_records``: public bound on the records behind a sum, for the range check of
        each released sum (:mod:`fedpriv.privacy.range_guard`; ``None``: no check).
        """
        self.config = config
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.feature_weights = feature_weights
        self.participation = check_probability("participation", participation)
        self.noise_multiplier_: float | None = None
        self._t = 0

    # -- Strategy protocol ----------------------------------------------------
    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        cfg = self.config
        self._n_features = check_count("n_features", n_features)
        self._rng = rng  # public: tree structure
        self._t = 0
        n_internal = cfg.n_leaves - 1
        self._feature = np.zeros((cfg.rounds, n_internal), dtype=np.int64)
        self._threshold = np.zeros((cfg.rounds, n_internal))
        self._values = np.zeros((cfg.rounds, cfg.n_leaves))
        self._base = np.zeros(1)  # initial score 0: no data touched, nothing to account
        # (ε, δ) are the ledger's; no ledger: the non-private reference.
        self._noise = GaussianRounds.plan(
            ledger,
            l2_sensitivity=L2_SENSITIVITY,
            sampling_rate=cfg.sampling_rate,
            rounds=cfg.rounds,
            participation=self.participation,
            accounting=cfg.participation_accounting,
            rng=check_private("secret_rng", secret_rng),  # private: noise
            sum_bound=sum_bound(max(GRAD_BOUND, HESS_BOUND), self.n_records),
        )
        if self._noise is not None:
            self.noise_multiplier_ = self._noise.noise_multiplier

    @property
    def rounds(self) -> int:
        """Federated rounds this strategy asks for: one per tree."""
        return self.config.rounds

    @property
    def round_event(self) -> dp_event.DpEvent:
        """The DpEvent one round releases (private runs only)."""
        if self._noise is None:
            raise ValueError("non-private run: no event")
        return self._noise.event

    def next_query(self) -> Query | None:
        cfg, t = self.config, self._t
        if t >= cfg.rounds:
            return None
        tree = sample_tree(
            depth=cfg.depth,
            n_features=self._n_features,
            rng=self._rng,
            feature_weights=self.feature_weights,
        )
        self._feature[t], self._threshold[t] = tree.feature, tree.threshold
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=cfg.sampling_rate,
            reply_length=2 * cfg.n_leaves,
            record_bound=max(GRAD_BOUND, HESS_BOUND),
            # Views, not copies: trees 0..t (t is the one to fill) and the
            # released leaf values of trees 0..t-1.
            arrays={
                "feature": self._feature[: t + 1],
                "threshold": self._threshold[: t + 1],
                "leaf_values": self._values[:t],
                "base": self._base,
            },
            config={"depth": cfg.depth},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg, t = self.config, self._t
        if query.round != t:
            raise ValueError(f"update for round {query.round}, expected round {t}")
        if aggregate is None:
            # Aborted round: nothing released, the tree contributes zero.
            self._values[t] = 0.0
        else:
            stats = aggregate
            if self._noise is not None:
                stats = self._noise.release(aggregate, label=f"round {t}: leaf (Σg, Σh)")
            L = cfg.n_leaves
            self._values[t] = newton_leaf_values(
                stats[:L], stats[L:], learning_rate=cfg.learning_rate, reg_lambda=cfg.reg_lambda
            )
        self._t += 1

    # -- result ---------------------------------------------------------------
    def model(self) -> TreeEnsemble:
        """The released ensemble so far."""
        t = self._t
        trees = tuple(
            RandomTree(self._feature[k].copy(), self._threshold[k].copy()) for k in range(t)
        )
        return TreeEnsemble(
            base=float(self._base[0]), trees=trees, leaf_values=tuple(self._values[:t].copy())
        )


def build(config: BoostingConfig, context: StrategyContext) -> DPBoostingStrategy:
    """The registry's factory: split features weighted by the public schema's columns."""
    widths = context.schema.column_widths if context.schema is not None else None
    return DPBoostingStrategy(
        config,
        feature_weights=split_feature_weights(config.split_features, widths),
        participation=context.participation,
        n_records=context.n_records,
    )
