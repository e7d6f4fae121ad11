"""scikit-learn estimators that run a method's strategy/client pair in process.

One class per registered method (:mod:`fedpriv.methods`). Its parameters are
derived, not written out: the method's settings (the fields of its
configuration dataclass, with the paper's defaults stated there), then the
run's own, named and defaulted as in the run config
(:class:`fedpriv.federation.settings.RunSettings`):

``epsilon``, ``delta``
    The budget of the whole fit, owned by the fit's ledger;
    ``epsilon=math.inf`` is the non-private reference (no noise, no ledger);
    ``delta=None`` is the method's paper δ.
``participation``
    Per-round client participation ρ.
``num_clients``
    Clients of an IID split when the data has no natural clients; at least 2
    (secure aggregation needs two parties).
``max_aborted_share``
    Largest share of rounds that may release nothing (``run_status_``:
    completed, degraded, or ``fit`` raises ``RunFailedError``).
``secure_aggregation``
    Sum replies through the masking shim (default) or plain fixed point.
``seed``
    Public seed of the public randomness (random trees, initial weights).
``classes``
    The public label set of array labels (sorted as ``classes_``; binary
    learners: two labels, the second positive); a dataset's is its schema's.
``secret_key``
    Key of the private randomness (noise, Poisson coins, participation).
    ``None``: fresh OS entropy at every fit. Pass one only to reproduce a
    fit; it is never logged or shown, and pickling drops it.
    ``SecretKey.from_public_seed(s)`` is a debug mode (``certified: false``).
    With ``noise="distributed"`` the report says ``certified: false`` in process
    whatever the key: every client key derives from the run's key
    (:data:`fedpriv.privacy.distributed.DERIVED_KEYS_CAVEAT`).
``max_records``
    The declared public bound on records per client, as a Flower run's
    ``max-records``: the codec's range and the public total n = clients ×
    ``max_records`` (a client holding more is refused, ``too_many_records``).
    ``None``: no exact count decides anything; a private fit first releases a
    Laplace record count through its ledger (1 % of ``epsilon``, the learner
    gets the rest; :mod:`fedpriv.privacy.record_count`) and uses its
    high-probability upper bound U as the per-client and total bound (on small
    data U can be several times n: declare the bound for utility). The
    non-private reference (``epsilon=math.inf``) uses the rows. Given, the fit
    equals the Flower run bit for bit.
``ledger``
    A :class:`fedpriv.privacy.PrivacyLedger` the caller owns, whose budget is
    the total for the rows: fits chain onto it (each in a child ledger with
    its own ``epsilon``/``delta``) and a fit that would pass it raises before
    any noise is drawn. ``None``: a fresh ledger per fit, whose report says
    it covers that fit only. ``clone`` shares it
    (:mod:`fedpriv.server.estimator_base`).

``fit`` takes a :class:`fedpriv.data.TabularDataset` (its training rows,
held by its natural clients or partitioned IID) or arrays ``X, y`` in the
public box [0, 1] (finite: a NaN or inf is refused, named by row and column;
values outside the box are counted in a warning), plus a partition, else an
IID split over ``num_clients``; trains through
:class:`fedpriv.federation.runtime.InProcessRuntime` and keeps the released
model (``model_``), the ledger and its report (``ledger_``,
``privacy_report_``), σ (``noise_multiplier_``), the traffic
(``communication_``) and the run's status (``run_status_``, ``run_outcome_``:
rounds planned, released, aborted). The scikit-learn contract, the tags and the
``check_estimator`` checks that do not apply to a DP learner are in
:mod:`fedpriv.server.estimator_base`.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier
from fedpriv.server.method_estimator import MethodEstimator

log = logging.getLogger(__name__)


class DPBoostingClassifier(MethodEstimator):
    """DP federated gradient boosting with random trees (benchmark paper §3.4).

    Settings: :class:`fedpriv.strategies.boosting.BoostingConfig`; run parameters:
    module docstring. Binary or C ≥ 3 classes (softmax leaves); ``predict_proba``'s
    columns follow ``classes_``.
    """

    method = "boosting"
    #: With C ≥ 3 classes ``decision_function`` gives the (n, C) softmax logits.
    _class_logits: ClassVar[bool] = True

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        """Binary: (1 − p, p); C ≥ 3 classes: the softmax, columns following ``classes_``."""
        p = self.model_.predict_proba(X)
        return p if p.ndim == 2 else np.column_stack([1.0 - p, p])


class DPGAMClassifier(MethodEstimator):
    """DP histogram boosting of one-column trees, federated (DP-EBM; Nori et al. 2021).

    Settings: :class:`fedpriv.strategies.gam.GAMConfig`; run parameters: module docstring.
    More than two ``classes``: a softmax GAM (:mod:`fedpriv.models.gam_softmax`);
    ``predict_proba`` has one column per class of ``classes_``, and
    ``decision_function`` the (n, C) logits.
    """

    method = "dp_gam"
    _class_logits: ClassVar[bool] = True

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        return self.model_.class_scores(X)


class BDPEClassifier(MethodEstimator):
    """bdpe_α: boosted DP ensembles of greedy decision trees, federated (Nock & Henecka).

    Settings: :class:`fedpriv.strategies.bdpe.BDPEConfig`; run parameters: module
    docstring. Two classes; pure-ε releases whose plan is calibrated to the run's
    (ε, δ) (:mod:`fedpriv.strategies.bdpe_plan`).
    ``decision_function`` is the ensemble's margin H = Σ β_t h_t, or its calibrated
    logit aH + b after the calibration round (``calibrate_share`` > 0, the default);
    ``predict_proba`` is σ of that logit, or ψ_Mat⁻¹(H) without calibration.
    """

    method = "bdpe"


class DPLogisticClassifier(MethodEstimator):
    """DP-SGD logistic regression, federated (benchmark paper §3.5).

    Settings: :class:`fedpriv.strategies.dpsgd.LogisticConfig`; run parameters: module
    docstring. ``module``: a user's torch module instead of the built-in model
    (``backend="opacus"`` only).
    """

    method = "logistic"
    extra_params: ClassVar[dict[str, Any]] = {"module": None}
    _class_logits: ClassVar[bool] = True

    def _context_extra(self) -> dict[str, Any]:
        if self.module is None:
            return {}
        from fedpriv.models.opacus_backend import TorchSpec

        return {"custom_spec": TorchSpec(self.module)}

    def _handler(self) -> Any:
        from fedpriv.clients.dpsgd import DPSGDClient

        return DPSGDClient(module=self.module)

    def _class_scores(self, X: np.ndarray) -> np.ndarray:
        """Two classes: (1 − p, p); K classes: the model's softmax, columns as ``classes_``."""
        p = self.model_.predict_proba(X)
        return p if p.ndim == 2 else np.column_stack([1.0 - p, p])


class DPMLPClassifier(DPLogisticClassifier):
    """DP-SGD one-hidden-layer MLP, federated (benchmark paper §3.5).

    Settings: :class:`fedpriv.strategies.dpsgd.MLPConfig`; otherwise as
    :class:`DPLogisticClassifier`.
    """

    method = "mlp"


__all__ = [
    "DPBoostingClassifier",
    "DPGAMClassifier",
    "DPLogisticClassifier",
    "DPMLPClassifier",
    "DPRandomForestClassifier",
    "LumberjackClassifier",
    "MethodEstimator",
]
