"""Fully random DP forest with federated leaf aggregation: the server half.

The classic baseline of the Lumberjack paper (§1, §6): k complete trees of a
fixed depth D with data-independent random splits (uniform feature, uniform
threshold in the node's public range, a one-hot feature at most once per
path; :func:`fedpriv.models.lumberjack.propose_splits` on every node), one
round trip in which clients return per-leaf class counts through the shim,
and private leaves:

* ``"exponential"``: each leaf's majority by the exponential mechanism with
  monotone counts, Pr[c] ∝ exp(η n_c) — η-bounded-range per tree (leaves are
  disjoint);
* ``"gaussian"``: Gaussian noise on the class counts (noisy proportions);
* ``"laplace"``: Laplace noise on the class counts (noisy proportions), pure
  ε-DP (Dwork, McSherry, Nissim & Smith 2006).

``"laplace"`` and ``"exponential"`` are RF-L and RF-E, the random-forest
opponents of Nock & Henecka (2020, "Boosted and differentially private
ensembles of decision trees"): Fletcher & Islam's (2017) random forest with
global instead of smooth sensitivity, the whole budget spent at the leaves.

Two budget modes:

* ``"all"``: every tree sees every record; the k tree releases compose (one
  record moves one count per tree: L2 sensitivity √k for the Gaussian, L1
  sensitivity k for the Laplace, one Laplace(k/ε) event; k η-BR events for
  the exponential mechanism, η fitted so the ledger certifies ε);
* ``"disjoint"``: each record is assigned to one tree by its client, uniformly
  from the client's secret key (never a public hash of its position, which
  would move other rows' trees when one row goes), so the trees see disjoint
  data and compose in parallel (as diffprivlib does): one η = ε BR event, a
  Gaussian of sensitivity 1, or one Laplace(1/ε).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv.federation.constraints import check_fields, integers, setting
from fedpriv.federation.limits import SIZE_LIMITS
from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models.forest_sensitivity import leaf_count_sensitivity
from fedpriv.models.heavy_hitters import (
    exponential_labels,
)
from fedpriv.models.lumberjack import (
    FeatureSpace,
    next_layer,
    propose_splits,
    root_layer,
)
from fedpriv.models.random_forest import RandomForestModel
from fedpriv.models.trees import RandomTree
from fedpriv.options import ForestLeafMechanism, ForestMode, SplitFeatures
from fedpriv.privacy.calibration import largest_certified
from fedpriv.privacy.events import BoundedRangeDpEvent
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.mechanisms import LaplaceMechanism
from fedpriv.privacy.noise_stage import GaussianRounds, budget_of, certified_gaussian
from fedpriv.privacy.randomness import check_private, rounding_margin
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.privacy.release_stage import ReleaseStage
from fedpriv.privacy.units import scale_sensitivity
from fedpriv.validation import check_count

METHOD = "random_forest"
#: ``depth = 0``: automatic, :func:`auto_depth`.
AUTO_DEPTH = 0
#: :func:`auto_depth`'s rule: an expected leaf holds ≥ LEAF_NOISES noise stds and
#: ≥ MIN_LEAF records (below it a leaf's class rate is mostly sampling noise), and
#: trees are at most MAX_AUTO_DEPTH deep.
LEAF_NOISES, MIN_LEAF, MAX_AUTO_DEPTH = 2.0, 32, 10


def auto_depth(records_per_tree: float, noise_std: float) -> int:
    """The deepest D ≤ :data:`MAX_AUTO_DEPTH` with records_per_tree / 2^D ≥
    max(LEAF_NOISES · noise_std, MIN_LEAF), at least 1.

    Random splits put about records/2^D records in a leaf; its class counts
    carry noise of std ``noise_std`` (Gaussian leaves: zΔ; Laplace leaves:
    √2·Δ₁/ε; exponential leaves: 1/η, the count gap that moves the odds by
    e). Deeper trees leave every leaf to noise: on a 3,072-row task at ε =
    0.5 depth 10 has three records a leaf against a noise std of 31, and the
    forest's Brier score is 0.222 against the base rate's 0.210 (depth 5:
    0.203). Both inputs are public: the record count and the calibrated noise.
    """
    if not (records_per_tree > 0 and noise_std >= 0):
        raise ValueError(f"need records > 0 and noise_std ≥ 0; got {records_per_tree}, {noise_std}")
    need = max(LEAF_NOISES * noise_std, MIN_LEAF)
    depth = int(np.floor(np.log2(records_per_tree / need))) if records_per_tree > need else 1
    return int(np.clip(depth, 1, MAX_AUTO_DEPTH))


@dataclass(frozen=True, kw_only=True)
class RandomForestConfig:
    """k trees of depth D; leaves by ``leaf_mechanism``; ``mode`` as in the module docstring.

    One federated round (the leaf counts). The privacy budget (paper: δ = 1e-6)
    is the run ledger's. ``depth``: in [1, 16], or 0 (the default): automatic
    (:func:`auto_depth`: the deepest tree whose expected leaf holds at least
    twice the leaf noise and 32 records; public, from the record count and the
    calibrated noise).
    """

    trees: int = setting(10, integers(
        1, most=SIZE_LIMITS["random_forest"]["trees"], note="and trees × 2^depth ≤ 2^23"
    ))  # fmt: skip
    depth: int = setting(AUTO_DEPTH, integers(0, 16, zero="0: automatic"))
    mode: ForestMode = ForestMode.ALL
    leaf_mechanism: ForestLeafMechanism = ForestLeafMechanism.GAUSSIAN
    split_features: SplitFeatures = SplitFeatures.COLUMNS

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "mode", ForestMode.parse(self.mode))
        object.__setattr__(self, "leaf_mechanism", ForestLeafMechanism.parse(self.leaf_mechanism))
        object.__setattr__(self, "split_features", SplitFeatures.parse(self.split_features))

    @property
    def rounds(self) -> int:
        """One round: every tree's leaf counts at once."""
        return 1


def random_complete_tree(depth: int, space: FeatureSpace, key: int, salt: int) -> RandomTree:
    """A complete tree (heap order) with Lumberjack's data-independent split rule."""
    n_classes = 1
    layer = root_layer(key, space, np.zeros(n_classes))
    features, thresholds = [], []
    for _ in range(depth):
        propose_splits(layer, space, salt)
        features.append(layer.feature)
        thresholds.append(layer.threshold)
        every = np.ones((2 * layer.size, n_classes), dtype=np.int64)  # keep every child
        layer, _ = next_layer(layer, every, space)
    return RandomTree(np.concatenate(features), np.concatenate(thresholds))


class RandomForestStrategy(Strategy):
    """Server half: one query (all trees), one release."""

    method = METHOD

    def __init__(
        self,
        config: RandomForestConfig,
        *,
        space: FeatureSpace,
        n_classes: int = 2,
        n_records: int | None = None,
        unit_records: int = 1,
    ) -> None:
        """``n_records``: public bound on the records behind the counts, for the range
        check of the released counts (:mod:`fedpriv.privacy.range_guard`);
        ``unit_records``: m, the records of one privacy unit (:mod:`fedpriv.privacy.units`):
        a unit moves the counts m times as far as a record, and the exponential
        mechanism's η per count is η/m."""
        self.config = config
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.unit_records = check_count("unit_records", unit_records)
        self.space = space
        self.n_classes = check_count("n_classes", n_classes, minimum=2)
        self.noise_multiplier_ = None
        self._model: RandomForestModel | None = None

    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        cfg = self.config
        if n_features != self.space.n_features:
            raise ValueError(f"data has {n_features} features; the space {self.space.n_features}")
        self._ledger, self._rng, self._done = ledger, rng, False
        self._secret_rng = check_private("secret_rng", secret_rng)  # noise, EM draws
        keys = rng.integers(0, 2**63, size=cfg.trees, dtype=np.int64)
        salts = rng.integers(0, 2**62, size=cfg.trees, dtype=np.int64)
        self._model = None
        # (ε, δ) are the ledger's; no ledger: the non-private reference.
        self._budget = budget = budget_of(ledger)
        self._stage: GaussianRounds | None = None  # distributed noise's Gaussian leaf stage
        if budget is not None:
            self._plan(budget, ledger)
        self.depth_ = self._depth()
        if budget is not None and ledger.distributed is not None:  # sized once depth is known
            self._stage = GaussianRounds.single(
                ledger, l2_sensitivity=self._mechanism.l2_sensitivity, rng=self._secret_rng,
                share=1.0, sum_bound=sum_bound(1.0, self.n_records, sampling_rate=1.0),
                dims=cfg.trees * (1 << self.depth_) * self.n_classes,
            )  # fmt: skip
            self._mechanism = self._stage.mechanism
            self.noise_multiplier_ = self._mechanism.noise_multiplier
        self._trees = tuple(
            random_complete_tree(self.depth_, self.space, int(k), int(s))
            for k, s in zip(keys, salts, strict=True)
        )

    def _depth(self) -> int:
        """The configured depth, or :func:`auto_depth` from the public n and noise."""
        cfg = self.config
        if cfg.depth != AUTO_DEPTH:
            return int(cfg.depth)
        if self.n_records is None:
            raise ValueError("depth=0 (automatic) needs the public record count (n_records)")
        per_tree = self.n_records / (cfg.trees if cfg.mode == "disjoint" else 1)
        if self._budget is None:
            noise = 0.0
        elif cfg.leaf_mechanism == "gaussian":
            noise = self._mechanism.noise_multiplier * self._mechanism.l2_sensitivity
        elif cfg.leaf_mechanism == "laplace":
            noise = np.sqrt(2.0) * self._mechanism.scale  # Laplace(b) has std √2·b
        else:
            noise = self.unit_records / self.eta_
        return auto_depth(per_tree, noise)

    def _count_sensitivity(self) -> tuple[float, float]:
        """(L1, L2) of the leaf counts: one unit's, m records' (one record's at m = 1)."""
        cfg = self.config
        l1, l2 = leaf_count_sensitivity(cfg.trees, disjoint=cfg.mode == "disjoint")
        return scale_sensitivity(l1, l2, self.unit_records)

    def _plan(self, budget, ledger: PrivacyLedger) -> None:
        cfg = self.config
        eps, delta = budget.epsilon, budget.delta
        k = cfg.trees
        if ledger.distributed is not None and cfg.leaf_mechanism != "gaussian":
            raise ValueError(
                "noise = 'distributed' needs leaf-mechanism = 'gaussian' (noisy counts); got "
                f"{cfg.leaf_mechanism.value!r}"
            )
        l1, l2 = self._count_sensitivity()
        if cfg.leaf_mechanism == "gaussian":
            sens = l2
            self._mechanism = certified_gaussian(epsilon=eps, delta=delta, l2_sensitivity=sens)
            self.noise_multiplier_ = self._mechanism.noise_multiplier
            self._events = [(self._mechanism.dp_event, 1)]
            if ledger.distributed is not None:
                # The depth (public) follows this z; the stage is planned with it in begin.
                self._events = []
        elif cfg.leaf_mechanism == "laplace":
            # One record moves one count in one tree (disjoint) or one per tree (all);
            # one pure ε-DP event, which the ledger certifies down to δ ≈ 1e-16 (below
            # it the truncated PLD tail gives ε = inf, and the reservation is refused).
            self._mechanism = LaplaceMechanism(l1_sensitivity=l1, epsilon=eps)
            self._events = [(self._mechanism.dp_event, 1)]
        elif cfg.mode == "disjoint":
            self.eta_ = eps  # parallel composition: one ε-BR release
            self._events = [(BoundedRangeDpEvent(self.eta_), 1)]
        else:
            # k η-BR events; η as large as the ledger certifies.
            self.eta_ = largest_certified(
                lambda x: [(BoundedRangeDpEvent(x), k)],
                epsilon=eps,
                delta=delta,
                upper=eps,
            )
            self._events = [(BoundedRangeDpEvent(self.eta_), k)]
        for event, count in self._events:
            ledger.reserve(event, count)

    def noise_std(self, query: Query) -> float | None:
        """The std the leaf counts' release needs (distributed noise's shares)."""
        return None if self._stage is None else self._stage.std(query.reply_length)

    def next_query(self) -> Query | None:
        cfg = self.config
        if self._done:
            return None
        leaves = 1 << self.depth_
        return Query(
            round=0,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=cfg.trees * leaves * self.n_classes,
            record_bound=1.0,
            arrays={
                "feature": np.stack([t.feature for t in self._trees]),
                "threshold": np.stack([t.threshold for t in self._trees]),
            },
            config=self._query_config(),
        )

    def _query_config(self) -> dict:
        """The query's settings: what fixes one record's effect on the counts."""
        cfg = self.config
        return {
            "depth": self.depth_,
            "n_classes": self.n_classes,
            "mode": str(cfg.mode.value),
            "trees": cfg.trees,
        }

    def node_stages(self) -> list[NodeStage]:
        """The one leaf-count round as the nodes enforce it (after :meth:`begin`; a
        non-private run declares none): Gaussian or Laplace noise at the full reply,
        or the exponential mechanism's η per tree (``uses``: trees it labels)."""
        if self._budget is None:
            return []
        cfg = self.config
        d = cfg.trees * (1 << self.depth_) * self.n_classes
        where = dict(
            name="leaf_counts", method=METHOD, reply_length=d, record_bound=1.0,
            config=self._query_config(),
        )  # fmt: skip
        if self._stage is not None:  # distributed Gaussian leaves
            return [self._stage.node_stage(**where)]
        common = dict(where, rounds=1, sampling_rate=1.0)
        if cfg.leaf_mechanism == "gaussian":
            mech = self._mechanism
            std = mech.noise_multiplier * (mech.l2_sensitivity + rounding_margin(d, "l2"))
            return [NodeStage(mechanism=StageMechanism.GAUSSIAN, noise=std, **common)]
        if cfg.leaf_mechanism == "laplace":
            mech = self._mechanism
            scale = (mech.l1_sensitivity + rounding_margin(d, "l1")) / mech.epsilon
            return [NodeStage(mechanism=StageMechanism.LAPLACE, noise=scale, **common)]
        l1, _ = self._count_sensitivity()
        uses = sum(count for _, count in self._events)
        return [
            NodeStage(
                mechanism=StageMechanism.BOUNDED_RANGE, noise=self.eta_, unit=l1, uses=uses,
                **common,
            )
        ]  # fmt: skip

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg = self.config
        if aggregate is None:
            raise RuntimeError("the leaf-count round was aborted: nothing to release")
        counts = np.rint(aggregate).reshape(cfg.trees, 1 << self.depth_, self.n_classes)
        scores = np.zeros(counts.shape)
        if self._budget is None:
            lab = np.argmax(counts, axis=2)
            np.put_along_axis(scores, lab[..., None], 1.0, axis=2)
        elif cfg.leaf_mechanism == "exponential":
            ((event, count),) = self._events  # one bounded-range event per selection
            # A unit moves a tree's counts by up to m in all (a record: 1), so each
            # selection weighs a count by η/m: every tree stays an η-BR release per unit.
            eta = self.eta_ / self.unit_records
            lab = ReleaseStage(ledger=self._ledger, rng=self._secret_rng, event=event).select(
                lambda rng: exponential_labels(counts.reshape(-1, self.n_classes), eta, rng),
                label="leaf labels",
                events=count,
            )
            np.put_along_axis(scores, lab.reshape(cfg.trees, -1)[..., None], 1.0, axis=2)
        else:  # Gaussian or Laplace noise: one release of every leaf's counts
            if self._stage is not None:  # distributed: the clients' shares are in the sum
                noisy = self._stage.release(aggregate, label="leaf class counts")
            else:
                noisy = ReleaseStage(
                    ledger=self._ledger,
                    mechanism=self._mechanism,
                    rng=self._secret_rng,
                    # One record adds 1 to one count per tree: every honest count is ≤ n.
                    bound=sum_bound(1.0, self.n_records, sampling_rate=1.0),
                ).release(counts.ravel(), label="leaf class counts")
            noisy = noisy.reshape(counts.shape)
            noisy = np.maximum(noisy, 0.0)
            tot = noisy.sum(axis=2, keepdims=True)
            scores = np.where(tot > 0, noisy / np.where(tot > 0, tot, 1.0), 1.0 / self.n_classes)
        self._model = RandomForestModel(self._trees, scores)
        self._done = True

    def model(self) -> RandomForestModel | None:
        return self._model


def build(config: RandomForestConfig, context: StrategyContext) -> RandomForestStrategy:
    """The registry's factory: the feature space of the public schema (or the unit box)."""
    from fedpriv.strategies.lumberjack import feature_space

    return RandomForestStrategy(
        config,
        space=feature_space(context, config.split_features),
        n_classes=context.n_classes,
        n_records=context.n_records,
        unit_records=context.unit_records,
    )
