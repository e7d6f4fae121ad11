"""The ``--track`` options of ``fedpriv run`` (click), apart from :mod:`fedpriv.server.tracking`
so that the command's module imports nothing of MLflow's until a run is tracked."""

from __future__ import annotations

import click

#: ``--track`` values (:data:`fedpriv.server.tracking.TRACKERS`).
TRACKERS = ("mlflow",)

_URI_HELP = "MLflow tracking URI [default: $MLFLOW_TRACKING_URI, else ./mlruns]."
_TRACK_HELP = (
    "Log the run (settings, ε per round, metrics, model file and its privacy card) to MLflow."
)


def track_options(f):
    """``--track mlflow`` and ``--track-uri URI`` on a click command."""
    f = click.option("--track-uri", default=None, help=_URI_HELP)(f)
    return click.option("--track", type=click.Choice(TRACKERS), default=None, help=_TRACK_HELP)(f)
