"""What the Flower apps let out besides the model: round times (client errors:
``tests/clients/test_error_sanitising.py``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fedpriv.server.app import communication_report
from fedpriv.server.grid_runtime import GridReport

from fedpriv.federation.runtime import Communication
from fedpriv.federation.settings import RunSettings


def _report():
    comm = Communication(3)
    comm.floats_uploaded[:] = [40, 40, 20]
    return GridReport(comm, round_seconds=[0.31, 0.52], empty_round_seconds=[0.1, 0.12])


def test_round_times_are_written_only_when_asked():
    # Round wall times include the clients' work on their rows: a timing release.
    quiet = communication_report(_report(), timings=False)
    assert not {"round_seconds", "mean_round_seconds", "median_round_seconds"} & set(quiet)
    assert quiet["floats_uploaded_per_client"] == [40, 40, 20]
    assert quiet["mean_empty_round_seconds"] == pytest.approx(0.11)  # pings touch no data
    timed = communication_report(_report(), timings=True)
    assert timed["round_seconds"] == [0.31, 0.52]
    assert timed["mean_round_seconds"] == pytest.approx(0.415)
    assert RunSettings().timings is False
    # The shipped run config leaves it at that default ("" = the code's default).
    config = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config["timings"] == ""
    assert RunSettings.from_run_config(config).timings is False
