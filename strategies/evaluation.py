"""DP federated evaluation of a released model: the server half (one query, one release).

The query carries the released model (its training method and arrays); each
client scores its held-out rows and returns their per-class histogram over B
public bins (:mod:`fedpriv.clients.evaluation`). The secure-aggregation shim reveals
only the sum, which this strategy releases once with the Gaussian mechanism
through the run's ledger (label :data:`LABEL`), range-checks, and turns into
AUC, Brier score and accuracy with stated errors (:mod:`fedpriv.evaluation.dp`).

Noise: σ = z·1 (one record moves one count by 1), with z

* ``noise_multiplier`` if given;
* else the analytic Gaussian for (``epsilon``, ``delta``): the evaluation's
  share of the run's budget (``delta`` defaults to the ledger's δ);
* else the ledger's whole (ε, δ) (a ledger kept for the evaluation alone).

Either way the event is reserved in :meth:`EvaluationStrategy.begin` and
recorded at the release, so the ledger refuses an evaluation that would take
the run past its budget before any noise is drawn, and the privacy report
lists it. Without a ledger (or with ε = ∞) the run is the non-private
reference: the exact histogram, with binning errors only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedpriv.evaluation.dp import (
    DEFAULT_BINS,
    SENSITIVITY,
    STAGE,
    DPEvaluation,
    check_bins,
    estimate_metrics,
)
from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.privacy import GaussianMechanism
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import budget_of
from fedpriv.privacy.randomness import check_private, rounding_margin
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.privacy.release_stage import ReleaseStage
from fedpriv.validation import check_count, check_int, check_open_unit, check_positive

METHOD = "evaluation"
#: The ledger label of the release.
LABEL = "evaluation: score histograms"

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """B bins, the noise (module docstring) and the stated errors' α and replicas."""

    bins: int = DEFAULT_BINS
    epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    alpha: float = 0.05
    replicas: int = 2000

    def __post_init__(self) -> None:
        check_bins(self.bins)
        if self.epsilon is not None:
            object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        if self.delta is not None:
            object.__setattr__(self, "delta", check_open_unit("delta", self.delta))
            if self.epsilon is None:
                raise ValueError(f"delta={self.delta!r} needs epsilon (the evaluation's ε share)")
        if self.noise_multiplier is not None:
            z = check_positive("noise_multiplier", self.noise_multiplier)
            object.__setattr__(self, "noise_multiplier", z)
            if self.epsilon is not None:
                raise ValueError(
                    f"give epsilon ({self.epsilon!r}) or noise_multiplier ({z!r}), not both"
                )
        object.__setattr__(self, "alpha", check_open_unit("alpha", self.alpha))
        check_count("replicas", self.replicas, minimum=100)


class EvaluationStrategy(Strategy):
    """Server half: one query (the model), one release (the histogram), the estimates."""

    method = METHOD
    #: One query (the model), one release: the plan declared to the nodes.
    rounds = 1

    def __init__(
        self,
        config: EvaluationConfig,
        *,
        model_method: str,
        model_arrays: Mapping[str, np.ndarray],
        n_records: int | None = None,
        round_index: int = 0,
        unit_records: int = 1,
    ) -> None:
        """``model_method``/``model_arrays``: the released model (``to_arrays()``) and the
        registered method that trained it (its :attr:`~fedpriv.methods.Method.model` class
        rebuilds it on the nodes); ``n_records``:
        public bound on the held-out records, for the range check; ``round_index``: the
        query's round id (distinct from the training rounds' when sharing a session);
        ``unit_records``: m, the records of one privacy unit (sensitivity m·1)."""
        if not isinstance(model_method, str) or not model_method:
            raise ValueError(f"model_method must be a method name; got {model_method!r}")
        self.config = config
        self.model_method = model_method
        self.model_arrays = {k: np.asarray(v) for k, v in model_arrays.items()}
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.round_index = check_int("round_index", round_index, minimum=0)
        self.sensitivity = check_count("unit_records", unit_records) * SENSITIVITY  # a unit's
        self.mechanism: GaussianMechanism | None = None
        self._result: DPEvaluation | None = None
        self._done = False

    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        cfg = self.config
        self._ledger, self._done, self._result = ledger, False, None
        self._secret_rng = check_private("secret_rng", secret_rng)
        budget = budget_of(ledger)
        if budget is None:
            self.mechanism = None  # the non-private reference
            return
        if cfg.noise_multiplier is not None:
            mech = GaussianMechanism(
                l2_sensitivity=self.sensitivity, noise_multiplier=cfg.noise_multiplier
            )
        else:
            eps = budget.epsilon if cfg.epsilon is None else cfg.epsilon
            delta = budget.delta if cfg.delta is None else cfg.delta
            mech = GaussianMechanism.for_budget(
                epsilon=eps, delta=delta, l2_sensitivity=self.sensitivity
            )
        ledger.reserve(mech.dp_event, 1)  # over budget: raises before anything is sent
        self.mechanism = mech

    def node_stages(self) -> list[NodeStage]:
        """The plan a node enforces (after :meth:`begin`; ``[]`` in a non-private run):
        one Gaussian release of every held-out record, at the std the ledger's release
        draws, z·(m + γ√(2B)) (m = 1 at record level)."""
        if self.mechanism is None:
            return []
        d = 2 * self.config.bins
        return [
            NodeStage(
                name=STAGE,
                method=METHOD,
                mechanism=StageMechanism.GAUSSIAN,
                rounds=self.rounds,
                sampling_rate=1.0,
                reply_length=d,
                record_bound=SENSITIVITY,
                config={"bins": self.config.bins},
                noise=self.mechanism.noise_multiplier
                * (self.sensitivity + rounding_margin(d, "l2")),
            )
        ]

    def next_query(self) -> Query | None:
        if self._done:
            return None
        return Query(
            round=self.round_index,
            method=METHOD,
            sampling_rate=1.0,  # every held-out row
            reply_length=2 * self.config.bins,
            record_bound=SENSITIVITY,  # one record adds 1 to one count
            arrays=self.model_arrays,
            config={"model_method": self.model_method, "bins": self.config.bins},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg = self.config
        if aggregate is None:  # aborted or discarded: nothing released, no estimate
            self._done = True
            log.warning("evaluation round %d released nothing", query.round)
            return
        counts = np.asarray(aggregate, dtype=np.float64)
        if counts.shape != (2 * cfg.bins,):
            raise ValueError(f"aggregate must have {2 * cfg.bins} counts; got {counts.shape}")
        if self.mechanism is None:
            released, std = counts, 0.0
        else:
            stage = ReleaseStage(
                ledger=self._ledger,
                mechanism=self.mechanism,
                rng=self._secret_rng,
                # Each honest count is at most the number of held-out records.
                bound=sum_bound(1.0, self.n_records, sampling_rate=1.0),
            )
            released = stage.release(counts, label=LABEL)
            std = self.mechanism.std
        self._result = estimate_metrics(released, std=std, alpha=cfg.alpha, replicas=cfg.replicas)
        self._done = True
        r = self._result
        log.info(
            "evaluation (noise std %.4g): AUC %.4f ± %.4f, Brier %.4f ± %.4f, "
            "accuracy %.4f ± %.4f (α = %g)",
            std,
            r.auc.value,
            r.auc.error,
            r.brier.value,
            r.brier.error,
            r.accuracy.value,
            r.accuracy.error,
            cfg.alpha,
        )

    def model(self) -> None:
        """An evaluation releases metrics (:meth:`result`), never a model."""
        return None

    def result(self) -> DPEvaluation | None:
        """The estimates (``None`` before the release, or if the round released nothing)."""
        return self._result
