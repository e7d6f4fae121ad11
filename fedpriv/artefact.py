"""A portable model file: released parameters, public schema and privacy card, no pickle.

Format (``fedpriv-model``, version 1): one ``.npz`` file (a zip of numpy
``.npy`` members, read with ``np.load(allow_pickle=False)``) holding

* ``model.<name>``: the model's ``to_arrays()`` (boolean and numeric dtypes only);
* ``__meta__``: a 0-d unicode array, one JSON document: ``format``,
  ``format_version``, ``method``, ``model_class`` (a registered method's
  model class, :func:`fedpriv.methods.model_classes`), ``fedpriv_version``,
  ``schema`` (the public schema as the tables
  :meth:`fedpriv.data.Schema.from_dict` reads, or ``null`` for bare arrays),
  ``schema_digest`` (:meth:`~fedpriv.data.Schema.digest`), ``settings`` (the
  public run settings), ``card`` (:class:`~fedpriv.privacy.card.PrivacyCard`),
  ``arrays`` (each member's dtype, shape and sha256) and ``extra`` (the
  writer's own JSON, e.g. an estimator's fitted state);
* ``__checksum__``: the sha256 of the JSON text.

The loader refuses, with an :class:`ArtefactError` naming the cause: a file
that is not a zip (a pickle is never unpickled), an object array, a JSON
document whose checksum or an array whose manifest entry does not match, an
unknown format or version, a model class that is no registered method's (the
loader imports nothing else; a class that moved is read under its new path,
:data:`MOVED_MODEL_CLASSES`), and a schema whose digest differs from the
stored one or from the caller's. The checksums catch corruption and
careless edits, not a forger (who can recompute them): sign the file for that.

Everything in the file is released or public: the parameters are the
learner's released values (every ``to_arrays`` holds released values only),
the schema and settings are public, the card is built from the ledger's
report. No secret key, no private count. The schema's tables and the card's
public values are built in :mod:`fedpriv.artefact_schema`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv import __version__
from fedpriv.artefact_schema import jsonable as _jsonable
from fedpriv.artefact_schema import public_values, schema_to_dict
from fedpriv.atomic import write_bytes_atomic
from fedpriv.data.schema import Schema, SchemaError
from fedpriv.methods import model_classes, resolve
from fedpriv.privacy.card import CardError, PrivacyCard, build_card

FORMAT = "fedpriv-model"
FORMAT_VERSION = 1
#: File name :func:`write_artefact` writes in a run's results folder.
ARTEFACT_NAME = "model.fedpriv.npz"
_META, _CHECKSUM, _PREFIX = "__meta__", "__checksum__", "model."
_ARRAY_KINDS = "biuf"

#: Model classes files of earlier versions name, mapped to where the class lives now.
MOVED_MODEL_CLASSES: dict[str, str] = {
    old: "fedpriv.models.random_forest:RandomForestModel"
    for old in (
        "strategies.random_forest:RandomForestModel",  # strategies/ as a top-level package
        "fedpriv.strategies.random_forest:RandomForestModel",
    )
}


class ArtefactError(ValueError):
    """A model file that cannot be written or is refused on load (the message says why)."""


@dataclass(frozen=True)
class Artefact:
    """A loaded model file: the model, its method, public schema, settings and card."""

    model: Any
    method: str
    schema: Schema | None
    card: PrivacyCard
    fedpriv_version: str
    settings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """The model's ``predict_proba`` on encoded rows (P(y = 1) for binary learners)."""
        return self.model.predict_proba(np.asarray(X, dtype=np.float64))

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.model.decision_function(np.asarray(X, dtype=np.float64))

    def encode(self, frame) -> np.ndarray:
        """Raw rows (a pandas DataFrame with the schema's columns) as encoded features.

        The schema's public bounds and domains, as at training (clipped values
        and unseen categories are handled as the schema declares).
        """
        from fedpriv.data.encode import LoadReport, encode_features
        from fedpriv.data.errors import DataError

        if self.schema is None:
            raise ArtefactError("this model was trained on bare arrays: it has no schema")
        absent = [c for c in self.schema.column_names if c not in frame.columns]
        if absent:
            raise DataError(f"missing column(s) {absent}", code="missing_column", source="predict")
        lines = np.arange(len(frame)) + 2
        X, _ = encode_features(
            frame, self.schema, source="predict", lines=lines, report=LoadReport(source="predict")
        )
        return X

    def predict_proba_frame(self, frame) -> np.ndarray:
        """:meth:`predict_proba` of raw rows (:meth:`encode`)."""
        return self.predict_proba(self.encode(frame))

    def explain(self) -> Any:
        """The model by the schema's column names: a GAM's terms in raw units, each bin
        with a bound on its noise from the card's events and the run's settings
        (:mod:`fedpriv.models.gam_noise`), or a tree model's split usage.

        Raises :class:`ArtefactError` for a model without an explanation (DP-SGD's).
        """
        if not hasattr(self.model, "explain"):
            raise ArtefactError(f"a {self.method} model has no term or split explanation")
        explanation = self.model.explain(self.schema)
        if self.card.private and hasattr(explanation, "noise_rule"):
            from fedpriv.models.gam_noise import with_noise_band

            events = [(e.label, e.spec) for e in self.card.events]
            explanation = with_noise_band(explanation, self.model, events, self.settings)
        return explanation


# -- writing -------------------------------------------------------------------
def _digest_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    return {
        "dtype": a.dtype.str,
        "shape": list(a.shape),
        "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
    }


def _class_path(model: Any) -> str:
    cls = type(model)
    path = f"{cls.__module__}:{cls.__qualname__}"
    allowed = model_classes()
    if path not in allowed:
        raise ArtefactError(
            f"model class {path} cannot be saved: it is no registered method's model; "
            f"allowed {sorted(allowed)}"
        )
    return path


def save_model(
    path: str | os.PathLike[str],
    *,
    model: Any,
    method: str,
    card: PrivacyCard,
    schema: Schema | None = None,
    settings: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` and its metadata to ``path`` (module docstring), atomically."""
    path = Path(path)
    arrays = {f"{_PREFIX}{k}": np.asarray(v) for k, v in model.to_arrays().items()}
    for name, a in arrays.items():
        if a.dtype.kind not in _ARRAY_KINDS:
            raise ArtefactError(f"array {name!r} has dtype {a.dtype}; allowed kinds {_ARRAY_KINDS}")
    digest = None if schema is None else schema.digest()
    if card.schema_digest != digest:
        raise ArtefactError(f"card schema_digest {card.schema_digest!r} != schema {digest!r}")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "method": method,
        "model_class": _class_path(model),
        "fedpriv_version": __version__,
        "schema": None if schema is None else schema_to_dict(schema),
        "schema_digest": digest,
        "settings": _jsonable(settings or {}),
        "card": card.to_dict(),
        "arrays": {k: _digest_array(a) for k, a in arrays.items()},
        "extra": _jsonable(extra or {}),
    }
    text = json.dumps(meta, sort_keys=True, allow_nan=False)
    buf = io.BytesIO()
    np.savez(buf, **arrays, **{_META: np.array(text), _CHECKSUM: np.array(_sha(text))})
    return write_bytes_atomic(path, buf.getvalue())  # a failed write leaves no partial file


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_artefact(
    out_dir: str | os.PathLike[str],
    *,
    model: Any,
    method: str,
    schema: Schema | None,
    settings_dict: dict[str, Any],
    ledger_report: Any,
    run_status: Any = None,
    record_bound: int | None = None,
    filename: str = ARTEFACT_NAME,
) -> Path:
    """The ServerApp's call: ``<out_dir>/model.fedpriv.npz`` with the run's privacy card.

    Parameters
    ----------
    settings_dict :
        The resolved run settings (``RunSettings.to_run_config()``: kebab- or
        snake-case keys; all public).
    ledger_report :
        ``PrivacyLedger.close()``'s dict or a ``PrivacyReport``; ``None`` (or
        ``{"epsilon": "inf"}``) for a non-private run.
    run_status :
        A :class:`~fedpriv.federation.status.RunStatus` or its value.
    record_bound :
        The public bound on training records the run declared (``max_records``).
    """
    settings = {str(k).replace("-", "_"): v for k, v in settings_dict.items()}
    card = build_card(
        ledger_report,
        method=method,
        participation=float(settings.get("participation", 1.0)),
        participation_accounting=_jsonable(settings.get("participation_accounting")),
        secure_aggregation=bool(settings.get("secure_aggregation", True)),
        secagg_threshold=settings.get("secagg_threshold", 0.5),
        schema_digest=None if schema is None else schema.digest(),
        public_values=public_values(schema, settings, method=method, record_bound=record_bound),
        run_status=None if run_status is None else _jsonable(run_status),
    )
    path = Path(out_dir) / filename
    return save_model(path, model=model, method=method, card=card, schema=schema, settings=settings)


# -- reading -------------------------------------------------------------------
def load_model(path: str | os.PathLike[str], *, schema: Schema | None = None) -> Artefact:
    """Read a model file, verifying it (module docstring); ``schema``: the schema the
    caller will encode rows with, refused unless its digest is the file's."""
    path = Path(path)
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            raise ArtefactError(
                f"{path}: not a fedpriv model file (an .npz zip); nothing was unpickled"
            )
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise ArtefactError(f"{path}: refused: {exc}") from None
    meta = _meta(path, arrays.pop(_META, None), arrays.pop(_CHECKSUM, None))
    _check_arrays(path, arrays, meta.get("arrays"))
    stored = meta.get("schema_digest")
    file_schema = None
    if meta.get("schema") is not None:
        try:
            file_schema = Schema.from_dict(meta["schema"])
        except SchemaError as exc:
            raise ArtefactError(f"{path}: its schema is invalid: {exc}") from None
        if file_schema.digest() != stored:
            raise ArtefactError(
                f"{path}: schema digest mismatch: the stored schema hashes to "
                f"{file_schema.digest()}, the file says {stored}"
            )
    if schema is not None and schema.digest() != stored:
        raise ArtefactError(
            f"{path}: schema digest mismatch: the model was trained on schema digest "
            f"{stored}, the given schema {schema.name!r} has {schema.digest()}"
        )
    try:
        card = PrivacyCard.from_dict(meta["card"])
    except CardError as exc:
        raise ArtefactError(f"{path}: {exc}") from None
    if card.schema_digest != stored or card.method != meta.get("method"):
        raise ArtefactError(f"{path}: the privacy card is not this model's (method/schema)")
    model_class = meta.get("model_class")
    if isinstance(model_class, str):
        model_class = MOVED_MODEL_CLASSES.get(model_class, model_class)
    allowed = model_classes()
    if model_class not in allowed:
        raise ArtefactError(
            f"{path}: model_class {model_class!r} is not allowed (no registered method's "
            f"model); allowed {sorted(allowed)}"
        )
    parts = {k[len(_PREFIX) :]: v for k, v in arrays.items()}
    try:
        model = resolve(model_class).from_arrays(parts)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ArtefactError(f"{path}: the arrays do not form a {model_class}: {exc}") from None
    return Artefact(
        model=model,
        method=meta["method"],
        schema=file_schema,
        card=card,
        fedpriv_version=meta.get("fedpriv_version", ""),
        settings=meta.get("settings", {}),
        extra=meta.get("extra", {}),
    )


def _meta(path: Path, raw: np.ndarray | None, checksum: np.ndarray | None) -> dict[str, Any]:
    if raw is None or checksum is None:
        raise ArtefactError(f"{path}: not a fedpriv model file (no {_META} or {_CHECKSUM})")
    if raw.dtype.kind != "U" or raw.ndim != 0 or checksum.dtype.kind != "U":
        raise ArtefactError(f"{path}: {_META} must be one unicode string")
    text = str(raw[()])
    if _sha(text) != str(checksum[()]):
        raise ArtefactError(
            f"{path}: the metadata's checksum does not match: the file was modified after it "
            "was written"
        )
    try:
        meta = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ArtefactError(f"{path}: the metadata is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ArtefactError(f"{path}: format must be {FORMAT!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ArtefactError(
            f"{path}: format_version must be {FORMAT_VERSION}; got {meta.get('format_version')!r}"
        )
    return meta


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_arrays(path: Path, arrays: dict[str, np.ndarray], manifest: Any) -> None:
    if not isinstance(manifest, dict) or set(manifest) != set(arrays):
        listed = sorted(manifest) if isinstance(manifest, dict) else manifest
        raise ArtefactError(f"{path}: arrays {sorted(arrays)} do not match the manifest {listed}")
    for name, a in arrays.items():
        if a.dtype.kind not in _ARRAY_KINDS:
            raise ArtefactError(f"{path}: array {name!r} has dtype {a.dtype}")
        if _digest_array(a) != manifest[name]:
            raise ArtefactError(f"{path}: array {name!r} does not match its manifest entry")
