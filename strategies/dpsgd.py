"""DP-SGD logistic regression and one-hidden-layer MLP: the server half.

Two classes train the sigmoid model (one logit); K > 2 classes the softmax
model (K logits, :mod:`fedpriv.models.networks`); the step and its privacy
are the same (one clipped gradient per record, sensitivity C).

Benchmark paper §3.5 (standard DP-SGD, Abadi et al. 2016, Alg. 1) in the
central model with secure aggregation. Each step:

1. the query carries the current parameters θ_t (public: they are a
   post-processing of earlier releases and the public initialisation);
2. each client Poisson-samples its records at rate q and returns
   Σ_i clip_C(∇ℓ(θ_t; x_i, y_i)), a vector of P floats (``clients/dpsgd.py``);
3. the shim reveals only the sum over clients;
4. the server adds N(0, (zC)² I) through the ledger, divides by the expected
   batch size q·n and steps: θ_{t+1} = θ_t − η · (sum + noise)/(q·n).

Privacy. Adding or removing one record changes the summed reply by one
clipped gradient, so its L2 sensitivity is C (√(C² + B²) with the output
bias clipped on its own, below). A step is a Gaussian mechanism on a
Poisson(q) sample; the steps are recorded as such events and z is calibrated
for exactly that plan (one PLD accountant, RDP cross-check).

Calibration. The public box map x ↦ √12 (x − ½) (one-hot columns 0/1)
does not centre the data: a column whose values sit far from its box's
middle (an amount with public bounds [0, 1e6] near 1e4 maps to ≈ −1.7 on
every row), and each one-hot block, which sums to 1, act as second
intercepts. Two things then go wrong. (i) The loss is ill-conditioned
along the intercept: the Hessian's top eigenvalue grows with ‖E x̃‖² and the
paper's learning rates (tuned on data standardised by training statistics)
overshoot; the iterates oscillate and the last one predicts a mean of 0.001
or 0.59 for a base rate of 0.23, with or without noise. (ii) Clipping the
whole gradient [r·x̃, r] jointly (Abadi et al. 2016) scales every clipped
example's bias part to C·sign(r)/‖x̃‖, so the bias's fixed point balances
*counts* of clipped positives and negatives instead of Σ(σ(f) − y) = 0
(BRFSS at C = 1: mean prediction 0.06 for a base rate of 0.16). Clipping the
bias on its own without centring makes things worse: against the
intercept-like columns, whose part stays clipped, the update has a
component along the loss's flat valley that never vanishes, and the bias
drifts (to +30…+60; test AUC −0.03 to −0.08).

The remedy, on by default (``centre_share`` s = 0.05):

1. Round 0 releases the mean of the mapped rows: each client returns
   Σ_i clip_R(x̃_i) over all its rows (R = max ‖x̃‖ over the public box,
   the sensitivity), the server adds N(0, (z₀R)²) and divides by the public
   ρ·n. The input map then subtracts that mean (the paper's standardisation,
   made private). The shares set the stages' relative noise (each calibrated
   alone for its share of (ε, δ)) and one scale on all of them spends the
   whole ε under the PLD accountant (:mod:`fedpriv.strategies.dpsgd_plan`).
2. The last two rounds recalibrate the output bias from released sums
   (``recalibrate_share``, :mod:`fedpriv.models.sgd_recalibration`); the
   steps clip jointly to C. Only without them (``recalibrate_share=0``):
   logistic regression: the bias's gradient r = σ(f) − y (softmax:
   r = softmax(f) − e_y) is bounded by B = 1 (softmax √2) for every valid
   label; it is clipped to B where computed (the bound the sensitivity
   assumes), the weights' part to C, and a step's sensitivity is
   √(C² + B²) (per-layer clipping, McMahan et al. 2018, "A general approach
   to adding differential privacy to iterative training procedures").
   Without noise the bias's fixed point is Σ(p − y) = 0: the mean
   prediction on the training rows is the base rate. The MLP keeps one
   joint clip: its hidden units ReLU(·) ≥ 0 are never centred and act as
   intercepts, so a separately clipped output bias drifts as in (ii)
   (measured: mean prediction 0.002–0.48 on the skewed toy below); with
   centring alone it is calibrated at C = 3, while at C = 1 the count
   balance of (ii) remains (mean 0.06–0.09 for a base rate of 0.23).

Measured (test sets, ε = 8, logistic, mean of 3 fits): mean prediction
0.159 / 0.162 for a base rate of 0.158 on BRFSS at C = 3 / 1 (before 0.127 /
0.066), 0.087 / 0.091 for 0.090 on Diabetes 130-US (before 0.046 / 0.020);
test AUC within 0.001 but Diabetes 130-US at C = 1 (0.634, before 0.645).
The bias's own share of the sensitivity costs more at small ε and C: 0.56
instead of 0.63 there at ε = 0.5.

Trust model. The total record count n (the denominator) is public, like the
public bound on records per client that fixes the shim's fixed-point range.
Dividing by the expected rather than the realised batch size keeps the
realised size, which depends on the private data, out of the release
(the "fixed denominator" estimator). Per-client counts are never sent. The
default q, T and learning rate are functions of that public n alone
(:mod:`fedpriv.strategies.dpsgd_schedule`), resolved once when the strategy is built.

Participation ρ < 1 scales the expected batch to ρ·q·n. As in boosting,
``participation_accounting`` chooses how ρ is accounted
(:mod:`fedpriv.privacy.participation`): ``valid`` (default) stays at the record
rate q (a client's records are in or out together), so ρ never lowers the
noise; ``tight`` accounts the mixture PLD (1 − ρ)·(loss 0) + ρ·PLD_q;
``paper`` calibrates at ρ·q, *not a valid guarantee (comparison only)*.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event
from fedpriv.strategies.dpsgd_config import LogisticConfig, MLPConfig  # noqa: F401 (re-exported)
from fedpriv.strategies.dpsgd_nodes import DPSGDNodeStages
from fedpriv.strategies.dpsgd_plan import SGDShape, plan_noise

from fedpriv.federation.protocol import Query, Strategy
from fedpriv.methods import StrategyContext
from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import InputMap, ModelKind, NetworkSpec
from fedpriv.models.sgd_sums import clipped_sum_sensitivity
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.randomness import check_private
from fedpriv.validation import (
    check_count,
    check_probability,
)

log = logging.getLogger(__name__)


class DPSGDStrategy(DPSGDNodeStages, Strategy):
    """Server half of DP-SGD; speaks only :class:`Query` and aggregates.

    Parameters
    ----------
    config : LogisticConfig or MLPConfig
        Its automatic ``rounds`` and ``sampling_rate`` are resolved from ``n_records``
        (:meth:`LogisticConfig.for_records`); ``self.config`` is the resolved one.
    n_records : int
        Public total number of training records n (the denominator q·n): K × the
        declared max-records, or a released count's upper bound; never the exact count.
    participation : float
        Client participation ρ of the runtime (expected batch ρ·q·n).
    initial_params : array, optional
        Public starting point (default: :meth:`NetworkSpec.init_params` from
        the server generator).
    input_map : InputMap, optional
        Public input map of the model (e.g. from
        :func:`fedpriv.data.box_standardisation`); default identity.
    n_classes : int
        Size of the public label set: 2 is the sigmoid model (one logit),
        K > 2 the softmax model (K logits; labels are class indices).
    custom_spec : optional
        A user's model (:class:`fedpriv.models.opacus_backend.TorchSpec`)
        instead of the built-in ``config.model``; clients then need the same
        module and the Opacus backend.
    unit_records : int
        m, the records of one privacy unit (:mod:`fedpriv.privacy.units`): clients
        clip each sampled unit's summed gradient to C (steps keep Δ = C, q is the
        unit sampling rate); the recalibration sums take m·Δ.
    """

    def __init__(
        self,
        config: LogisticConfig,
        *,
        n_records: int,
        participation: float = 1.0,
        initial_params: np.ndarray | None = None,
        input_map: InputMap | None = None,
        n_classes: int = 2,
        custom_spec: Any = None,
        unit_records: int = 1,
    ) -> None:
        self.n_classes = check_count("n_classes", n_classes, minimum=2)
        # m: the clients clip each unit's summed gradient (and centring rows) to the same
        # bound, so steps keep Δ; the recalibration sums are a unit's m records' (m·Δ).
        self.unit_records = check_count("unit_records", unit_records)
        self.method = config.model.value  # the registry name: "logistic" or "mlp"
        self.n_records = check_count("n_records", n_records)
        # Resolved once, here: every reader (Flower's num_rounds, the nodes' stage plans,
        # the status, the progress) sees the rounds and q of this config.
        self.config = config.for_records(self.n_records)
        if config.automatic:
            log.info(
                "%s: automatic schedule on n = %d public records: q = %.4g, T = %d, "
                "learning rate %.4g (fedpriv.strategies.dpsgd_schedule)",
                self.method, self.n_records, self.config.sampling_rate, self.config.rounds,
                self.config.learning_rate,
            )  # fmt: skip
        self.participation = check_probability("participation", participation)
        self.initial_params = initial_params
        self.input_map = input_map
        self.custom_spec = custom_spec
        if custom_spec is not None and config.backend != "opacus":
            raise ValueError("a custom torch module needs backend='opacus'")
        self.noise_multiplier_: float | None = None
        self._t = 0

    @property
    def expected_batch(self) -> float:
        """ρ·q·n: the fixed denominator of every step."""
        return self.participation * self.config.sampling_rate * self.n_records

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
        if self.custom_spec is not None:
            self.spec = self.custom_spec
        else:
            self.spec = NetworkSpec(
                kind=cfg.model, n_features=n_features, hidden=cfg.hidden, n_classes=self.n_classes
            )
        self._t = 0
        self._map = self.input_map or InputMap.identity(n_features)
        if self._map.n_features != n_features:
            raise ValueError(f"input map has {self._map.n_features} features; data {n_features}")
        if self.initial_params is None:
            self._params = self.spec.init_params(rng)
        else:
            self._params = np.array(self.initial_params, dtype=np.float64)
        if self._params.shape != (self.spec.n_params,) or not np.all(np.isfinite(self._params)):
            raise ValueError(
                f"initial parameters must be {self.spec.n_params} finite floats; "
                f"got shape {self._params.shape}"
            )
        secret_rng = check_private("secret_rng", secret_rng)  # private: noise
        self._centring = cfg.centre_share > 0
        # The output bias's own bound B: |σ(f) − y| ≤ 1, ‖softmax(f) − e_y‖ ≤ √2;
        # logistic regression only (module docstring: the MLP's hidden units).
        self._recal = cfg.recalibrate_share > 0 and self.custom_spec is None
        self.bias_bound = 0.0
        if (
            self._centring
            and not self._recal
            and self.custom_spec is None
            and cfg.model is ModelKind.LOGISTIC
        ):
            self.bias_bound = 1.0 if self.spec.n_outputs == 1 else math.sqrt(2.0)
        # The same function gives the clients' own bound (fedpriv.clients.dpsgd.reply_sensitivity).
        self.sensitivity = clipped_sum_sensitivity(
            clip_norm=cfg.clip_norm, bias_bound=self.bias_bound, dims=self.spec.n_params
        )[1]
        self.row_bound = _row_bound(self._map)
        shape = SGDShape(
            spec=self.spec,
            n_records=self.n_records,
            participation=self.participation,
            steps=cfg.rounds - int(self._centring) - recal.ROUNDS * int(self._recal),
            sensitivity=self.sensitivity,
            row_bound=self.row_bound,
            n_features=n_features,
            centring=self._centring,
            recalibrating=self._recal,
            unit_records=self.unit_records,
        )
        # (ε, δ) are the ledger's, for the whole plan at once; no ledger: the
        # non-private reference (fedpriv.strategies.dpsgd_plan).
        noise = plan_noise(cfg, shape, ledger, rng=secret_rng)
        self._centre_noise, self._noise = noise.centre, noise.steps
        self._recal_rounds, self.walk_ = noise.recalibration, noise.walk
        if self._noise is not None:
            self.noise_multiplier_ = self._noise.noise_multiplier

    @property
    def rounds(self) -> int:
        """Federated rounds this strategy asks for: one per step."""
        return self.config.rounds

    @property
    def round_event(self) -> dp_event.DpEvent:
        """The DpEvent one step releases (private runs only)."""
        if self._noise is None:
            raise ValueError("non-private run: no event")
        return self._noise.event

    @property
    def _model_name(self) -> str:
        return self.spec.kind_name if self.custom_spec is not None else self.config.model.value

    def noise_std(self, query: Query) -> float | None:
        """The std the release of ``query``'s sum needs (distributed noise's shares)."""
        if query.round == 0 and self._centring:
            stage = self._centre_noise
        elif query.config.get("stage") in recal.STAGES:
            stage = self._recal_rounds.noise
        else:
            stage = self._noise
        return None if stage is None else stage.std(query.reply_length)

    def next_query(self) -> Query | None:
        cfg, t = self.config, self._t
        if t >= cfg.rounds:
            return None
        if t == 0 and self._centring:
            return Query(
                round=0,
                method=self.method,
                sampling_rate=1.0,  # every record, once
                reply_length=self._map.n_features,
                record_bound=self.row_bound,  # ‖clip_R(x̃)‖ ≤ R
                arrays={"input_shift": self._map.shift, "input_scale": self._map.scale},
                config=self._centre_config(),
            )
        # θ is replaced (never modified in place) by each step, so a query may hold it.
        arrays = {
            "params": self._params,
            "input_shift": self._map.shift,
            "input_scale": self._map.scale,
        }
        model = {
            "model": self._model_name,
            "hidden": self.spec.hidden,
            "n_classes": self.n_classes,
            "clip_norm": cfg.clip_norm,
        }
        if self._recal and t >= cfg.rounds - recal.ROUNDS:
            stage = self._recal_rounds
            return Query(
                round=t,
                method=self.method,
                sampling_rate=1.0,  # every record
                reply_length=stage.reply_length,
                record_bound=stage.sensitivity,
                arrays=arrays,
                config={**model, **self._recal_config()},
            )
        return Query(
            round=t,
            method=self.method,
            sampling_rate=cfg.sampling_rate,
            reply_length=self.spec.n_params,
            # One record moves any coordinate of a reply by at most √(C² + B²).
            record_bound=self.sensitivity,
            arrays=arrays,
            config={**model, **self._step_config(), "backend": cfg.backend},
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg, t = self.config, self._t
        if query.round != t:
            raise ValueError(f"update for step {query.round}, expected step {t}")
        if aggregate is not None and t == 0 and self._centring:
            total = aggregate
            if self._centre_noise is not None:
                total = self._centre_noise.release(aggregate, label="round 0: feature sum")
            # The fixed denominator ρ·n (the realised count is private), as the steps'.
            mean = total / (self.participation * self.n_records)
            self._map = InputMap(self._map.shift + mean / self._map.scale, self._map.scale)
        elif aggregate is not None and query.config.get("stage") in recal.STAGES:
            self._params = self._recal_rounds.update(t, aggregate, self._params)
            if t == cfg.rounds - 1 and (notes := self.status_notes()):
                log.warning("%s: %s", self.method, "; ".join(notes))
        elif aggregate is not None:  # an aborted step releases nothing and does not move θ
            total = aggregate
            if self._noise is not None:
                total = self._noise.release(aggregate, label=f"step {t}: clipped gradient sum")
            with np.errstate(over="ignore", invalid="ignore"):  # reported just below
                step = (cfg.learning_rate / self.expected_batch) * total
                self._params = self._params - step
            if not np.all(np.isfinite(self._params)):
                raise FloatingPointError(
                    f"step {t}: parameters diverged (learning rate too large?)"
                )
        self._t += 1

    # -- result ---------------------------------------------------------------
    def status_notes(self) -> list[str]:
        """Why the released model falls short of its plan although its rounds released
        (the run's status is then degraded): a degenerate ``linear`` recalibration,
        read from released values only."""
        note = None if self._recal_rounds is None else self._recal_rounds.note
        return [] if note is None else [note]

    def model(self) -> Any:
        """The released model so far."""
        fitted = None if self._recal_rounds is None else self._recal_rounds.map
        if fitted is None:
            return self.spec.model(self._params, self._map)
        return self.spec.model(self._params, self._map, recalibration=fitted)


def _row_bound(input_map: InputMap) -> float:
    """R = max ‖x̃‖ over the public box [0, 1]^d: the centring round's row clip."""
    lo, hi = (np.abs((v - input_map.shift) * input_map.scale) for v in (0.0, 1.0))
    return float(np.sqrt(np.sum(np.maximum(lo, hi) ** 2)))


def build(config: LogisticConfig, context: StrategyContext) -> DPSGDStrategy:
    """The registry's factory: the public box standardisation when ``config.standardise``."""
    input_map = None
    if config.standardise and context.schema is not None:
        from fedpriv.data import box_standardisation

        input_map = InputMap(*box_standardisation(context.schema))
    return DPSGDStrategy(
        config,
        n_records=context.n_records,
        participation=context.participation,
        input_map=input_map,
        n_classes=context.n_classes,
        custom_spec=context.extra.get("custom_spec"),
        unit_records=context.unit_records,
    )
