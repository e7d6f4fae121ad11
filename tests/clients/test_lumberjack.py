"""The Lumberjack client's ``answer_many``: every row is the client's own ``answer``, bit for
bit, and the walk state carries over the stages as each client's own does."""

import numpy as np
import pytest
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation.protocol import ClientData
from fedpriv.models.lumberjack import FeatureSpace
from tests.clients.batching import (
    SIZES,
    assert_paths_agree,
    begun,
    drive,
    mixed_rows,
    split,
)

NUMERIC = np.array([True, True, True, False])


def _data(n: int, n_classes: int, seed: int):
    return mixed_rows(n, n_classes, seed, NUMERIC)


def _strategy(n_records: int, n_classes: int = 2, recalibrate: float = 0.2):
    # Depth 14 in stages of 10 levels: two structure stages, then the leaves.
    config = LumberjackConfig(trees=3, depth=14, recalibrate_share=recalibrate)
    return LumberjackStrategy(config, space=FeatureSpace(NUMERIC), n_records=max(n_records, 1),
                              n_classes=n_classes)  # fmt: skip


@pytest.mark.parametrize("n_classes", [2, 3])
@settings(max_examples=10, deadline=None)
@given(sizes=SIZES, seed=st.integers(0, 2**31), epsilon=st.sampled_from([None, 2.0]))
def test_answer_many_rows_are_each_clients_answer(n_classes, sizes, seed, epsilon):
    clients = split(*_data(sum(sizes), n_classes, seed), sizes)
    recalibrate = 0.0 if epsilon is None else 0.2
    phases = drive(_strategy(sum(sizes), n_classes, recalibrate), LumberjackClient(), clients,
                   epsilon=epsilon, seed=seed)  # fmt: skip
    assert phases[:3] == ["stage", "stage", "leaves"] and len(phases) == 3 + (recalibrate > 0)


def test_the_comparison_sees_one_moved_row():
    X, y = _data(300, 2, 1)
    clients = split(X, y, (100, 200))
    X1 = clients[1].X.copy()
    X1[5] = 1.0 - X1[5]
    twin = [clients[0], ClientData(client_id=8, X=X1, y=clients[1].y)]
    with pytest.raises(AssertionError, match="client 1"):
        drive(_strategy(300), LumberjackClient(), clients, epsilon=2.0, answered=twin)


def test_a_client_that_missed_a_stage_is_refused_as_its_own_answer_refuses():
    X, y = _data(200, 2, 2)
    clients = split(X, y, (80, 0, 120))
    every = [np.arange(c.n) for c in clients]
    unasked = np.zeros(0, dtype=np.int64)
    strategy = begun(_strategy(200), NUMERIC.size)
    first = strategy.next_query()
    shared: dict = {}
    rows = LumberjackClient().answer_many(first, clients, [*every[:2], unasked], shared)
    np.testing.assert_array_equal(rows[2], 0.0)  # client 2 sat the first stage out
    assert shared["walked"].tolist() == [0, 0, -1]
    strategy.update(first, rows.sum(axis=0))
    second = strategy.next_query()
    missing = "round 1: the client's walk state is missing"
    with pytest.raises(ValueError, match=missing):
        LumberjackClient().answer_many(second, clients, every, dict(shared))
    with pytest.raises(ValueError, match=missing):
        LumberjackClient().answer(second, clients[2], every[2], {})
    # Unasked again, it keeps its (empty) walk; the others walk on.
    rows = LumberjackClient().answer_many(second, clients, [*every[:2], unasked], shared)
    np.testing.assert_array_equal(rows[2], 0.0)
    assert shared["walked"].tolist() == [1, 1, -1] and rows[0].sum() > 0


def test_a_fit_all_at_once_equals_the_per_client_fit():
    X, y = _data(600, 3, 3)
    clients = split(X, y, (200, 0, 150, 250))
    ref = assert_paths_agree(lambda: _strategy(600, 3), LumberjackClient, clients)
    assert ref["leaf_scores"].sum() > 0 and ref["tree_sizes"].sum() > 3
