"""DP histogram boosting of one-column trees (DP-EBM), federated: the server half.

Nori, Caruana et al., ICML 2021, Alg. 1, with every record counted in every
round (no subsampling) and Gaussian noise through the run's ledger. The
model and its maths: :mod:`fedpriv.models.gam`.

Rounds. Round 0 asks for (Σg, Σh) at margin 0 (g = ½ − y, h = ¼) and sets
the intercept b = −G̃/(H̃ + λ) from the released sums; with ``quantile_bins``
it also asks, in the same reply, for every numeric column's histogram on a
public fine grid, whose released counts place that column's cuts at their
quantiles (post-processing). Round t ≥ 1 visits term k = (t − 1) mod m (the
schema's column order, public) and asks for the per-bin (Σg, Σh) of the
current released model; the server adds a damped Newton step, clipped to
±``max_update``, to each bin of the term's shape function.

Privacy. One record moves one bin of a term by at most (1, ¼) (the client
clips g and h where it computes them), so a column round's reply has L2
sensitivity √(1 + 1/16); the intercept's (½, ¼), √(1/16 + ¼); the histogram's
one count per numeric column, √(numeric columns). Every release adds
N(0, (zΔ)²) with the same multiplier z, so the run is ``rounds`` (+1 with the
sketch) identical Gaussian events ``GaussianDpEvent(z)``; z is calibrated for
exactly that plan and the plan reserved before any noise is drawn. Each
release is range-checked against the public bound on an honest sum.

Everything the server decides (term, bins, λ, intercept, shapes) uses only
the public configuration and released values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.federation.protocol import Query
from fedpriv.methods import StrategyContext
from fedpriv.models.gam import (
    FINE_GRID,
    HESS_BOUND,
    INTERCEPT_GRAD_BOUND,
    INTERCEPT_SENSITIVITY,
    L2_SENSITIVITY,
    GAMModel,
    Terms,
    box_terms,
    newton_bin_updates,
    quantile_cuts,
    residual_gain,
    schema_terms,
)
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.mechanisms import GaussianMechanism
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import check_release, noise_margin, sum_bound
from fedpriv.validation import check_count, check_positive, check_probability

METHOD = "dp_gam"
#: How round t ≥ 1 picks its term: ``cyclic`` in schema order; ``gain``: one
#: cyclic pass, then the term with the largest residual Newton gain estimated
#: from its latest released sums (:func:`fedpriv.models.gam.residual_gain`).
COLUMN_ORDERS = ("cyclic", "gain")


@dataclass(frozen=True, kw_only=True)
class GAMConfig:
    """Hyper-parameters of DP histogram boosting (DP-EBM).

    ``rounds``: federated rounds, the intercept's plus one per column visit
    (cyclic in schema order; 1 + passes × columns for whole passes).
    ``bins``: equal-width bins of a numeric column (a categorical column has one
    bin per level, a binary one two), or the number of quantile bins with
    ``quantile_bins`` (one extra accounted release: the numeric columns'
    histograms on a fine public grid). ``learning_rate`` η scales each Newton
    step; the step's regulariser is λ = max(``lam`` · σ_H, ``reg_lambda``), σ_H
    the std of the noise on each released Σh; ``max_update`` bounds each bin's
    step (logits). ``column_order`` (:data:`COLUMN_ORDERS`): ``cyclic``, or
    ``gain`` (one cyclic pass, then the term with the largest residual gain:
    better where few of many columns carry the signal, e.g. Diabetes 130-US,
    worse on Adult). The privacy budget is the run ledger's. Defaults measured
    on Adult (ε = 0.5), BRFSS (ε = 0.5) and Diabetes 130-US (ε = 2)
    (``experiments/gam_check.py``): 70 column rounds (5 passes over Adult's 14
    columns, 1.7 over 130-US's 41), 16 quantile bins, η = 1, λ = 5 σ_H.
    """

    rounds: int = 71
    bins: int = 16
    quantile_bins: bool = True
    learning_rate: float = 1.0
    lam: float = 5.0
    reg_lambda: float = 1.0
    max_update: float = 2.0
    column_order: str = "cyclic"

    def __post_init__(self) -> None:
        if self.column_order not in COLUMN_ORDERS:
            raise ValueError(
                f"column_order must be one of {list(COLUMN_ORDERS)}; got {self.column_order!r}"
            )
        check_count("rounds", self.rounds, minimum=2)
        check_count("bins", self.bins, minimum=2)
        if self.bins > FINE_GRID:
            raise ValueError(f"bins must lie in [2, {FINE_GRID}]; got {self.bins}")
        if not isinstance(self.quantile_bins, bool):
            raise TypeError(f"quantile_bins must be true or false; got {self.quantile_bins!r}")
        check_positive("learning_rate", self.learning_rate)
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"lam must lie in [0, inf); got {self.lam!r}")
        check_positive("reg_lambda", self.reg_lambda)
        check_positive("max_update", self.max_update)

    @property
    def sampling_rate(self) -> float:
        """Every record counts in every round (q = 1)."""
        return 1.0


class DPGAMStrategy:
    """Server half of DP-EBM; speaks only :class:`Query` and released sums."""

    method = METHOD

    def __init__(
        self,
        config: GAMConfig,
        *,
        terms: Terms | None = None,
        participation: float = 1.0,
        n_records: int | None = None,
    ) -> None:
        """``terms``: the public binning (default: every feature a numeric term on the
        box [0, 1]); ``participation``: client participation ρ (accounted as ``valid``:
        it never lowers the noise); ``n_records``: public bound on the records behind a
        sum, for the range checks (``None``: no check)."""
        self.config = config
        self.terms = terms
        self.participation = check_probability("participation", participation)
        self.n_records = None if n_records is None else check_count("n_records", n_records)
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
        n_features = check_count("n_features", n_features)
        if self.terms is None:
            self.terms = box_terms(n_features, cfg.bins)
        self.terms.check_features(n_features)
        self._t = 0
        self._base = 0.0
        self._live = self.terms  # cuts replaced by the sketch's after round 0
        self._shapes: list[np.ndarray] = []
        self._n_numeric = int(self.terms.numeric.sum())
        self._sketch = cfg.quantile_bins and self._n_numeric > 0
        self._noise = GaussianRounds.plan(
            ledger,
            l2_sensitivity=L2_SENSITIVITY,
            sampling_rate=1.0,
            rounds=cfg.rounds + int(self._sketch),
            participation=self.participation,
            accounting=ParticipationAccounting.VALID,
            rng=check_private("secret_rng", secret_rng),  # private: noise
            sum_bound=sum_bound(max(1.0, HESS_BOUND), self.n_records),
        )
        self._reset_shapes()
        self.noise_multiplier_ = None if self._noise is None else self._noise.noise_multiplier

    def _reset_shapes(self) -> None:
        self._shapes = [np.zeros(self._live.n_bins(k)) for k in range(self._live.m)]
        # Residual gain per term from its latest release (inf: not visited yet).
        self._gain = np.full(self._live.m, np.inf)
        self._visits: list[int] = []

    @property
    def rounds(self) -> int:
        return self.config.rounds

    def _lambda(self, sensitivity: float) -> float:
        """λ = max(lam · σ_H, reg_lambda): σ_H = z·Δ, the noise std on each Σh."""
        if self._noise is None:
            return self.config.reg_lambda
        sigma = self.noise_multiplier_ * sensitivity
        return max(self.config.lam * sigma, self.config.reg_lambda)

    def term_of(self, t: int) -> int:
        """The term round ``t ≥ 1`` visits: cyclic (public), or by residual gain from
        released sums (post-processing); fixed once the round's query is asked."""
        if t <= len(self._visits):
            return self._visits[t - 1]
        if self.config.column_order == "cyclic" or t <= self._live.m:
            k = (t - 1) % self._live.m
        else:
            k = int(np.argmax(self._gain))  # ties: the first in schema order
        self._visits.append(k)
        return k

    def next_query(self) -> Query | None:
        t = self._t
        if t >= self.config.rounds:
            return None
        if t == 0:
            grid = FINE_GRID if self._sketch else 0
            return Query(
                round=0,
                method=METHOD,
                sampling_rate=1.0,
                reply_length=2 + grid * self._n_numeric,
                record_bound=1.0,
                arrays=self._live.to_arrays(),
                config={"phase": "intercept", "grid": grid},
            )
        k = self.term_of(t)
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=2 * self._live.n_bins(k),
            record_bound=1.0,
            arrays=self.model().to_arrays(),
            config={"phase": "term", "term": k},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        t = self._t
        if query.round != t:
            raise ValueError(f"update for round {query.round}, expected round {t}")
        if aggregate is not None:
            if t == 0:
                self._update_intercept(np.asarray(aggregate, dtype=np.float64))
            else:
                self._update_term(self.term_of(t), np.asarray(aggregate, dtype=np.float64))
        # Aborted round: nothing released, the model stays as it is.
        self._t += 1

    def _release(self, values: np.ndarray, sensitivity: float, bound: float, label: str):
        """``values`` plus N(0, (zΔ)²) as one ``GaussianDpEvent(z)`` of the plan."""
        noise = self._noise
        if noise is None:
            return values
        mech = GaussianMechanism(
            l2_sensitivity=sensitivity, noise_multiplier=self.noise_multiplier_
        )
        noisy = noise.ledger.release(
            mech, values, rng=noise.rng, sampling_probability=1.0, event=noise.event, label=label
        )
        limit = sum_bound(bound, self.n_records)
        check_release(noisy, bound=limit, margin=noise_margin(mech, noisy.size), label=label)
        return noisy

    def _update_intercept(self, stats: np.ndarray) -> None:
        head = self._release(
            stats[:2], INTERCEPT_SENSITIVITY, INTERCEPT_GRAD_BOUND, "round 0: intercept (Σg, Σh)"
        )
        cuts = {}
        if self._sketch:
            hist = self._release(
                stats[2:],
                math.sqrt(self._n_numeric),
                1.0,
                "round 0: numeric columns' fine histograms",
            ).reshape(self._n_numeric, FINE_GRID)
            for row, k in zip(hist, np.flatnonzero(self.terms.numeric), strict=True):
                cuts[int(k)] = quantile_cuts(row, self.config.bins)
        lam = self._lambda(INTERCEPT_SENSITIVITY)
        self._base = float(-head[0] / (max(head[1], 0.0) + lam))
        self._live = self.terms.with_cuts(cuts)
        self._reset_shapes()

    def _update_term(self, k: int, stats: np.ndarray) -> None:
        cfg, nb = self.config, self._live.n_bins(k)
        if stats.shape != (2 * nb,):
            raise ValueError(f"round {self._t}: need {2 * nb} sums for term {k}; got {stats.shape}")
        if self._noise is not None:
            stats = self._noise.release(stats, label=f"round {self._t}: term {k} bin (Σg, Σh)")
        step = dict(
            learning_rate=cfg.learning_rate,
            reg_lambda=self._lambda(L2_SENSITIVITY),
            max_update=cfg.max_update,
        )
        self._shapes[k] = self._shapes[k] + newton_bin_updates(stats[:nb], stats[nb:], **step)
        sigma_g = 0.0 if self._noise is None else self.noise_multiplier_ * L2_SENSITIVITY
        self._gain[k] = residual_gain(stats[:nb], stats[nb:], noise_std=sigma_g, **step)

    # -- result ---------------------------------------------------------------
    def model(self) -> GAMModel:
        """The released model so far."""
        return GAMModel(base=self._base, terms=self._live, shapes=tuple(self._shapes))


def build(config: GAMConfig, context: StrategyContext) -> DPGAMStrategy:
    """The registry's factory: one term per column of the public schema."""
    terms = None if context.schema is None else schema_terms(context.schema, config.bins)
    return DPGAMStrategy(
        config, terms=terms, participation=context.participation, n_records=context.n_records
    )
