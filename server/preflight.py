"""What a launcher checks before it starts any process: files, K, the noise plan.

A Flower run that fails on a missing file or a wrong node count fails minutes
after its federation came up, in another process's log. The launchers
(:func:`fedpriv.server.launch.resolve_run`, :func:`fedpriv.server.deploy.node_files`) call these
first; each failure is one :class:`~fedpriv.federation.settings.SettingError`
naming the key, the file and what to do (exit 2, nothing started):

* :func:`check_data_file`: every file a node or the ServerApp will open (``--data``,
  ``--eval-data``, run-config ``csv``, ``eval-path``) exists, is a file, can be
  read and is what its name says (delimited text, or Parquet by suffix);
* :func:`file_clients`: a simulation on one CSV runs one node per value of the
  schema's client column, the file's own K (an in-process fit uses the same);
  a ``num-clients`` that contradicts it is refused; :func:`corpus_clients`: on a
  bundled corpus the default K moves into the corpus's range, as in process;
* :func:`check_plan`: a noise calibration no plan can certify.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpriv.data import DataError, SchemaError
from fedpriv.data.corpora import LOADERS, client_counts
from fedpriv.data.node import csv_client_names, run_schema
from fedpriv.data.schema import Schema
from fedpriv.data.table import check_file, check_text_file
from fedpriv.federation.settings import MIN_CLIENTS, RunSettings, SettingError


def check_data_file(path: str | Path, key: str, *, encoding: str = "utf-8") -> Path:
    """Refuse a file a process of the run would fail to open; returns it, absolute.

    CSV: :func:`fedpriv.data.table.check_text_file` (there, a folder, text not
    binary; ``encoding``: the schema's, whose wide codecs hold NUL bytes); a
    ``.parquet`` file: there and a file. Either is opened once, so a file this
    user may not read is refused too. Raises :class:`SettingError` naming ``key``.
    """
    p = Path(path).expanduser()
    try:
        if p.suffix == ".parquet":
            check_file(p, kind="Parquet")
            with open(p, "rb") as fh:
                fh.read(1)
        else:
            check_text_file(p, encoding=encoding)
    except DataError as exc:
        raise SettingError(f"{key}: {exc}") from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SettingError(
            f"{key}: {p}: cannot be read ({why}): give a file this user may read"
        ) from None
    return p.resolve()


def _schema(settings: RunSettings) -> Schema:
    try:
        return run_schema(settings.schema, settings.dataset)
    except (DataError, SchemaError) as exc:
        raise SettingError(str(exc)) from None


def check_run_files(settings: RunSettings) -> None:
    """Check the files the run config names: ``csv`` (every node cuts its rows from
    it) and ``eval-path`` (the ServerApp reads it only after training)."""
    for key, path in (("csv", settings.csv), ("eval-path", settings.eval_path)):
        if path:
            check_data_file(path, key, encoding=_schema(settings).encoding)


def file_clients(settings: RunSettings, *, given: Any = None) -> int | None:
    """K of a simulation on one CSV (run-config ``csv``): the number of values of its
    schema's client column, ``None`` when the schema names none (then ``num-clients``
    splits the file IID). ``given``: the user's ``num-clients`` (``None``: unset),
    which must then equal it. The file is checked first (:func:`check_data_file`)."""
    schema = _schema(settings)
    check_data_file(settings.csv, "csv", encoding=schema.encoding)
    if schema.client_column is None:
        return None
    try:
        k = len(csv_client_names(settings.csv, schema, split_seed=settings.split_seed))
    except (DataError, SchemaError) as exc:
        raise SettingError(str(exc)) from None
    where = f"csv {settings.csv}'s client column {schema.client_column!r}"
    if k < MIN_CLIENTS:
        raise SettingError(
            f"{where} names {k} client{'' if k == 1 else 's'}; a federation needs at least "
            f"{MIN_CLIENTS} (secure aggregation): give a file of several clients, or a schema "
            "without client_column (an IID split into num-clients)"
        )
    if given is not None and given != k:
        raise SettingError(
            f"num-clients must equal the {k} clients of {where} (one node per client; "
            f"leave num-clients unset); got {given!r}"
        )
    return k


def corpus_clients(config: Mapping[str, Any]) -> int | str:
    """The default K of a run on a bundled corpus: ``RunSettings.num_clients`` moved
    into the corpus's public range (Heart: its 4 hospitals), as an in-process fit does;
    ``""`` (the default, left to the settings' own checks) for any other source."""
    dataset = config.get("dataset") or RunSettings.dataset
    if config.get("schema") not in (None, "", dataset) or dataset not in LOADERS:
        return ""
    lo, hi = client_counts(dataset)
    return min(max(RunSettings.num_clients, lo), hi or RunSettings.num_clients)


#: The calibration's names of a run's keys, for its errors in run-config terms.
_CALIBRATION_KEYS = {
    "target_epsilon": "epsilon",
    "target_delta": "delta",
    "sampling_probability": "sampling-rate",
}


def check_plan(settings: RunSettings) -> None:
    """Calibrate a Gaussian-rounds method's noise now, so that a plan no noise can
    certify (ε too large for the PLD's bounded size, q or δ too small) is refused
    before any process starts, not after the federation came up. Calibrations are
    cached: the ServerApp's own is then free. Other methods calibrate at start."""
    if not settings.private or settings.method_record.family != "gaussian-rounds":
        return
    from fedpriv.privacy.participation import calibrate_participation_noise_multiplier

    cfg: Any = settings.config
    # A plugin's config may leave the accounting mode out: the calibration's default.
    mode = getattr(cfg, "participation_accounting", None)
    try:
        calibrate_participation_noise_multiplier(
            target_epsilon=settings.epsilon,
            target_delta=settings.delta,
            sampling_probability=cfg.sampling_rate,
            participation=settings.participation,
            steps=cfg.rounds,
            **({} if mode is None else {"accounting": mode}),
        )
    except ValueError as exc:
        text = str(exc)
        for theirs, ours in _CALIBRATION_KEYS.items():
            text = text.replace(theirs, ours)
        raise SettingError(text) from None
