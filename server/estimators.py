"""scikit-learn style estimators that run a strategy/client pair in process.

``fit`` takes a :class:`fedpriv.data.TabularDataset` (its training rows,
held by its natural clients or partitioned IID) or arrays plus a partition,
trains through :class:`fedpriv.federation.runtime.InProcessRuntime` and keeps
the released model, the privacy report and the communication figures.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np

from clients.boosting import BoostingClient
from clients.dpsgd import DPSGDClient
from clients.lumberjack import LumberjackClient
from fedpriv.data import TabularDataset, box_standardisation, feature_space_numeric, iid
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.models.networks import InputMap
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.seeding import derive_generator
from strategies.boosting import BoostingConfig, DPBoostingStrategy, split_feature_weights
from strategies.dpsgd import DPSGDConfig, DPSGDStrategy


def federated_training_data(
    data: TabularDataset | np.ndarray,
    y: np.ndarray | None,
    partition: list[np.ndarray] | None,
    n_clients: int,
    part: str = "train",
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Training rows and who holds them (see :meth:`TabularDataset.client_partition`)."""
    if isinstance(data, TabularDataset):
        X, yy = data.xy(part)
        if partition is None:
            partition = data.client_partition(n_clients, part)
        return X, yy, partition
    if y is None:
        raise ValueError("fit(X, y): y is required with an array X")
    X, yy = np.asarray(data, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if partition is None:
        partition = iid(yy.size, n_clients=n_clients, rng=derive_generator(0, "partition", "iid"))
    return X, yy, partition


class _Estimator:
    """scikit-learn parameter handling, the in-process run, and prediction from ``model_``."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        # The constructor's keyword arguments are the parameters (scikit-learn rule).
        names = inspect.signature(type(self).__init__).parameters
        return {k: getattr(self, k) for k in names if k != "self"}

    def set_params(self, **params: Any):
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r}")
            setattr(self, k, v)
        return self

    def _run(self, runtime: InProcessRuntime, strategy: Any, epsilon: float | None, delta: float):
        """Train ``strategy`` on ``runtime`` under a fresh ledger; keep the results."""
        ledger = None
        if epsilon is not None:
            ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=delta))
        strategy = runtime.run(strategy, ledger=ledger)
        self.model_ = strategy.model()
        self.noise_multiplier_ = strategy.noise_multiplier_
        self.ledger_ = ledger
        self.privacy_report_ = ledger.report() if ledger is not None else None
        self.communication_ = runtime.communication
        return strategy

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.model_.decision_function(np.asarray(X, dtype=np.float64))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = self.model_.predict_proba(np.asarray(X, dtype=np.float64))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.decision_function(X) > 0).astype(np.int64)

    @property
    def epsilon_spent_(self) -> float:
        return math.inf if self.privacy_report_ is None else self.privacy_report_.epsilon


class DPBoostingClassifier(_Estimator):
    """DP federated gradient boosting with random trees (benchmark paper §3.4).

    Parameters
    ----------
    n_rounds, depth, learning_rate, sampling_rate, reg_lambda :
        See :class:`strategies.boosting.BoostingConfig`.
    epsilon, delta : float
        Privacy budget of the whole fit; ``epsilon=None`` is the non-private
        reference (no noise, no ledger).
    participation : float
        Per-round client participation ρ (never lowers the noise).
    n_clients : int
        Clients for an IID split when the data has no natural clients.
    secure_aggregation : bool
        Sum replies through the masking shim (default) or plain fixed point.
    split_features : {"columns", "uniform"}
        How random splits pick a feature: each schema column equally likely
        (shared among its one-hot levels; needs a dataset with a schema) or
        each encoded feature equally likely.
    seed : int
        Run seed (trees, sampling, noise).
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
        n_clients: int = 5,
        secure_aggregation: bool = True,
        split_features: str = "columns",
        seed: int = 0,
    ) -> None:
        self.n_rounds = n_rounds
        self.depth = depth
        self.learning_rate = learning_rate
        self.sampling_rate = sampling_rate
        self.reg_lambda = reg_lambda
        self.epsilon = epsilon
        self.delta = delta
        self.participation = participation
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.split_features = split_features
        self.seed = seed

    def _config(self) -> BoostingConfig:
        return BoostingConfig(
            n_rounds=self.n_rounds,
            depth=self.depth,
            learning_rate=self.learning_rate,
            sampling_rate=self.sampling_rate,
            reg_lambda=self.reg_lambda,
            epsilon=self.epsilon,
            delta=self.delta,
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
        X, yy, partition = federated_training_data(data, y, partition, self.n_clients, part)
        runtime = InProcessRuntime(
            clients=make_clients(X, yy, partition),
            handler=BoostingClient(),
            seed=self.seed,
            participation=self.participation,
            secure_aggregation=self.secure_aggregation,
        )
        widths = data.schema.column_widths if isinstance(data, TabularDataset) else None
        weights = split_feature_weights(self.split_features, widths)
        strategy = DPBoostingStrategy(self._config(), feature_weights=weights)
        self._run(runtime, strategy, self.epsilon, self.delta)
        self.n_features_in_ = X.shape[1]
        return self


class DPSGDClassifier(_Estimator):
    """DP-SGD logistic regression or one-hidden-layer MLP, federated (benchmark paper §3.5).

    Clients return clipped per-example gradient sums of their Poisson(q)
    samples; the server adds Gaussian noise to the securely aggregated sum,
    divides by the expected batch q·n (n public) and takes an SGD step.

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
        Per-step client participation ρ (never lowers the noise).
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
    seed : int
        Run seed (initialisation, sampling, noise).
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
        n_clients: int = 5,
        secure_aggregation: bool = True,
        backend: str = "fast",
        standardise: bool = True,
        module: Any = None,
        seed: int = 0,
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
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.backend = backend
        self.standardise = standardise
        self.module = module
        self.seed = seed

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
        X, yy, partition = federated_training_data(data, y, partition, self.n_clients, part)
        custom = None
        if self.module is not None:
            from fedpriv.models.opacus_backend import TorchSpec

            custom = TorchSpec(self.module)
        runtime = InProcessRuntime(
            clients=make_clients(X, yy, partition),
            handler=DPSGDClient(module=self.module),
            seed=self.seed,
            participation=self.participation,
            secure_aggregation=self.secure_aggregation,
        )
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
        self._run(runtime, strategy, self.epsilon, self.delta)
        self.n_features_in_ = X.shape[1]
        return self


class LumberjackClassifier(_Estimator):
    """Lumberjack DP random forest, federated (Lebeda et al.; ``strategies/lumberjack.py``).

    Parameters
    ----------
    n_trees, max_depth : int
        k trees grown with random splits to depth d (paper: 30, 100).
    epsilon, delta : float
        Budget of the whole forest (paper δ = 1e-6); ``epsilon=None`` is the
        non-private reference (every non-empty node splits, majority leaves).
    structure_fraction : float
        Share ε₁/ε (and δ₁/δ) of the sparse-threshold structure (paper 0.75).
    leaf_mechanism : {"exponential", "gaussian"}
        Majority vote by the exponential mechanism, or noisy class proportions.
    two_sided : bool
        Algorithm 3 instead of Algorithm 2.
    n_clients, secure_aggregation, seed :
        As for the other estimators.
    """

    def __init__(
        self,
        *,
        n_trees: int = 30,
        max_depth: int = 100,
        epsilon: float | None = 1.0,
        delta: float = 1e-6,
        structure_fraction: float = 0.75,
        leaf_mechanism: str = "exponential",
        two_sided: bool = False,
        n_clients: int = 5,
        secure_aggregation: bool = False,
        seed: int = 0,
    ) -> None:
        self.n_trees = n_trees
        self.max_depth = max_depth
        self.epsilon = epsilon
        self.delta = delta
        self.structure_fraction = structure_fraction
        self.leaf_mechanism = leaf_mechanism
        self.two_sided = two_sided
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.seed = seed

    def fit(
        self,
        data: TabularDataset,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
    ) -> LumberjackClassifier:
        """Train on ``part`` of a dataset with a schema (it says which features are numeric)."""
        from fedpriv.models.lumberjack import FeatureSpace
        from strategies.lumberjack import LumberjackConfig, LumberjackStrategy

        if not isinstance(data, TabularDataset):
            raise TypeError("Lumberjack needs a TabularDataset: its schema is the feature space")
        X, yy, partition = federated_training_data(data, y, partition, self.n_clients, part)
        config = LumberjackConfig(
            n_trees=self.n_trees,
            max_depth=self.max_depth,
            epsilon=self.epsilon,
            delta=self.delta,
            structure_fraction=self.structure_fraction,
            two_sided=self.two_sided,
            leaf_mechanism=self.leaf_mechanism,
        )
        runtime = InProcessRuntime(
            clients=make_clients(X, yy, partition),
            handler=LumberjackClient(),
            seed=self.seed,
            secure_aggregation=self.secure_aggregation,
        )
        space = FeatureSpace(feature_space_numeric(data.schema))
        self._run(runtime, LumberjackStrategy(config, space=space), self.epsilon, self.delta)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)


class DPRandomForestClassifier(_Estimator):
    """Fully random DP forest with federated leaf aggregation (``strategies/random_forest.py``).

    Parameters
    ----------
    n_trees, depth : int
        k complete random trees of depth D.
    epsilon, delta : float
        Budget (``epsilon=None``: non-private majority leaves).
    mode : {"all", "disjoint"}
        Every tree sees all data (composition) or disjoint data (parallel).
    leaf_mechanism : {"exponential", "gaussian"}
    n_clients, secure_aggregation, seed :
        As for the other estimators.
    """

    def __init__(
        self,
        *,
        n_trees: int = 10,
        depth: int = 8,
        epsilon: float | None = 1.0,
        delta: float = 1e-6,
        mode: str = "all",
        leaf_mechanism: str = "exponential",
        n_clients: int = 5,
        secure_aggregation: bool = False,
        seed: int = 0,
    ) -> None:
        self.n_trees = n_trees
        self.depth = depth
        self.epsilon = epsilon
        self.delta = delta
        self.mode = mode
        self.leaf_mechanism = leaf_mechanism
        self.n_clients = n_clients
        self.secure_aggregation = secure_aggregation
        self.seed = seed

    def fit(
        self,
        data: TabularDataset,
        y: np.ndarray | None = None,
        *,
        partition: list[np.ndarray] | None = None,
        part: str = "train",
    ) -> DPRandomForestClassifier:
        """Train on ``part`` of a dataset with a schema."""
        from clients.random_forest import RandomForestClient
        from fedpriv.models.lumberjack import FeatureSpace
        from strategies.random_forest import RandomForestConfig, RandomForestStrategy

        if not isinstance(data, TabularDataset):
            raise TypeError("the random forest needs a TabularDataset: its schema is the space")
        X, yy, partition = federated_training_data(data, y, partition, self.n_clients, part)
        config = RandomForestConfig(
            n_trees=self.n_trees,
            depth=self.depth,
            epsilon=self.epsilon,
            delta=self.delta,
            mode=self.mode,
            leaf_mechanism=self.leaf_mechanism,
        )
        runtime = InProcessRuntime(
            clients=make_clients(X, yy, partition),
            handler=RandomForestClient(),
            seed=self.seed,
            secure_aggregation=self.secure_aggregation,
        )
        space = FeatureSpace(feature_space_numeric(data.schema))
        self._run(runtime, RandomForestStrategy(config, space=space), self.epsilon, self.delta)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)
