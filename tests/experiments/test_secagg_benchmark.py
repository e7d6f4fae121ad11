"""The secure-aggregation benchmark's smallest cells: each system's sum is the plain sum.

fedpriv's shim must give the plain ring sum bit for bit, Flower's SecAgg+ the plain
float sum within its quantisation (|S| steps of 2·8/2^22 per coordinate); a cell whose
sum is off is not a measurement, so the benchmark fails it (the twins below).
"""

import numpy as np
import pytest
from fedpriv.experiments import secagg_bench_fedpriv as fp
from fedpriv.experiments import secagg_bench_flower as fl
from fedpriv.experiments import secagg_benchmark as sb

K, L = 10, 64


@pytest.mark.parametrize("system", ["plain", "fedpriv", "flower"])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_the_smallest_cell_sums_to_the_plain_sum(system, dropout):
    row = sb.run_cell(sb.Cell(system=system, k=K, length=L, dropout=dropout))
    assert row["status"] == "ok"
    assert row["survivors"] == K - int(dropout * K)
    if system == "flower":  # within Flower's quantisation, and not trivially so
        step = fl.FlowerParams(num_shares=7, reconstruction_threshold=4).step
        assert row["tolerance"] == pytest.approx(row["survivors"] * step, rel=1e-3)
        assert 0 < row["max_abs_error"] <= row["tolerance"]
        assert (row["degree"], row["threshold"]) == (6, 4)  # fedpriv's k and t at K = 10
    else:
        assert row["max_abs_error"] == 0.0
    if system != "plain":
        assert row["round_up_bytes"] > 8 * L  # the masked vector and more
        assert row["round_client_cpu_s"] > 0 and row["round_server_cpu_s"] > 0


def _shifted(module, name: str, shift):
    """``module.name`` with ``shift(vectors, args)`` added to the total it returns."""
    real = getattr(module, name)

    def wrong(vectors, drop, *args):
        out = real(vectors, drop, *args)
        out["total"] = out["total"] + shift(vectors, args)
        return out

    return wrong


def test_a_wrong_fedpriv_sum_fails_the_cell(monkeypatch):
    one_tick = _shifted(fp, "run_fedpriv", lambda v, a: np.eye(1, L)[0] * 2.0**-32)
    monkeypatch.setattr(fp, "run_fedpriv", one_tick)
    with pytest.raises(sb.AggregateMismatch, match="fedpriv,10,64"):
        sb.run_cell(sb.Cell(system="fedpriv", k=K, length=L, dropout=0.1))


def test_a_flower_sum_beyond_its_quantisation_fails_the_cell(monkeypatch):
    # 2|S| quantisation steps: beyond the |S| steps its rounding can explain.
    beyond = _shifted(fl, "run_flower", lambda v, a: 2 * len(v) * a[0].step)
    monkeypatch.setattr(fl, "run_flower", beyond)
    with pytest.raises(sb.AggregateMismatch, match="flower,10,64"):
        sb.run_cell(sb.Cell(system="flower", k=K, length=L, dropout=0.0))


def test_a_dropout_that_loses_a_survivor_fails_the_cell(monkeypatch):
    real = fp.run_fedpriv

    def one_more_silent(vectors, drop, config=None):
        extra = next(u for u in range(K) if u not in drop)
        return real(vectors, [*drop, extra], config)

    monkeypatch.setattr(fp, "run_fedpriv", one_more_silent)
    with pytest.raises(sb.AggregateMismatch):
        sb.run_cell(sb.Cell(system="fedpriv", k=K, length=L, dropout=0.1))


def test_a_stopped_cell_skips_the_larger_cells_of_its_system():
    stop = sb.Cell(system="flower", k=100, length=64, dropout=0.0)
    assert stop.covers(sb.Cell(system="flower", k=1000, length=10_000, dropout=0.1))
    assert not stop.covers(sb.Cell(system="fedpriv", k=1000, length=10_000, dropout=0.1))
    assert not stop.covers(sb.Cell(system="flower", k=10, length=100_000, dropout=0.1))
    assert sb.Cell.of(stop.key) == stop
