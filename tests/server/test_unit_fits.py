"""Unit-level fits in process: a unit's records past m never reach a reply, units are
sampled whole, a unit spanning clients is refused, and every method's plan is one a node
with units admits (its own accountant, every sensitivity a unit's)."""

from unittest import mock

import numpy as np
import pandas as pd
import pytest
from fedpriv.experiments.audit.runs import recording
from fedpriv.server import estimator_base
from fedpriv.server.training_data import unit_partition

from fedpriv.data import DataError, Schema, load_csv_whole
from fedpriv.data.schema import CategoricalColumn, NumericColumn, Target
from fedpriv.federation import runtime as runtime_module
from fedpriv.methods import get_method
from fedpriv.privacy.node_budget import NodeLedger, NodePolicy, NodeRefusal
from tests.keys import key_for

M = 2  # max_records_per_unit
BIG = "p0"  # the unit with many records, held by hospital h0


def _schema(m: int = M) -> Schema:
    return Schema(
        name="ward",
        columns=(
            NumericColumn(name="x", lo=0, hi=1),
            CategoricalColumn(name="c", categories=("a", "b")),
        ),
        target=Target(column="y", labels=("0", "1"), positive=("1",)),
        client_column="hosp",
        unit_column="pid",
        max_records_per_unit=m,
        unit_scope="node",
    )


def _rows(big: int = 10) -> pd.DataFrame:
    """Units of one or two records in three hospitals, and unit p0 of ``big`` records."""
    rng = np.random.default_rng(0)
    rows = []
    for p in range(90):
        for _ in range(1 + p % 2):
            x = float(rng.random())
            rows.append((f"p{p + 1}", f"h{p % 3}", x, "ab"[p % 2], int(rng.random() < x)))
    for i in range(big):
        rows.append((BIG, "h0", 0.05 * i, "ab"[i % 2], i % 2))
    frame = pd.DataFrame(rows, columns=["pid", "hosp", "x", "c", "y"])
    return frame.sample(frac=1.0, random_state=1).reset_index(drop=True)  # units interleaved


def _dataset(tmp_path, frame: pd.DataFrame, m: int = M, name: str = "ward.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return load_csv_whole(path, _schema(m), use_cache=False)


class _Seen:
    """The in-process runtime with a recording handler: each round's exact replies, and
    the rows (with their units) every client answered from."""

    def __init__(self, node_m: int | None = None):
        self.replies, self.datas, self.node_m = [], [], node_m

    def patch(self):
        seen = self

        class Recorded(runtime_module.InProcessRuntime):
            def __init__(self, *args, **kwargs):
                seen.datas = list(kwargs["clients"])
                kwargs["handler"] = seen.handler = recording(kwargs["handler"])
                if seen.node_m is not None:
                    kwargs["node_ledgers"] = [
                        NodeLedger(NodePolicy(), unit_records=seen.node_m) for _ in seen.datas
                    ]
                super().__init__(*args, **kwargs)

        return mock.patch.object(estimator_base, "InProcessRuntime", Recorded)


def _fit(method, data, *, node_m=None, **kw):
    seen = _Seen(node_m)
    cls = get_method(method).estimator_class
    args = dict(epsilon=2.0, num_clients=3, max_records=400, seed=3, secret_key=key_for(11))
    with seen.patch():
        est = cls(**{**args, **kw}).fit(data)
    return est, seen


CASES = {
    "dp_gam": dict(rounds=3),
    "logistic": dict(rounds=4, sampling_rate=0.5),  # unit sampling at q < 1
    "boosting": dict(rounds=3, depth=2, sampling_rate=0.5),
}


@pytest.mark.parametrize("method", list(CASES))
def test_a_units_records_past_m_never_reach_a_reply(tmp_path, method):
    frame = _rows()
    ds = _dataset(tmp_path, frame)
    # Which of p0's records client 0's key keeps (exactly what the fit draws).
    parts = ds.client_partition(3)
    kept, _ = unit_partition(ds, parts, "train", key_for(11))
    in_big = frame["pid"].to_numpy() == BIG
    kept_rows = np.concatenate(kept)
    dropped = np.flatnonzero(in_big & ~np.isin(np.arange(len(frame)), kept_rows))
    assert in_big.sum() == 10 and dropped.size == 10 - M
    est, seen = _fit(method, ds, **CASES[method])
    # Every client answered from exactly min(size, m) records of each of its units.
    for data in seen.datas:
        sizes = np.bincount(data.units)
        assert sizes.max() == M and sizes.min() >= 1
    assert est.privacy_report_.unit == f"pid, at most {M} records"
    # D' = D without p0's dropped records: the same replies, round by round, bit for bit.
    _, twin = _fit(method, _dataset(tmp_path, frame.drop(index=dropped), name="d2.csv"),
                   **CASES[method])  # fmt: skip
    assert len(seen.handler.replies) == len(twin.handler.replies) > 0
    for mine, theirs in zip(seen.handler.replies, twin.handler.replies, strict=True):
        assert mine.keys() == theirs.keys()
        for k in mine:
            np.testing.assert_array_equal(mine[k], theirs[k])
    np.testing.assert_array_equal(seen.datas[0].X, twin.datas[0].X)
    # Dropping one of the *kept* records instead changes the rows client 0 answers from.
    one_kept = np.flatnonzero(in_big & np.isin(np.arange(len(frame)), kept_rows))[0]
    _, other = _fit(method, _dataset(tmp_path, frame.drop(index=one_kept), name="d3.csv"),
                    **CASES[method])  # fmt: skip
    assert other.datas[0].n == seen.datas[0].n and not np.array_equal(
        other.datas[0].X, seen.datas[0].X
    )


def test_a_unit_spanning_two_hospitals_is_refused_before_any_release(tmp_path):
    frame = _rows()
    frame.loc[frame.index[frame["pid"] == "p4"][0], "hosp"] = "h2"  # p4's two records split
    frame.loc[frame.index[frame["pid"] == "p4"][1], "hosp"] = "h1"
    ds = _dataset(tmp_path, frame)
    with pytest.raises(DataError, match="held by clients 1 and 2") as err:
        _fit("dp_gam", ds, rounds=2)
    assert (err.value.code, err.value.column) == ("unit_spans_clients", "pid")


#: Every method's plan, admitted by nodes that account a unit of m = 3 records.
PLANS = {
    "boosting": dict(rounds=2, depth=2),
    "logistic": dict(rounds=5),
    "mlp": dict(rounds=5, hidden=4),
    "dp_gam": dict(rounds=3),
    "bdpe": dict(trees=1, depth=2),
    "lumberjack": dict(trees=2, depth=4),
    "random_forest": dict(trees=2, depth=2, leaf_mechanism="exponential"),
}


@pytest.mark.parametrize("method", list(PLANS))
def test_every_methods_plan_is_admitted_by_nodes_accounting_units(tmp_path, method):
    ds = _dataset(tmp_path, _rows(), m=3)
    est, _ = _fit(method, ds, node_m=3, **PLANS[method])
    assert est.privacy_report_.epsilon <= 2.0
    assert est.privacy_report_.unit == "pid, at most 3 records"


@pytest.mark.parametrize("method", ["boosting", "dp_gam", "bdpe", "random_forest", "lumberjack"])
def test_a_plan_calibrated_per_record_is_refused_by_nodes_holding_units(tmp_path, method):
    # The strategies see m = 1 (record-level sensitivity); the nodes' own m is 3.
    ds = _dataset(tmp_path, _rows(), m=1)
    with pytest.raises(NodeRefusal, match="refused"):
        _fit(method, ds, node_m=3, **PLANS[method])
