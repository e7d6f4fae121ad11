"""The random forest client's ``answer_many``: every row is the client's own ``answer``, bit
for bit; in disjoint mode each client's rows pick their trees from its own key."""

import numpy as np
import pytest
from fedpriv.clients.random_forest import RandomForestClient
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation.protocol import ClientData
from fedpriv.models.lumberjack import FeatureSpace
from tests.clients import batching
from tests.keys import key_for

NUMERIC = np.array([True, True, True, False])
MODES = ["all", "disjoint"]


def _data(n: int, n_classes: int, seed: int):
    return batching.mixed_rows(n, n_classes, seed, NUMERIC)


def _strategy(n_records: int, mode: str, n_classes: int = 2):
    return RandomForestStrategy(RandomForestConfig(trees=5, depth=3, mode=mode),
                                space=FeatureSpace(NUMERIC), n_records=max(n_records, 1),
                                n_classes=n_classes)  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n_classes", [2, 3])
@settings(max_examples=10, deadline=None)
@given(sizes=batching.SIZES, seed=st.integers(0, 2**31))
def test_answer_many_rows_are_each_clients_answer(mode, n_classes, sizes, seed):
    clients = batching.split(*_data(sum(sizes), n_classes, seed), sizes)
    unasked = seed % len(sizes)  # one client sits the round out (if it has rows)
    batching.drive(_strategy(sum(sizes), mode, n_classes), RandomForestClient(), clients, seed=seed,
          asked=lambda r, i: i != unasked or seed % 3 == 0)  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_the_comparison_sees_one_moved_row(mode):
    X, y = _data(200, 2, 1)
    clients = batching.split(X, y, (80, 120))
    X1 = clients[1].X.copy()
    X1[:, 0] = 1.0 - X1[:, 0]
    twin = [clients[0], ClientData(client_id=8, X=X1, y=clients[1].y)]
    with pytest.raises(AssertionError, match="client 1"):
        batching.drive(_strategy(200, mode), RandomForestClient(), clients, answered=twin)


def test_disjoint_trees_come_from_each_clients_own_key():
    X, y = _data(300, 2, 2)
    clients = batching.split(X, y, (150, 150))
    query = batching.begun(_strategy(300, "disjoint"), NUMERIC.size).next_query()
    every = [np.arange(c.n) for c in clients]
    keys = [key_for(1), key_for(2)]
    rows = RandomForestClient().answer_many(query, clients, every, {}, keys)
    swapped = RandomForestClient().answer_many(query, clients, every, {}, keys[::-1])
    for i in range(2):
        np.testing.assert_array_equal(
            rows[i], RandomForestClient().answer(query, clients[i], every[i], {}, keys[i])
        )
        assert not np.array_equal(rows[i], swapped[i])  # another key, other trees
        assert rows[i].sum() == clients[i].n  # each row in one tree
    with pytest.raises(ValueError, match="needs every client's secret key"):
        RandomForestClient().answer_many(query, clients, every, {})


@pytest.mark.parametrize("mode", MODES)
def test_a_fit_all_at_once_equals_the_per_client_fit(mode):
    X, y = _data(400, 3, 3)
    clients = batching.split(X, y, (150, 0, 100, 150))
    ref = batching.assert_paths_agree(lambda: _strategy(400, mode, 3), RandomForestClient, clients)
    assert np.abs(ref["leaf_scores"]).sum() > 0
