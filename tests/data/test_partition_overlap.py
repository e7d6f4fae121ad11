"""A partition that gives one row to two clients (or points outside the rows) is refused.

Such a row counts twice, doubling its record's contribution to every sum;
a negative index silently wraps to another row. Before, every entry point
accepted both without a word.
"""

import math

import numpy as np
import pytest
from fedpriv.server.estimator_base import federated_training_data
from fedpriv.server.estimators import DPBoostingClassifier
from hypothesis import given, settings
from hypothesis import strategies as st

import fedpriv.data.dataset as dataset_module
from fedpriv.data import TabularDataset, label_skew, load_synthetic
from fedpriv.errors import DataError
from fedpriv.federation.protocol import make_clients
from fedpriv.records import check_partition

N = 10
X = np.random.default_rng(0).random((N, 3))
Y = (np.arange(N) % 2).astype(float)
OVERLAP = [np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([6, 2, 9])]  # row 2: clients 0, 2
TWICE = [np.array([0, 1]), np.array([2, 3, 3])]  # row 3: client 1 twice
OUT = [np.array([0, 1]), np.array([2, N])]
NEGATIVE = [np.array([0, -1]), np.array([2, 3])]  # -1 would wrap to row N - 1


def test_check_partition_names_the_row_and_both_clients():
    with pytest.raises(DataError, match=r"row 2 is held by clients 0 and 2") as err:
        check_partition(OVERLAP, N)
    assert err.value.code == "overlapping_partition"
    with pytest.raises(DataError, match=r"row 3 is held by client 1 twice"):
        check_partition(TWICE, N)


@pytest.mark.parametrize(("parts", "bad"), [(OUT, N), (NEGATIVE, -1)])
def test_check_partition_refuses_indices_outside_the_rows(parts, bad):
    client = 1 if bad == N else 0
    with pytest.raises(DataError, match=rf"client {client}: row index {bad} is outside \[0, {N}\)"):
        check_partition(parts, N)


def test_check_partition_refuses_masks_and_fractions_and_passes_a_partition():
    with pytest.raises(DataError, match="1-D integer array") as err:
        check_partition([np.ones(N, dtype=bool)], N)
    assert err.value.code == "bad_partition"
    with pytest.raises(DataError, match="1-D integer array"):
        check_partition([np.array([0.0, 1.5])], N)
    parts = check_partition([[0, 3], np.array([], dtype=float), np.array([9, 1], np.int32)], N)
    assert [p.tolist() for p in parts] == [[0, 3], [], [9, 1]]
    assert all(p.dtype == np.int64 for p in parts)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 40),
    k=st.integers(2, 6),
    seed=st.integers(0, 2**16),
    dup_from=st.integers(0, 5),
    dup_to=st.integers(0, 5),
)
def test_any_duplicated_row_is_found_and_its_holders_named(n, k, seed, dup_from, dup_to):
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, k, size=n)
    parts = [np.flatnonzero(owner == c) for c in range(k)]
    check_partition(parts, n)  # a true partition passes
    row = int(rng.integers(0, n))
    src, dst = int(owner[row]), (dup_from + dup_to) % k
    parts[dst] = np.append(parts[dst], row)
    with pytest.raises(DataError) as err:
        check_partition(parts, n)
    message = str(err.value)
    assert f"row {row} is held by" in message
    lo, hi = sorted((src, dst))
    holders = f"client {src} twice" if src == dst else f"clients {lo} and {hi}"
    assert holders in message


@pytest.mark.parametrize("parts", [OVERLAP, TWICE, OUT, NEGATIVE])
def test_make_clients_refuses_a_bad_partition(parts):
    with pytest.raises(DataError):
        make_clients(X, Y, parts)


@pytest.mark.parametrize("parts", [OVERLAP, TWICE, OUT, NEGATIVE])
def test_training_data_and_fit_refuse_a_bad_partition(parts):
    with pytest.raises(DataError):
        federated_training_data(X, Y, parts, 3)
    with pytest.raises(DataError):
        DPBoostingClassifier(rounds=1, depth=2, epsilon=math.inf).fit(X, Y, partition=parts)


@pytest.fixture(scope="module")
def synthetic() -> TabularDataset:
    return load_synthetic(n=400)


def test_a_dataset_partition_is_checked_where_it_enters(synthetic, monkeypatch):
    n = synthetic.rows("train").size
    bad = [np.arange(0, n // 2), np.arange(n // 2 - 1, n)]  # row n//2 - 1 twice
    with pytest.raises(DataError, match=rf"row {n // 2 - 1} is held by clients 0 and 1"):
        federated_training_data(synthetic, None, bad, 2)
    with pytest.raises(DataError, match="is held by"):
        label_skew(synthetic.y[synthetic.rows("train")], bad)
    # The dataset's own partitioner output is checked too (here: a broken one).
    monkeypatch.setattr(dataset_module, "iid", lambda n, **kw: bad)
    with pytest.raises(DataError, match="is held by clients 0 and 1"):
        synthetic.client_partition(2)


def test_a_true_dataset_partition_still_goes_through(synthetic):
    parts = synthetic.client_partition(4)
    assert sorted(np.concatenate(parts).tolist()) == list(range(synthetic.rows("train").size))
    _, y, p_ = federated_training_data(synthetic, None, None, 4)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert [a.tolist() for a in p_] == [a.tolist() for a in parts]
