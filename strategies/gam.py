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
±``max_update``, to each bin of the term's shape function. A numeric term's
released sums are first kernel-smoothed over its ordered bins, with the
bandwidth of least Stein risk up to ``smooth`` bins
(:mod:`fedpriv.models.gam_smooth`: post-processing of released values).

Privacy. One record moves one bin of a term by at most (1, ¼) (the client
clips g and h where it computes them), so a column round's reply has L2
sensitivity √(1 + 1/16); the intercept's (½, ¼), √(1/16 + ¼); the histogram's
one count per numeric column, √(numeric columns). Every release adds
N(0, (zΔ)²) with the same multiplier z, so the run is ``rounds`` (+1 with the
sketch) identical Gaussian events ``GaussianDpEvent(z)``; z is calibrated for
exactly that plan and the plan reserved before any noise is drawn. Each
release is range-checked against the public bound on an honest sum.

Nodes. Each reply reaches the server *normalised* (each of round 0's blocks
divided by its sensitivity; a group reply by √s; the pair selection by √P) and
is scaled back once released, so a node derives every reply's sensitivity from
the query's settings and sees two stages of one noise level each:
``intercept`` (z/√B for B blocks) and ``term`` (z)
(:mod:`fedpriv.models.gam_sensitivity`, :meth:`DPGAMStrategy.node_stages`).

Multiclass (C > 2 public classes, :mod:`fedpriv.models.gam_softmax`): a
softmax GAM with C values per bin. Round 0 asks for ``[Σg_1..C, Σh]`` at
margin 0 (sensitivity √(1 − 1/C + h₀²), h₀ = (1/C)(1 − 1/C)), a column round
for ``[Σg_{b,c} | Σh_{b,c}]`` (sensitivity √(2 + ¼(1 − 1/C))); the released
Σg are projected on the sum-zero plane and each class gets its diagonal
Newton step scaled by (C − 1)/C (:func:`~fedpriv.models.gam_softmax.softmax_step_scale`).
Binary runs are unchanged (one logit per bin).

Binary columns in one round (``binary_group`` = s > 0, two classes): a pass
visits every other column, then one *group* round that asks for each binary
column's positive-bin (Σ w g, Σ w h), each record's weight w capped so that it
counts in at most s columns at full weight (sensitivity √s · √(1 + 1/16),
:mod:`fedpriv.models.gam_group`); each positive bin takes its Newton step,
divided by the mean number of group columns a record is positive in (from
released hessian sums: :func:`~fedpriv.models.gam_group.group_damping`). With
``column_order = "gain"`` the group is one unit whose gain is its terms' sum.

Interactions (``interactions`` > 0): the last ``interaction_rounds`` rounds
select and fit pair terms from released values only (:mod:`fedpriv.strategies.gam_pairs`).

Everything the server decides (term, bins, pairs, λ, intercept, shapes, and
each smoothing bandwidth and kernel) uses only the public configuration, the
public noise scale and released values: post-processing, which costs nothing.
"""

from __future__ import annotations

import numpy as np
from fedpriv.strategies.gam_config import GAMConfig
from fedpriv.strategies.gam_nodes import NodeStages
from fedpriv.strategies.gam_pairs import PairStage

from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models.gam import (
    FINE_GRID,
    HESS_BOUND,
    GAMModel,
    Terms,
    box_terms,
    newton_bin_updates,
    quantile_cuts,
    residual_gain,
    residual_gains,
    schema_terms,
)
from fedpriv.models.gam_group import binary_terms, group_damping, group_sensitivity
from fedpriv.models.gam_sensitivity import (
    column_sensitivity,
    head_sensitivity,
)
from fedpriv.models.gam_smooth import smooth_sums
from fedpriv.models.gam_softmax import softmax_step_scale, sum_zero
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting
from fedpriv.privacy.randomness import check_private
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.validation import check_count, check_probability

METHOD = "dp_gam"
#: The unit of a pass that is the group round of the binary columns (not a term index).
GROUP = -1


class DPGAMStrategy(PairStage, NodeStages, Strategy):
    """Server half of DP-EBM; speaks only :class:`Query` and released sums."""

    method = METHOD

    def __init__(
        self,
        config: GAMConfig,
        *,
        terms: Terms | None = None,
        participation: float = 1.0,
        n_records: int | None = None,
        n_classes: int = 2,
        unit_records: int = 1,
    ) -> None:
        """``terms``: the public binning (default: every feature a numeric term on the
        box [0, 1]); ``participation``: client participation ρ (accounted as ``valid``:
        it never lowers the noise); ``n_records``: public bound on the records behind a
        sum, for the range checks (``None``: no check); ``n_classes``: size of the
        public label set (> 2: a softmax GAM); ``unit_records``: m, the records of one
        privacy unit, which every sensitivity covers (:mod:`fedpriv.privacy.units`)."""
        self.config = config
        self.terms = terms
        self.participation = check_probability("participation", participation)
        self.n_records = None if n_records is None else check_count("n_records", n_records)
        self.n_classes = check_count("n_classes", n_classes, minimum=2)
        self.unit_records = check_count("unit_records", unit_records)
        self.noise_multiplier_: float | None = None
        self._t = 0

    @property
    def multiclass(self) -> bool:
        return self.n_classes > 2

    @property
    def term_sensitivity(self) -> float:
        """L2 sensitivity of one term's (or pair's) per-bin reply: one unit's (m records)."""
        return self.unit_records * column_sensitivity(self.n_classes)

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
        self._base = 0.0 if not self.multiclass else np.zeros(self.n_classes)
        self._live = self.terms  # cuts replaced by the sketch's after round 0
        self._shapes: list[np.ndarray] = []
        self._n_numeric = int(self.terms.numeric.sum())
        group = binary_terms(self.terms) if cfg.binary_group and not self.multiclass else []
        self._group = np.asarray(group if len(group) >= 2 else [], dtype=np.int64)
        rest = sorted(set(range(self.terms.m)) - set(self._group.tolist()))
        self._units = rest + ([GROUP] if self._group.size else [])  # one pass, in order
        self._sketch = cfg.quantile_bins and self._n_numeric > 0
        self._noise = GaussianRounds.plan(
            ledger,
            l2_sensitivity=self.term_sensitivity,
            sampling_rate=1.0,
            rounds=cfg.rounds + int(self._sketch),
            participation=self.participation,
            accounting=ParticipationAccounting.VALID,
            rng=check_private("secret_rng", secret_rng),  # private: noise
            sum_bound=sum_bound(max(1.0, HESS_BOUND), self.n_records, sampling_rate=1.0),
        )
        self._reset_shapes()
        self.noise_multiplier_ = None if self._noise is None else self._noise.noise_multiplier

    def _reset_shapes(self) -> None:
        tail = (self.n_classes,) if self.multiclass else ()
        self._shapes = [np.zeros((self._live.n_bins(k), *tail)) for k in range(self._live.m)]
        self._hess = [np.zeros((self._live.n_bins(k), *tail)) for k in range(self._live.m)]
        self._pairs = []
        self._gain = np.full(self._live.m, np.inf)  # residual gain per term (inf: unvisited)
        self._visits: dict[int, int] = {}  # round -> term
        self._total_h: float | None = None  # Σ_b h_b of the latest column round (released)

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
        """The unit round ``t ≥ 1`` visits (a term, or :data:`GROUP`): cyclic over the
        pass's units (public), or by residual gain from released sums
        (post-processing); fixed once the round's query is asked."""
        if t not in self._visits:
            units = self._units
            if self.config.column_order == "gain" and t > len(units):
                gains = [
                    max(self._gain[self._group].sum(), 0.0) if u == GROUP else self._gain[u]
                    for u in units
                ]
                self._visits[t] = units[int(np.argmax(gains))]
            else:
                self._visits[t] = units[(t - 1) % len(units)]
        return self._visits[t]

    def _width(self) -> int:
        """Values per bin of a reply: Σg and Σh, for one logit or C classes."""
        return 2 * (self.n_classes if self.multiclass else 1)

    def next_query(self) -> Query | None:
        t = self._t
        if t >= self.config.rounds:
            return None
        if t == 0:
            grid = FINE_GRID if self._sketch else 0
            head = self.n_classes + 1 if self.multiclass else 2
            config = {"phase": "intercept", "grid": grid, "n_classes": self.n_classes}
            return Query(
                round=0,
                method=METHOD,
                sampling_rate=1.0,
                reply_length=head + grid * self._n_numeric,
                record_bound=1.0,
                arrays=self._live.to_arrays(),
                config=config,
            )
        main = self.config.main_rounds
        if t >= main and ((t == main and self._live.m >= 2) or self._pairs):
            return self.pair_query(t)
        k = self.term_of(t)
        if k == GROUP:
            return Query(
                round=t,
                method=METHOD,
                sampling_rate=1.0,
                reply_length=2 * self._group.size,
                record_bound=1.0,
                arrays={**self.model().to_arrays(), "group": self._group.copy()},
                config={
                    "phase": "group",
                    "sparsity": self.config.binary_group,
                    "n_classes": self.n_classes,
                },
            )
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=self._width() * self._live.n_bins(k),
            record_bound=1.0,
            arrays=self.model().to_arrays(),
            config={"phase": "term", "term": k, "n_classes": self.n_classes},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        t = self._t
        if query.round != t:
            raise ValueError(f"update for round {query.round}, expected round {t}")
        if aggregate is not None:
            stats = np.asarray(aggregate, dtype=np.float64)
            phase = query.config["phase"]
            if phase == "intercept":
                self._update_intercept(stats)
            elif phase == "term":
                self._update_term(int(query.config["term"]), stats)
            elif phase == "group":
                self._update_group(stats)
            else:
                self.update_pairs(query, stats)
        # Aborted round: nothing released, the model stays as it is.
        self._t += 1

    def _update_intercept(self, stats: np.ndarray) -> None:
        C = self.n_classes
        head, *rest = self._release_head(stats)
        cuts = {}
        if self._sketch:
            hist = rest[0].reshape(self._n_numeric, FINE_GRID)
            for row, k in zip(hist, np.flatnonzero(self.terms.numeric), strict=True):
                cuts[int(k)] = quantile_cuts(row, self.config.bins)
        lam = self._lambda(self.unit_records * head_sensitivity(C))
        if self.multiclass:
            self._base = -softmax_step_scale(C) * sum_zero(head[:C]) / (max(head[C], 0.0) + lam)
        else:
            self._base = float(-head[0] / (max(head[1], 0.0) + lam))
        self._live = self.terms.with_cuts(cuts)
        self._reset_shapes()

    def newton_step(self, stats: np.ndarray, n: int, sensitivity: float, term: int | None = None):
        """Released ``[Σg | Σh]`` over ``n`` bins (or cells) → (step, Σh), each (n[, C]);
        a column's (``term``) sums smoothed first (:meth:`smooth`). The residual gain
        is measured on the sums as released (its noise correction assumes i.i.d. noise)."""
        cfg = self.config
        rate = cfg.learning_rate
        if self.multiclass:
            stats = stats.reshape(2, n, self.n_classes)
            g, h = sum_zero(stats[0]), stats[1]
            rate = rate * softmax_step_scale(self.n_classes)
        else:
            g, h = stats[:n], stats[n:]
        lam = self._lambda(sensitivity)
        sigma = 0.0 if self._noise is None else self.noise_multiplier_ * sensitivity
        gs, hs = (g, h) if term is None else self.smooth(term, g, h, sigma)
        step = newton_bin_updates(
            gs, hs, learning_rate=rate, reg_lambda=lam, max_update=cfg.max_update
        )
        self._last_gain = residual_gain(g, h, step, reg_lambda=lam, noise_std=sigma)
        return step, h

    def smooth(self, k: int, g: np.ndarray, h: np.ndarray, sigma: float):
        """Term ``k``'s released (Σg, Σh), (n[, C]) each, noise std σ per entry: smoothed
        if numeric (:func:`~fedpriv.models.gam_smooth.smooth_sums`), else as released."""
        terms, C = self._live, self.n_classes
        if not terms.numeric[k] or terms.levels[k] > 0:
            return g, h
        var = sigma**2 * ((C - 1) if self.multiclass else 1)  # trace of a bin's noise cov.
        return smooth_sums(g, h, terms.cuts[k].size + 1, self.config.smooth, var)

    def _update_term(self, k: int, stats: np.ndarray) -> None:
        nb = self._live.n_bins(k)
        if stats.shape != (self._width() * nb,):
            raise ValueError(
                f"round {self._t}: need {self._width() * nb} sums for term {k}; got {stats.shape}"
            )
        if self._noise is not None:
            stats = self._noise.release(stats, label=f"round {self._t}: term {k} bin (Σg, Σh)")
        step, self._hess[k] = self.newton_step(stats, nb, self.term_sensitivity, term=k)
        self._shapes[k] = self._shapes[k] + step
        self._gain[k] = self._last_gain
        self._total_h = float(self._hess[k].sum())  # its bins partition the records

    def _update_group(self, stats: np.ndarray) -> None:
        group, n = self._group, self._group.size
        if stats.shape != (2 * n,):
            raise ValueError(f"round {self._t}: need {2 * n} sums for the binary group")
        sens = self.unit_records * group_sensitivity(self.config.binary_group)
        # The client divided the sums by Δ_group/Δ = √s (a column round's sensitivity):
        # released through the plan's stage, then scaled back (noise std zΔ_group).
        root = sens / self.term_sensitivity
        if self._noise is not None:
            label = f"round {self._t}: binary group (Σwg, Σwh)"
            stats = self._noise.release(stats, label=label)
        stats = stats * root
        g, h = stats[:n], stats[n:]
        lam = self._lambda(sens)
        sigma = 0.0 if self._noise is None else self.noise_multiplier_ * sens
        step = newton_bin_updates(
            g, h, learning_rate=self.config.learning_rate, reg_lambda=lam,
            max_update=self.config.max_update,
        ) / group_damping(h, self._total_h)  # the terms step at once (group_damping)  # fmt: skip
        # Not clipped term by term: the group's gain as a unit is their sum.
        left = residual_gains(g, h, step, reg_lambda=lam, noise_std=sigma)
        for i, k in enumerate(group.tolist()):
            self._shapes[k] = self._shapes[k] + np.array([0.0, step[i]])
            self._hess[k] = np.array([self._hess[k][0], h[i]])
            self._gain[k] = left[i]

    # -- result ---------------------------------------------------------------
    def model(self) -> GAMModel:
        """The released model so far."""
        return GAMModel(
            base=self._base, terms=self._live, shapes=tuple(self._shapes), pairs=tuple(self._pairs)
        )


def build(config: GAMConfig, context: StrategyContext) -> DPGAMStrategy:
    """The registry's factory: one term per column of the public schema."""
    terms = None if context.schema is None else schema_terms(context.schema, config.bins)
    return DPGAMStrategy(
        config,
        terms=terms,
        participation=context.participation,
        n_records=context.n_records,
        n_classes=context.n_classes,
        unit_records=context.unit_records,
    )
