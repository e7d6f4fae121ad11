"""The audited learners: tiny neighbouring datasets, a canary statistic, a broken twin.

Each :class:`LearnerAudit` fixes a learner's public configuration, a dataset
D held by two clients, a canary record (appended to client 1 in D' = D +
canary), the distinguishing statistic an auditor computes from what the
attacker of docs/explanation/architecture.md §1 sees (the released model, the
transcript of queries, the public seed, D itself), and a *broken twin*: the same learner
with a privacy bug the same audit must catch. Twins break the learner after
its honest calibration and budget reservation, so their ledger still claims
the honest ε (exactly what a real bug would look like from the outside).

Designs (the canary gets the full sensitivity wherever the learner allows):

* DP-SGD (logistic, MLP): every per-example gradient is clipped to C, the
  canary's too; step t releases S_t + c_t + N_t, the statistic is
  Σ_t ⟨c_t, ĉ_t⟩/C with ĉ_t the released sum minus D's own sum at θ_t (the
  attacker knows D and every θ_t: they are in the queries), a Gaussian shift
  of √T/z (Nasr et al. 2021's white-box gradient canary). The public record
  count n of the step's denominator is n(D) + 1 for both datasets: under the
  trust model n is public, not something one record may move.
* Boosting: D sits at the corner x = 0 and the canary at x = 1, alone in its
  leaf of every random tree; the statistic is the canary's logit (its leaf
  values). At the base score 0 the canary's (g, h) = (−½, ¼), about half the
  sensitivity (1, ¼): boosting cannot be audited at full strength with one
  canary, so its twin needs a larger noise cut for the same power.
* Forests (fully random forest, both modes, Gaussian or Laplace leaves;
  Lumberjack): D is m copies of one point x* with label 0 and the canary is
  (x*, 1), so whatever random structure is drawn the canary shares its leaf
  with D; the statistic is the predicted P(y = 1 | x*). Twins release the
  exact leaf counts (the noise skipped), the exact-count leak.

Every dataset has two clients; every Poisson rate is 1 (the noise is then the
only private randomness the audit has to beat).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fedpriv.clients.boosting import BoostingClient
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.clients.random_forest import RandomForestClient
from fedpriv.experiments.audit.runs import Run, run_fit
from fedpriv.experiments.audit.twins import (  # noqa: F401 - re-exported
    ExactCountForest,
    ExactCountLumberjack,
    ExactRelease,
    UnderNoisedGaussian,
    honest_or_twin,
    noise_cut,
)
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy

from fedpriv.federation.protocol import ClientData
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.models.networks import NetworkSpec, clipped_gradient_sum
from fedpriv.privacy.randomness import SecretKey
from fedpriv.seeding import derive_generator

N_FEATURES = 2


# -- data ----------------------------------------------------------------------
@dataclass(frozen=True)
class CanaryData:
    """D as two clients' rows, and the canary appended to the last client in D'."""

    X: tuple[np.ndarray, ...]
    y: tuple[np.ndarray, ...]
    canary_x: np.ndarray
    canary_y: float
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n(self) -> int:
        return int(sum(len(y) for y in self.y))

    @property
    def X_all(self) -> np.ndarray:
        return np.vstack(self.X)

    @property
    def y_all(self) -> np.ndarray:
        return np.concatenate(self.y)

    def clients(self, canary: bool) -> list[ClientData]:
        """D (``canary=False``) or D' as ClientData (built once; handlers never mutate them)."""
        if canary not in self._cache:
            X, y = list(self.X), list(self.y)
            if canary:
                X[-1] = np.vstack([X[-1], self.canary_x[None, :]])
                y[-1] = np.append(y[-1], self.canary_y)
            self._cache[canary] = [
                ClientData(client_id=k, X=a, y=b) for k, (a, b) in enumerate(zip(X, y, strict=True))
            ]
        return self._cache[canary]


def _split(X: np.ndarray, y: np.ndarray) -> tuple[tuple, tuple]:
    half = len(y) // 2
    return (X[:half], X[half:]), (y[:half], y[half:])


def random_rows(n: int, name: str) -> CanaryData:
    """n public-generator rows in [0, 1]² with fair labels; canary (1, 1) labelled 1."""
    rng = derive_generator(0, "audit", name)
    X, y = rng.random((n, N_FEATURES)), (rng.random(n) < 0.5).astype(np.float64)
    Xs, ys = _split(X, y)
    return CanaryData(X=Xs, y=ys, canary_x=np.ones(N_FEATURES), canary_y=1.0)


def corner_rows(n: int) -> CanaryData:
    """n rows at x = 0 (labels alternate); canary (1, 1) labelled 1, alone in its leaf."""
    X, y = np.zeros((n, N_FEATURES)), (np.arange(n) % 2).astype(np.float64)
    Xs, ys = _split(X, y)
    return CanaryData(X=Xs, y=ys, canary_x=np.ones(N_FEATURES), canary_y=1.0)


def point_rows(n: int) -> CanaryData:
    """n copies of (x*, 0), x* = (½, ½); canary (x*, 1): always in D's leaf."""
    X, y = np.full((n, N_FEATURES), 0.5), np.zeros(n)
    Xs, ys = _split(X, y)
    return CanaryData(X=Xs, y=ys, canary_x=np.full(N_FEATURES, 0.5), canary_y=1.0)


# -- the audited learners -------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LearnerAudit:
    """One learner's audit: public config, data, statistic and broken twin."""

    name: str
    epsilon: float
    delta: float
    twin: str
    data: CanaryData
    make_strategy: Callable[[bool], Any]
    make_handler: Callable[[], Any]
    statistic: Callable[[Run], float]
    #: Distributed noise (:class:`~fedpriv.privacy.distributed.DistributedNoise`), or central.
    noise: Any = None

    def fit(
        self, *, canary: bool, seed: int, key: SecretKey | None, twin: bool = False,
        secure_aggregation: bool = True,
    ) -> Run:  # fmt: skip
        """One end-to-end fit on D' (``canary``) or D; ``key=None``: fresh OS entropy.
        ``secure_aggregation=False``: plain sums, releasing bit for bit what the secure
        sums do (tests/server/test_estimators.py) at a third to a half of the cost."""
        return run_fit(
            strategy=self.make_strategy(twin),
            handler=self.handler(twin),
            clients=self.data.clients(canary),
            epsilon=self.epsilon,
            delta=self.delta,
            seed=seed,
            key=key,
            secure_aggregation=secure_aggregation,
            noise=self.noise,
        )

    def handler(self, twin: bool) -> Any:
        """The client half of this fit (the twin differs in its strategy only)."""
        return self.make_handler()

    @property
    def plain_sums_release_the_same(self) -> bool:
        """Central noise: plain sums may serve (distributed noise needs the secure sum)."""
        return self.noise is None


def dpsgd_audit(
    model: str = "logistic",
    *,
    epsilon: float = 2.0,
    delta: float = 1e-5,
    rounds: int = 3,
    n_rows: int = 40,
    twin_factor: float = 10.0,
) -> LearnerAudit:
    """DP-SGD on 40 random rows, T = 3 full-batch steps; twin: noise / ``twin_factor``.

    The steps with one joint clip (``centre_share=0``, ``recalibrate_share=0``): the
    canary's gradient is clipped to C, so it carries the full sensitivity the
    statistic divides by.
    """
    data = random_rows(n_rows, f"dpsgd-{model}")
    # C below every per-example gradient norm at these parameters: the canary is clipped.
    clip = 0.25 if model == "logistic" else 0.05
    shape = {"hidden": 4} if model == "mlp" else {}
    config = (MLPConfig if model == "mlp" else LogisticConfig)(
        **shape,
        rounds=rounds,
        learning_rate=1.0,
        clip_norm=clip,
        sampling_rate=1.0,
        centre_share=0.0,
        recalibrate_share=0.0,  # the steps alone (the recalibration: its own bound, tested)
    )
    # The public bound on the records, the same for D and D': K × the declared bound per
    # client (its rows plus the canary), as an estimator with max_records uses it.
    n_public = len(data.y) * (max(len(y) for y in data.y) + 1)

    make_strategy = honest_or_twin(DPSGDStrategy, twin_factor, config, n_records=n_public)

    spec = NetworkSpec(kind=model, n_features=N_FEATURES, hidden=config.hidden)
    statistic = sgd_canary_statistic(spec, data, config, n_public, clip)

    return LearnerAudit(name=f"dpsgd-{model}", epsilon=epsilon, delta=delta, data=data,
                        twin=f"noise / {twin_factor:g}", make_strategy=make_strategy,
                        make_handler=DPSGDClient, statistic=statistic)  # fmt: skip


def sgd_canary_statistic(spec, data, config, n_public: float, clip: float):
    """The DP-SGD audits' statistic: per step, the released sum S_t (+ c_t) + N_t (the
    parameter step rescaled by the public n, q and η) minus the known clipped sum of
    ``data``'s rows, projected on the canary's clipped gradient, summed over steps."""
    X, y = data.X_all, data.y_all
    cx, cy = data.canary_x[None, :], np.array([data.canary_y])
    scale = n_public * config.sampling_rate / config.learning_rate

    def statistic(run: Run) -> float:
        thetas = [q.arrays["params"] for q in run.queries] + [run.model.params]
        total = 0.0
        for t in range(len(thetas) - 1):
            released = (thetas[t] - thetas[t + 1]) * scale
            residual = released - clipped_gradient_sum(spec, thetas[t], X, y, clip)
            total += residual @ clipped_gradient_sum(spec, thetas[t], cx, cy, clip) / clip
        return float(total)

    return statistic


def boosting_audit(
    *,
    epsilon: float = 2.0,
    delta: float = 1e-5,
    rounds: int = 2,
    n_rows: int = 20,
    twin_factor: float = 10.0,
) -> LearnerAudit:
    """Boosting, the intercept round and one tree of depth 2, λ = 50 (the floor
    ``reg_lambda`` above ``lam`` · σ_H ≈ 29: leaf values ≈ linear in Σg)."""
    data = corner_rows(n_rows)
    config = BoostingConfig(
        rounds=rounds,
        depth=2,
        learning_rate=1.0,
        sampling_rate=1.0,
        reg_lambda=50.0,
    )

    make_strategy = honest_or_twin(DPBoostingStrategy, twin_factor, config)

    cx = data.canary_x[None, :]
    return LearnerAudit(
        name="boosting",
        epsilon=epsilon,
        delta=delta,
        twin=f"noise / {twin_factor:g}",
        data=data,
        make_strategy=make_strategy,
        make_handler=BoostingClient,
        statistic=lambda run: float(run.model.decision_function(cx)[0]),
    )


def forest_audit(
    mode: str = "all",
    *,
    leaves: str = "gaussian",
    epsilon: float = 2.0,
    delta: float = 1e-6,
    n_rows: int = 20,
) -> LearnerAudit:
    """Fully random forest, 2 trees of depth 2, Gaussian (or Laplace: ``leaves``) leaf
    counts; twin: exact counts. Named ``forest-<mode>``, ``forest-<mode>-laplace``."""
    if leaves not in ("gaussian", "laplace"):  # the twin skips additive count noise
        raise ValueError(f"leaves must be one of ['gaussian', 'laplace']; got {leaves!r}")
    data = point_rows(n_rows)
    config = RandomForestConfig(trees=2, depth=2, mode=mode, leaf_mechanism=leaves)
    space = FeatureSpace.unit_box(N_FEATURES)
    cx = data.canary_x[None, :]
    return LearnerAudit(
        name=f"forest-{mode}" + ("-laplace" if leaves == "laplace" else ""),
        epsilon=epsilon,
        delta=delta,
        twin="exact leaf counts",
        data=data,
        make_strategy=lambda twin: (ExactCountForest if twin else RandomForestStrategy)(
            config, space=space
        ),
        make_handler=RandomForestClient,
        statistic=lambda run: float(run.model.predict_proba(cx)[0]),
    )


def lumberjack_audit(
    *, epsilon: float = 2.0, delta: float = 1e-6, n_rows: int = 40
) -> LearnerAudit:
    """Lumberjack, 2 trees of depth 3, pooled Gaussian leaves; twin: exact counts."""
    data = point_rows(n_rows)
    config = LumberjackConfig(trees=2, depth=3)
    space = FeatureSpace.unit_box(N_FEATURES)
    cx = data.canary_x[None, :]
    return LearnerAudit(
        name="lumberjack",
        epsilon=epsilon,
        delta=delta,
        twin="exact leaf counts",
        data=data,
        make_strategy=lambda twin: (ExactCountLumberjack if twin else LumberjackStrategy)(
            config, space=space
        ),
        make_handler=LumberjackClient,
        statistic=lambda run: float(run.model.predict_proba(cx)[0]),
    )


#: Trials per side of each learner's CI audit (tests/privacy/test_learner_audits.py):
#: a shift μ ≈ 2.5 needs 1,000 to refute ε = 2 reliably, a perfect separation 250.
CI_TRIALS = {
    "boosting": 1000,
    "dp_gam": 300,
    "dp_gam-group": 300,
    "bdpe": 300,
    "boosting-distributed": 300,
    "dpsgd-logistic": 300,
    "dpsgd-mlp": 300,
    "lumberjack": 250,
    "forest-all": 300,
    "forest-disjoint": 300,
    # Full audit only (not in the CI test: 2.6-3 s each); the size its bootstrap checks.
    "forest-all-laplace": 300,
    "forest-disjoint-laplace": 300,
}


def all_audits() -> list[LearnerAudit]:
    """Every learner, in the report's order."""
    from fedpriv.experiments.audit.bdpe import bdpe_audit  # they build on this module
    from fedpriv.experiments.audit.distributed import distributed_boosting_audit
    from fedpriv.experiments.audit.gam import gam_audit

    return [
        boosting_audit(),
        distributed_boosting_audit(),
        gam_audit(),
        gam_audit(group=True),
        bdpe_audit(),
        dpsgd_audit("logistic"),
        dpsgd_audit("mlp"),
        lumberjack_audit(),
        forest_audit("all"),
        forest_audit("disjoint"),
        forest_audit("all", leaves="laplace"),
        forest_audit("disjoint", leaves="laplace"),
    ]
