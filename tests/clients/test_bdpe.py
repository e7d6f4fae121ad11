"""The bdpe client's ``answer_many``: every row is the client's own ``answer``, bit for bit."""

import numpy as np
import pytest
from fedpriv.clients import bdpe as bdpe_client
from fedpriv.clients.bdpe import BDPEClient
from fedpriv.strategies.bdpe import BDPEConfig, BDPEStrategy
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation.protocol import ClientData
from tests.clients.batching import SIZES, assert_paths_agree, drive, split

NUMERIC = np.array([True, True, True, False])


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.random((n, NUMERIC.size))
    X[:, ~NUMERIC] = X[:, ~NUMERIC] < 0.4
    y = (rng.random(n) < 0.2 + 0.6 * X[:, 0]).astype(float)
    y[rng.random(n) < 0.05] = 7.0  # not a class: counted nowhere
    return X, y


def _strategy(n_records: int, depth: int = 3):
    config = BDPEConfig(trees=3, depth=depth, calibrate_share=0.1)
    return BDPEStrategy(config, numeric=NUMERIC, n_records=max(n_records, 1))


@settings(max_examples=15, deadline=None)
@given(sizes=SIZES, seed=st.integers(0, 2**31), epsilon=st.sampled_from([None, 1.0]))
def test_answer_many_rows_are_each_clients_answer(sizes, seed, epsilon):
    X, y = _data(sum(sizes), seed)
    clients = split(X, y, sizes)
    phases = drive(_strategy(sum(sizes)), BDPEClient(), clients, epsilon=epsilon, seed=seed,
                   drop_cache=seed % 2 == 1)  # fmt: skip
    assert phases == ["level"] * 9 + ["calibrate"]  # 3 trees of depth 3, then Platt


def test_clients_in_batches_and_unasked_clients(monkeypatch):
    # Few slots: 4, 2, then 1 client per histogram as the levels deepen.
    monkeypatch.setattr(bdpe_client, "HIST_SLOTS", 400)
    X, y = _data(300, 4)
    clients = split(X, y, (70, 0, 30, 120, 80))
    drive(_strategy(300, depth=4), BDPEClient(), clients, epsilon=1.0,
          asked=lambda r, i: (r + i) % 3 != 0)  # fmt: skip


def test_the_comparison_sees_one_moved_row():
    X, y = _data(200, 5)
    clients = split(X, y, (80, 120))
    X1 = clients[1].X.copy()
    X1[0, 0] = 1.0 - X1[0, 0]
    twin = [clients[0], ClientData(client_id=8, X=X1, y=clients[1].y)]
    with pytest.raises(AssertionError, match="client 1"):
        drive(_strategy(200), BDPEClient(), clients, answered=twin)


def test_a_fit_all_at_once_equals_the_per_client_fit():
    X, y = _data(400, 6)
    clients = split(X, y, (150, 0, 100, 150))
    ref = assert_paths_agree(lambda: _strategy(400), BDPEClient, clients, epsilon=4.0)
    assert np.abs(ref["leaf_values"]).sum() > 0 and ref["platt"].size == 2
