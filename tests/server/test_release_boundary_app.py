"""What the Flower apps let out besides the model: round times, client error messages."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from clients.app import answer_quietly
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import Communication
from fedpriv.federation.settings import RunSettings
from server.app import communication_report
from server.grid_runtime import GridReport


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
    config = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config["timings"] is False


class _Quoting:
    method = "boosting"

    def answer(self, query, data, sample, state, key=None):
        raise ValueError(f"labels must lie in [0, 2); got {data.y.min():g}..{data.y.max():g}")


def test_a_failing_handler_reaches_the_server_without_its_message():
    data = ClientData(client_id=0, X=np.zeros((2, 1)), y=np.array([0.0, 7.0]))
    query = Query(round=0, method="boosting", sampling_rate=1.0, reply_length=1, record_bound=1)
    with pytest.raises(RuntimeError) as info:
        answer_quietly(_Quoting(), query, data, np.arange(2), {}, None)
    assert str(info.value) == "boosting handler failed (ValueError)"
    assert info.value.__cause__ is None and info.value.__suppress_context__
