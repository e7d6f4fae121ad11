"""scikit-learn estimators that run a strategy/client pair in process.

``fit`` takes a :class:`fedpriv.data.TabularDataset` (its training rows,
held by its natural clients or partitioned IID) or arrays ``X, y`` (plus a
partition, else an IID split over ``n_clients``), trains through
:class:`fedpriv.federation.runtime.InProcessRuntime` and keeps the released
model, the privacy report and the communication figures.

They are scikit-learn classifiers (``clone``, ``cross_val_score``,
pipelines), with a public label set instead of one read off the data; the
contract, the tags and which of scikit-learn's ``check_estimator`` checks
do not apply to a DP learner, and why, are in :mod:`server.estimator_base`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clients.boosting import BoostingClient
from clients.dpsgd import DPSGDClient
from fedpriv.data import TabularDataset, box_standardisation
from fedpriv.models.networks import InputMap
from fedpriv.privacy.randomness import SecretKey
from server.estimator_base import Estimator, federated_training_data
from server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier
from strategies.boosting import BoostingConfig, DPBoostingStrategy, split_feature_weights
from strategies.dpsgd import DPSGDConfig, DPSGDStrategy


class DPBoostingClassifier(Estimator):
    """DP federated gradient boosting with random trees (benchmark paper §3.4).

    Parameters
    ----------
    n_rounds, depth, learning_rate, sampling_rate, reg_lambda :
        See :class:`strategies.boosting.BoostingConfig`.
    epsilon, delta : float
        Privacy budget of the whole fit; ``epsilon=None`` is the non-private
        reference (no noise, no ledger).
    participation : float
        Per-round client participation ρ (lowers the noise only under
        ``participation_accounting="tight"`` or ``"paper"``).
    participation_accounting : {"valid", "tight", "paper"}
        How ρ is accounted (:mod:`fedpriv.privacy.participation`): ``valid``
        (default) at the record rate q; ``tight``, the mixture PLD; ``paper``,
        the rate ρ·q: *not a valid guarantee (comparison only)*, the privacy
        report then has ``certified=False``.
    n_clients : int
        Clients for an IID split when the data has no natural clients.
    secure_aggregation : bool
        Sum replies through the masking shim (default) or plain fixed point.
    split_features : {"columns", "uniform"}
        How random splits pick a feature: each schema column equally likely
        (shared among its one-hot levels; needs a dataset with a schema) or
        each encoded feature equally likely.
    classes : sequence of two labels, optional
        The public label set of array labels (e.g. ``["no", "yes"]``; sorted,
        the second is the positive class). Default {0, 1}. Never read off the
        data; a dataset's label set is its schema's.
    seed : int
        Public seed of the public randomness (the random trees).
    secret_key : SecretKey, bytes or None
        Key of the private randomness (noise, Poisson coins, participation).
        ``None``: a fresh key from OS entropy at every fit. Pass one only to
        reproduce a fit; it is never logged or shown (the repr says
        ``<hidden>``), and pickling the estimator drops it.
        ``SecretKey.from_public_seed(s)`` is a debug mode whose privacy
        report says ``certified: false``.

    Attributes
    ----------
    classes_ : ndarray
        The public label set; ``predict`` returns its labels.
    n_features_in_ : int
    model_, ledger_, privacy_report_, noise_multiplier_, communication_ :
        The released model, the run's ledger and report, σ, the traffic.
    """

    def __init__(
        self,
        *,
        n_rounds: int = 50,
        depth: int = 5,
        learning_rate: float = 0.4,
        sampling_rate: float = 0.05,
        reg_lambda: float = 1.0,
        epsilon: float | None = 2.0,
        delta: float = 1e-5,
        participation: float = 1.0,
        participation_accounting: str = "valid",
        n_clients: int = 5,
        secure_aggregation: bool = True,
        split_features: str = "columns",
        classes: Sequence | None = None,
        seed: int = 0,
        secret_key: SecretKey | bytes | None = None,
    ) -> None:
        self.n_rounds = n_rounds
        self.depth = depth
        self.learning_rate = learning_rate
        self.sampling_rate = sampling_rate
        self.reg_lambda = reg_lambda
        self.epsilon = epsilon
        self.delta = delta
        self.participation = participation
        self.participation_accounting = participation_accounting
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.split_features = split_features
        self.classes = classes
        self.seed = seed
        self.secret_key = secret_key

    def _config(self) -> BoostingConfig:
        return BoostingConfig(
            n_rounds=self.n_rounds,
            depth=self.depth,
            learning_rate=self.learning_rate,
            sampling_rate=self.sampling_rate,
            reg_lambda=self.reg_lambda,
            epsilon=self.epsilon,
            delta=self.delta,
            participation_accounting=self.participation_accounting,
        )

    def fit(
        self,
        data: TabularDataset | np.ndarray,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
    ) -> DPBoostingClassifier:
        """Train on ``part`` of a dataset (``"train"``, or ``"train+val"`` once tuned)."""
        X, yy, partition = self._training_data(data, y, partition, part)
        widths = data.schema.column_widths if isinstance(data, TabularDataset) else None
        weights = split_feature_weights(self.split_features, widths)
        strategy = DPBoostingStrategy(
            self._config(), feature_weights=weights, participation=self.participation
        )
        self._fit_on(
            X,
            yy,
            partition,
            handler=BoostingClient(),
            strategy=strategy,
            participation=self.participation,
        )
        return self


class DPSGDClassifier(Estimator):
    """DP-SGD logistic regression or one-hidden-layer MLP, federated (benchmark paper §3.5).

    Clients return clipped per-example gradient sums of their Poisson(q)
    samples; the server adds Gaussian noise to the securely aggregated sum,
    divides by the expected batch ρ·q·n (n public) and takes an SGD step.

    Parameters
    ----------
    model : {"logistic", "mlp"}
        Built-in model (ignored when ``module`` is given).
    hidden : int
        MLP width h.
    n_steps, learning_rate, clip_norm, sampling_rate :
        T, η, C and q (see :class:`strategies.dpsgd.DPSGDConfig`;
        ``learning_rate=None`` is the paper's 2.0 / 3.0).
    epsilon, delta : float
        Privacy budget of the whole fit; ``epsilon=None`` is the non-private
        reference (no noise, no ledger; still clipped).
    participation : float
        Per-step client participation ρ (expected batch ρ·q·n).
    participation_accounting : {"valid", "tight", "paper"}
        As for :class:`DPBoostingClassifier`; ``paper`` is not a valid guarantee.
    n_clients : int
        Clients for an IID split when the data has no natural clients.
    secure_aggregation : bool
        Sum replies through the masking shim (default) or plain fixed point.
    backend : {"fast", "opacus"}
        Per-example gradients from compiled closed forms or from Opacus.
    standardise : bool
        Map numeric features x ∈ [0, 1] to √12 (x − ½) (uniform on the public
        box; :func:`fedpriv.data.box_standardisation`) when ``fit`` gets a
        dataset with a schema. Never uses data statistics.
    module : torch.nn.Module, optional
        Train this module instead of a built-in model (Opacus backend; its
        initial parameters must be public, e.g. from a seeded generator).
    classes : sequence of two labels, optional
        As for :class:`DPBoostingClassifier`.
    seed : int
        Public seed of the public randomness (initial parameters).
    secret_key : SecretKey, bytes or None
        As for :class:`DPBoostingClassifier`.
    """

    def __init__(
        self,
        *,
        model: str = "logistic",
        hidden: int = 16,
        n_steps: int = 800,
        learning_rate: float | None = None,
        clip_norm: float = 3.0,
        sampling_rate: float = 0.02,
        epsilon: float | None = 2.0,
        delta: float = 1e-5,
        participation: float = 1.0,
        participation_accounting: str = "valid",
        n_clients: int = 5,
        secure_aggregation: bool = True,
        backend: str = "fast",
        standardise: bool = True,
        module: Any = None,
        classes: Sequence | None = None,
        seed: int = 0,
        secret_key: SecretKey | bytes | None = None,
    ) -> None:
        self.model = model
        self.hidden = hidden
        self.n_steps = n_steps
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.sampling_rate = sampling_rate
        self.epsilon = epsilon
        self.delta = delta
        self.participation = participation
        self.participation_accounting = participation_accounting
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.backend = backend
        self.standardise = standardise
        self.module = module
        self.classes = classes
        self.seed = seed
        self.secret_key = secret_key

    def _config(self) -> DPSGDConfig:
        return DPSGDConfig(
            model=self.model,
            hidden=self.hidden,
            n_steps=self.n_steps,
            learning_rate=self.learning_rate,
            clip_norm=self.clip_norm,
            sampling_rate=self.sampling_rate,
            epsilon=self.epsilon,
            delta=self.delta,
            backend=self.backend,
            participation_accounting=self.participation_accounting,
        )

    def fit(
        self,
        data: TabularDataset | np.ndarray,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
    ) -> DPSGDClassifier:
        """Train on ``part`` of a dataset (``"train"``, or ``"train+val"`` once tuned)."""
        X, yy, partition = self._training_data(data, y, partition, part)
        custom = None
        if self.module is not None:
            from fedpriv.models.opacus_backend import TorchSpec

            custom = TorchSpec(self.module)
        input_map = None
        if self.standardise and isinstance(data, TabularDataset):
            input_map = InputMap(*box_standardisation(data.schema))
        strategy = DPSGDStrategy(
            self._config(),
            n_records=sum(len(p) for p in partition),
            participation=self.participation,
            input_map=input_map,
            custom_spec=custom,
        )
        self._fit_on(
            X,
            yy,
            partition,
            handler=DPSGDClient(module=self.module),
            strategy=strategy,
            participation=self.participation,
        )
        return self


__all__ = [
    "DPBoostingClassifier",
    "DPRandomForestClassifier",
    "DPSGDClassifier",
    "LumberjackClassifier",
    "federated_training_data",
]
