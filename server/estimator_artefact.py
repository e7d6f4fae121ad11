"""An estimator's model file: ``est.save(path)`` and ``Estimator.load(path)``.

The file is a :mod:`fedpriv.artefact` model file (one ``.npz``, no pickle):
the released model, the public schema (when fitted on a
:class:`~fedpriv.data.TabularDataset`), the privacy card, and in its
``extra`` the estimator's public state: its class, its parameters (never
``secret_key`` or ``ledger``), ``classes_``, ``n_features_in_``, the fit's
privacy report (``privacy_report_``, rebuilt as a
:class:`~fedpriv.privacy.ledger.PrivacyReport`), its run status and the
fitted calibration values (``noise_multiplier_``; Lumberjack's
``calibration_`` and ``gate_``).

A loaded estimator predicts exactly as the saved one (``predict_proba`` bit
for bit). It is fitted but holds no ledger (``ledger_ is None``: the
ledger is the live account of its data, which a file does not carry) and no
traffic report; ``privacy_card_`` is the card. Refitting it draws a fresh
key, as any estimator without ``secret_key``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from enum import Enum
from pathlib import Path
from typing import Any

from fedpriv.artefact import Artefact, ArtefactError, load_model, save_model
from fedpriv.artefact_schema import public_values
from fedpriv.federation.secagg_common import SecAggConfig
from fedpriv.federation.status import RunStatus
from fedpriv.privacy.card import build_card, report_from_dict
from fedpriv.privacy.sparse_threshold import SparseThresholdCalibration
from fedpriv.records import public_label_set

#: Parameters never written: the key is secret, the ledger is a live account.
_NOT_SAVED = ("secret_key", "ledger", "module")


def _param(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def save_estimator(est: Any, path: str | os.PathLike[str]) -> Path:
    """Write fitted ``est`` to ``path`` (module docstring)."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(est)
    if getattr(est, "module", None) is not None:
        raise ValueError(
            "module: an estimator with a user's torch module cannot be saved as a model file "
            "(its architecture is code); save the module's state with torch instead"
        )
    params = {k: _param(v) for k, v in est.get_params(deep=False).items() if k not in _NOT_SAVED}
    context = getattr(est, "context_", None)
    schema = None if context is None else context.schema
    # The declared public bound on records per client, as the ServerApp's card states it;
    # undeclared, none: the number of rows the fit held is never written.
    record_bound = getattr(est, "max_records", None)
    report = est.privacy_report_
    status = getattr(est, "run_status_", None)
    settings = {**params, "secure_aggregation": est.secure_aggregation}
    ran = getattr(est, "config_", None)  # the fit's configuration, automatic sizes resolved
    if ran is not None:
        settings.update({f.name: _param(getattr(ran, f.name)) for f in dataclasses.fields(ran)})
    card = build_card(
        report,
        method=est.method,
        participation=est.participation,
        participation_accounting=params.get("participation_accounting"),
        secure_aggregation=bool(est.secure_aggregation),
        secagg_threshold=SecAggConfig().threshold_fraction,  # the in-process runtime's
        schema_digest=None if schema is None else schema.digest(),
        public_values=public_values(
            schema,
            settings,
            method=est.method,
            classes=est.classes_.tolist(),
            record_bound=record_bound,
        ),
        run_status=None if status is None else str(status.value),
    )
    calibration = getattr(est, "calibration_", None)
    extra = {
        "estimator": f"{type(est).__module__}:{type(est).__qualname__}",
        "params": params,
        "classes": est.classes_.tolist(),
        "n_features_in": int(est.n_features_in_),
        "noise_multiplier": est.noise_multiplier_,
        "privacy_report": None if report is None else report.to_dict(),
        "report_caveats": [] if report is None else list(report.caveats),
        "run_status": None if status is None else str(status.value),
        "calibration": None if calibration is None else dataclasses.asdict(calibration),
        "gate": getattr(est, "gate_", None),
    }
    return save_model(
        path,
        model=est.model_,
        method=est.method,
        card=card,
        schema=schema,
        settings=settings,
        extra=extra,
    )


def load_estimator(cls: type, path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """A fitted estimator from ``path``; ``cls`` must be its class or an ancestor."""
    from fedpriv.methods import get_method

    art: Artefact = load_model(path, **kwargs)
    extra = art.extra
    if "estimator" not in extra or "params" not in extra:
        raise ValueError(f"{path}: a model file, but not an estimator's (use fedpriv.artefact)")
    target = get_method(art.method).estimator_class
    if not issubclass(target, cls):
        raise TypeError(f"{path} holds a {target.__name__}, not a {cls.__name__}")
    est = target(**_params(target, extra["params"]))
    est.model_ = art.model
    est.classes_ = public_label_set(extra["classes"])
    est.n_features_in_ = int(extra["n_features_in"])
    nm = extra.get("noise_multiplier")
    est.noise_multiplier_ = None if nm is None else _float(nm)
    report = extra.get("privacy_report")
    caveats = tuple(extra.get("report_caveats", ()))
    try:
        est.privacy_report_ = None if report is None else report_from_dict(report, caveats)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtefactError(f"{path}: its privacy report cannot be rebuilt: {exc}") from None
    est.privacy_card_ = art.card
    est.ledger_ = None
    est.communication_ = None
    est.run_outcome_ = None
    status = extra.get("run_status")
    est.run_status_ = None if status is None else RunStatus(status)
    if "calibration" in extra and target.method == "lumberjack":
        cal = extra["calibration"]
        est.calibration_ = None if cal is None else SparseThresholdCalibration(**cal)
        est.gate_ = extra.get("gate")
    return est


def _float(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def _params(target: type, params: dict[str, Any]) -> dict[str, Any]:
    """The stored parameters, typed back (``inf`` as a float, lists of classes as stored)."""
    allowed = set(target().get_params(deep=False))
    out = {}
    for k, v in params.items():
        if k not in allowed:
            raise ValueError(f"stored parameter {k!r} is not a {target.__name__} parameter")
        out[k] = _float(v) if k in ("epsilon", "delta") and v is not None else v
    return out


__all__ = ["load_estimator", "save_estimator"]
