"""DP-SGD logistic regression and one-hidden-layer MLP: the server half.

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
clipped gradient, so its L2 sensitivity is C. A step is a Gaussian mechanism
on a Poisson(q) sample; T steps are recorded as T such events and z is
calibrated for exactly that plan (one PLD accountant, RDP cross-check).

Trust model. The total record count n (the denominator) is public, like the
public bound on records per client that fixes the shim's fixed-point range.
Dividing by the expected rather than the realised batch size keeps the
realised size, which depends on the private data, out of the release
(the "fixed denominator" estimator). Per-client counts are never sent.

Participation ρ < 1 scales the expected batch to ρ·q·n. As in boosting,
``participation_accounting`` chooses how ρ is accounted
(:mod:`fedpriv.privacy.participation`): ``valid`` (default) stays at the record
rate q (a client's records are in or out together), so ρ never lowers the
noise; ``tight`` accounts the mixture PLD (1 − ρ)·(loss 0) + ρ·PLD_q;
``paper`` calibrates at ρ·q, *not a valid guarantee (comparison only)*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event

from fedpriv.federation.protocol import Query
from fedpriv.models.networks import InputMap, ModelKind, NetworkSpec
from fedpriv.privacy import GaussianMechanism
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.participation import (
    ParticipationAccounting,
    calibrate_participation_noise_multiplier,
    parse_accounting,
    participation_event,
)
from fedpriv.privacy.randomness import check_private
from fedpriv.validation import (
    check_count,
    check_open_unit,
    check_positive,
    check_probability,
)

METHOD = "dpsgd"
BACKENDS = ("fast", "opacus")
#: The paper's selected learning rates (Table 5; with C 3.0, q 0.02, 800 steps, MLP h = 16).
PAPER_LEARNING_RATE = {ModelKind.LOGISTIC: 2.0, ModelKind.MLP: 3.0}


@dataclass(frozen=True, kw_only=True)
class DPSGDConfig:
    """Hyper-parameters of DP-SGD; defaults are the paper's selected settings.

    ``learning_rate=None`` takes the paper's value for ``model``;
    ``epsilon=None`` trains without noise and without a ledger (the
    non-private reference; gradients are still clipped to C, which bounds
    every step). ``backend`` picks how clients compute per-example gradients:
    ``"fast"`` (compiled closed forms) or ``"opacus"`` (torch + Opacus);
    both give the same sums. ``participation_accounting`` is ``valid``
    (default), ``tight`` or ``paper`` (not a valid guarantee; module docstring).
    """

    model: ModelKind = ModelKind.LOGISTIC
    hidden: int = 16
    n_steps: int = 800
    learning_rate: float | None = None
    clip_norm: float = 3.0
    sampling_rate: float = 0.02
    epsilon: float | None = 2.0
    delta: float = 1e-5
    backend: str = "fast"
    participation_accounting: ParticipationAccounting = ParticipationAccounting.VALID

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", ModelKind(self.model))
        object.__setattr__(
            self, "participation_accounting", parse_accounting(self.participation_accounting)
        )
        check_count("hidden", self.hidden)
        check_count("n_steps", self.n_steps)
        if self.learning_rate is None:
            object.__setattr__(self, "learning_rate", PAPER_LEARNING_RATE[self.model])
        check_positive("learning_rate", self.learning_rate)
        check_positive("clip_norm", self.clip_norm)
        check_probability("sampling_rate", self.sampling_rate)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}; got {self.backend!r}")
        if self.epsilon is not None:
            check_positive("epsilon", self.epsilon)
            check_open_unit("delta", self.delta)

    @property
    def private(self) -> bool:
        return self.epsilon is not None


class DPSGDStrategy:
    """Server half of DP-SGD; speaks only :class:`Query` and aggregates.

    Parameters
    ----------
    config : DPSGDConfig
    n_records : int
        Public total number of training records n (the denominator q·n).
    participation : float
        Client participation ρ of the runtime (expected batch ρ·q·n).
    initial_params : array, optional
        Public starting point (default: :meth:`NetworkSpec.init_params` from
        the server generator).
    input_map : InputMap, optional
        Public input map of the model (e.g. from
        :func:`fedpriv.data.box_standardisation`); default identity.
    custom_spec : optional
        A user's model (:class:`fedpriv.models.opacus_backend.TorchSpec`)
        instead of the built-in ``config.model``; clients then need the same
        module and the Opacus backend.
    """

    method = METHOD

    def __init__(
        self,
        config: DPSGDConfig,
        *,
        n_records: int,
        participation: float = 1.0,
        initial_params: np.ndarray | None = None,
        input_map: InputMap | None = None,
        custom_spec: Any = None,
    ) -> None:
        self.config = config
        self.n_records = check_count("n_records", n_records)
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
            self.spec = NetworkSpec(kind=cfg.model, n_features=n_features, hidden=cfg.hidden)
        self._secret_rng = check_private("secret_rng", secret_rng)  # private: noise
        self._ledger = ledger
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
        if not cfg.private:
            self._mechanism = None
            return
        if ledger is None:
            raise ValueError("a private run needs a PrivacyLedger")
        cal = calibrate_participation_noise_multiplier(
            target_epsilon=cfg.epsilon,
            target_delta=cfg.delta,
            sampling_probability=cfg.sampling_rate,
            participation=self.participation,
            steps=cfg.n_steps,
            accounting=cfg.participation_accounting,
        )
        self.noise_multiplier_ = cal.noise_multiplier
        self._mechanism = GaussianMechanism(
            l2_sensitivity=cfg.clip_norm, noise_multiplier=cal.noise_multiplier
        )
        self._event = self.round_event
        ledger.reserve(self._event, cfg.n_steps)

    @property
    def round_event(self) -> dp_event.DpEvent:
        """The DpEvent one step releases (private runs only)."""
        if self._mechanism is None:
            raise ValueError("non-private run: no event")
        return participation_event(
            self._mechanism.dp_event,
            sampling_probability=self.config.sampling_rate,
            participation=self.participation,
            accounting=self.config.participation_accounting,
        )

    @property
    def _model_name(self) -> str:
        return self.spec.kind_name if self.custom_spec is not None else self.config.model.value

    def next_query(self) -> Query | None:
        cfg, t = self.config, self._t
        if t >= cfg.n_steps:
            return None
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=cfg.sampling_rate,
            reply_length=self.spec.n_params,
            # One record moves any coordinate of a reply by at most ‖clip(g)‖ ≤ C.
            record_bound=cfg.clip_norm,
            # θ is replaced (never modified in place) by each step, so the query may hold it.
            arrays={
                "params": self._params,
                "input_shift": self._map.shift,
                "input_scale": self._map.scale,
            },
            config={
                "model": self._model_name,
                "hidden": self.spec.hidden,
                "clip_norm": cfg.clip_norm,
                "backend": cfg.backend,
            },
        )

    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        cfg, t = self.config, self._t
        if query.round != t:
            raise ValueError(f"update for step {query.round}, expected step {t}")
        if aggregate is not None:  # an aborted step releases nothing and does not move θ
            total = aggregate
            if self._mechanism is not None:
                total = self._ledger.release(
                    self._mechanism,
                    aggregate,
                    rng=self._secret_rng,
                    sampling_probability=cfg.sampling_rate,
                    event=self._event,
                    label=f"step {t}: clipped gradient sum",
                )
            with np.errstate(over="ignore", invalid="ignore"):  # reported just below
                step = (cfg.learning_rate / self.expected_batch) * total
                self._params = self._params - step
            if not np.all(np.isfinite(self._params)):
                raise FloatingPointError(
                    f"step {t}: parameters diverged (learning rate too large?)"
                )
        self._t += 1

    # -- result ---------------------------------------------------------------
    def model(self) -> Any:
        """The released model so far."""
        return self.spec.model(self._params, self._map)
