"""``--track mlflow``: a finished run's folder logged to MLflow (the optional ``track`` extra).

:func:`log_run` reads the folder as ``fedpriv report`` does
(:mod:`fedpriv.server.run_files`) and logs, through MLflow's own client
(``mlflow.tracking.MlflowClient``, no global state):

* params: the run configuration (``config.json``, or an in-process run's
  ``privacy.json`` ``run.config``);
* tags: method, dataset, status, whether ε is certified, the folder;
* metrics: ``epsilon`` (the certified figure), ``epsilon_pld``, ``epsilon_rdp``,
  ``delta``; ``epsilon_spent`` at every round (step = round, re-accounted from the
  journal: :func:`~fedpriv.server.run_files.epsilon_by_round`); the metrics of the
  public evaluation (``metrics.json``, or the in-process run's AUC and Brier); rounds
  released and aborted;
* artefacts: the model file, its privacy card (JSON and Markdown), ``privacy.json``
  and the folder's other JSON files, and ``report.html`` when the folder has one.

All of it is released or public, as the folder is. The store: ``uri``, else
``$MLFLOW_TRACKING_URI``, else a local one in ``./mlruns`` (a SQLite file
``mlruns/mlflow.db`` and artefacts under ``mlruns/artifacts``: MLflow 3 refuses new
plain-file stores). ``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db`` shows it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from fedpriv.server.run_files import FILES, as_float, epsilon_by_round, journal_events, read_run
from fedpriv.server.tracking_options import TRACKERS

from fedpriv import logs

log = logs.get_logger(__name__)

#: The experiment runs are logged under (unless the caller names another).
EXPERIMENT = "fedpriv"
#: MLflow's limit on one param value.
_PARAM_MAX = 6000


def require(track: str | None) -> None:
    """Refuse ``--track`` before any work when its package is missing (a setting error:
    one line, exit code 2)."""
    if track is None:
        return
    from fedpriv.federation.settings import SettingError

    if track not in TRACKERS:
        raise SettingError(f"--track must be one of {list(TRACKERS)}; got {track!r}")
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise SettingError(
            "--track mlflow needs MLflow: pip install 'fedpriv[track]' (or pip install mlflow)"
        ) from None


def add_arguments(ap) -> None:
    """The launchers' ``--track`` and ``--track-uri`` (argparse)."""
    ap.add_argument("--track", choices=TRACKERS, default=None,
                    help="log the finished run (settings, ε per round, metrics, model file "
                    "and privacy card) to MLflow")  # fmt: skip
    ap.add_argument("--track-uri", default=None,
                    help="the MLflow tracking URI (default $MLFLOW_TRACKING_URI, else a local "
                    "store in ./mlruns)")  # fmt: skip


def launcher_args(track: str | None, uri: str | None) -> list[str]:
    """``fedpriv run --flower``'s ``--track`` options as the launcher takes them."""
    if track is None:
        return []
    return ["--track", track, *(["--track-uri", uri] if uri else [])]


def results_folder(track: str | None, out: Path | None) -> Path | None:
    """An in-process run's ``--out``: a new temporary folder when tracked without one."""
    if track is None or out is not None:
        return out
    return Path(tempfile.mkdtemp(prefix="fedpriv-run-"))


def track_folder(track: str | None, uri: str | None, run_dir: str | Path | None) -> str | None:
    """After a run: log its folder when ``track`` is set and the folder exists; returns
    the MLflow run id (``None``: nothing tracked)."""
    if track is None or run_dir is None or not Path(run_dir).is_dir():
        return None
    try:
        rid = log_run(run_dir, uri=uri)
    except Exception as exc:  # the run's own result stands; the store's failure is one line
        log.error("not tracked: MLflow refused the run: %s", exc)
        return None
    where = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()[0]
    log.info("tracked: MLflow run %s in %s", rid, where)
    return rid


def default_uri(root: Path | None = None) -> tuple[str, str | None]:
    """(tracking URI, artefact location for a new experiment): ``$MLFLOW_TRACKING_URI``
    as it is, else the local store in ``<root or cwd>/mlruns``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env, artefacts_beside(env)
    base = (root or Path.cwd()).resolve() / "mlruns"
    base.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{base / 'mlflow.db'}", (base / "artifacts").as_uri()


def artefacts_beside(uri: str) -> str | None:
    """A SQLite store's new experiments keep their artefacts beside the database
    (``<folder>/artifacts``), not in whatever folder the command ran from; the folder is
    made if absent."""
    if not uri.startswith("sqlite:///"):
        return None
    folder = Path(uri[len("sqlite:///") :]).parent
    folder.mkdir(parents=True, exist_ok=True)  # SQLite makes the file, not its folder
    return (folder / "artifacts").resolve().as_uri()


def _client(uri: str | None):
    require("mlflow")
    from mlflow.tracking import MlflowClient

    if uri is None:
        uri, location = default_uri()
    else:
        location = artefacts_beside(uri)
    return MlflowClient(tracking_uri=uri), location


def _experiment(client, name: str, location: str | None) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    return client.create_experiment(name, artifact_location=location)


def _param(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, dict | list) else str(v)
    return text[:_PARAM_MAX]


def _number(x: Any) -> float | None:
    """A JSON number, or a number written as text (``"0.9009"``), else ``None``."""
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return as_float(x)


def run_metrics(run) -> dict[str, float]:
    """The finished run's figures: privacy, public evaluation, rounds (finite only)."""
    p, out = run.privacy or {}, {}
    for key in ("epsilon", "epsilon_pld", "epsilon_rdp", "delta"):
        out[key] = as_float(p.get(key))
    m = run.metrics or {}
    if m.get("evaluated"):
        for key, value in m.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = float(value)
    summary = p.get("run") if isinstance(p.get("run"), dict) else {}
    for key in ("auc", "brier", "brier_base"):  # an in-process run's held-out scores
        if key in summary and key not in out:
            out[key] = _number(summary[key])
    for key in ("rounds_released", "rounds_aborted", "rounds_planned"):
        if isinstance((run.status or {}).get(key), int):
            out[key] = float(run.status[key])
    return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def log_run(run_dir: str | Path, *, uri: str | None = None, experiment: str = EXPERIMENT) -> str:
    """Log the run folder ``run_dir`` to MLflow (module docstring); returns the MLflow run id.

    Raises
    ------
    SettingError
        Without MLflow installed.
    """
    run = read_run(run_dir)
    client, location = _client(uri)
    exp = _experiment(client, experiment, location)
    config = run.config or {}
    name = f"{config.get('method', 'run')}-{run.path.resolve().name}"
    mlrun = client.create_run(exp, run_name=name)
    rid = mlrun.info.run_id
    p = run.privacy or {}
    try:
        for key, value in sorted(config.items()):
            client.log_param(rid, key, _param(value))
        tags = {"fedpriv.method": config.get("method", ""), "fedpriv.status": run.state,
                "fedpriv.dataset": config.get("dataset") or config.get("csv") or "",
                "fedpriv.certified": str(p.get("certified", "")), "fedpriv.kind": run.kind,
                "fedpriv.folder": str(run.path.resolve())}  # fmt: skip
        for key, value in tags.items():
            client.set_tag(rid, key, str(value))
        for key, value in run_metrics(run).items():
            client.log_metric(rid, key, value)
        delta = as_float(p.get("delta"))
        events = journal_events(p)
        if events and delta:
            for r, eps in epsilon_by_round(events, delta, max_points=10_000):
                client.log_metric(rid, "epsilon_spent", eps, step=r)
        _log_files(client, rid, run)
    except BaseException:
        client.set_terminated(rid, status="FAILED")
        raise
    client.set_terminated(rid, status="FINISHED" if run.state != "failed" else "FAILED")
    log.info("logged %s to MLflow run %s (experiment %r)", run.path, rid, experiment)
    return rid


def _log_files(client, rid: str, run) -> None:
    for name in (*FILES, "progress.jsonl", "report.html"):
        if (run.path / name).is_file():
            client.log_artifact(rid, str(run.path / name), artifact_path="run")
    if run.model_path is None:
        return
    from fedpriv.artefact import load_model

    client.log_artifact(rid, str(run.model_path), artifact_path="model")
    card = load_model(run.model_path).card
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "privacy_card.json").write_text(json.dumps(card.to_dict(), indent=1))
        (Path(tmp) / "privacy_card.md").write_text(card.to_markdown())
        for name in ("privacy_card.json", "privacy_card.md"):
            client.log_artifact(rid, str(Path(tmp) / name), artifact_path="model")
