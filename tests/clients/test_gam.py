"""The DP-EBM client's ``answer_many``: every row is the client's own ``answer``, bit for bit."""

import numpy as np
import pytest
from fedpriv.clients.gam import GAMClient
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation.protocol import ClientData
from fedpriv.models.gam import Terms
from tests.clients.batching import (
    SIZES,
    assert_paths_agree,
    begun,
    drive,
    graded_labels,
    split,
)

#: Term 0 numeric (3 cuts of feature 0), terms 1..6 binary (features 1..6, cut at ½).
M = 6
TERMS = Terms(
    np.arange(M + 1), np.zeros(M + 1), np.full(M + 1, -1), [True] + [False] * M,
    ([0.25, 0.5, 0.75], *([0.5],) * M),
)  # fmt: skip
#: Every phase: the sketch, terms, the binary columns' group round, pairs and their selection.
CONFIG = GAMConfig(
    rounds=16, bins=4, interactions=2, interaction_rounds=5, interaction_candidates=4
)


def _data(n: int, n_classes: int, seed: int):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.random((n, 1)), (rng.random((n, M)) < 0.3).astype(float)])
    return X, graded_labels(rng, X, n_classes)


def _strategy(n_records: int, n_classes: int = 2, participation: float = 1.0):
    return DPGAMStrategy(CONFIG, terms=TERMS, n_records=max(n_records, 1),
                         n_classes=n_classes, participation=participation)  # fmt: skip


@pytest.mark.parametrize("n_classes", [2, 3])
@settings(max_examples=10, deadline=None)
@given(sizes=SIZES, seed=st.integers(0, 2**31), epsilon=st.sampled_from([None, 1.0]))
def test_answer_many_rows_are_each_clients_answer(n_classes, sizes, seed, epsilon):
    clients = split(*_data(sum(sizes), n_classes, seed), sizes)
    phases = drive(_strategy(sum(sizes), n_classes), GAMClient(), clients, epsilon=epsilon,
                   seed=seed, drop_cache=seed % 2 == 1)  # fmt: skip
    expected = {"intercept", "term", "pair", "select"} | ({"group"} if n_classes == 2 else set())
    assert set(phases) == expected


def test_an_unasked_client_gets_zeros_and_a_partial_sample_is_refused():
    X, y = _data(200, 2, 0)
    clients = split(X, y, (60, 0, 90, 50))
    # Client 2 sits out every other round (participation ρ < 1: its sample is empty).
    drive(_strategy(200), GAMClient(), clients, asked=lambda r, i: i != 2 or r % 2 == 0)
    query = begun(_strategy(200), M + 1).next_query()
    partial = [np.arange(c.n) for c in clients]
    partial[2] = np.arange(5)
    for refuse in (
        lambda: GAMClient().answer_many(query, clients, partial, {}),
        lambda: GAMClient().answer(query, clients[2], partial[2], {}),
    ):
        with pytest.raises(ValueError, match=r"the sample must be all rows \(90\)"):
            refuse()


def test_the_comparison_sees_one_changed_label():
    # The twin: client 1's own answer reads one other label; some round must differ.
    X, y = _data(150, 2, 1)
    clients = split(X, y, (50, 40, 60))
    y1 = clients[1].y.copy()
    y1[3] = 1.0 - y1[3]
    twin = [clients[0], ClientData(client_id=8, X=clients[1].X, y=y1), clients[2]]
    with pytest.raises(AssertionError, match="client 1"):
        drive(_strategy(150), GAMClient(), clients, answered=twin)


def test_another_set_of_clients_is_binned_anew():
    # The shared state is keyed by the clients' ids: a term round's bins are rebuilt.
    X, y = _data(120, 2, 3)
    a, b = split(X, y, (40, 80)), split(X[::-1].copy(), y[::-1].copy(), (70, 50), first_id=20)
    strategy = begun(_strategy(120), M + 1)
    q = strategy.next_query()
    while q.config["phase"] != "term":
        strategy.update(q, np.zeros(q.reply_length))
        q = strategy.next_query()
    state: dict = {}
    for clients in (a, b, a):
        rows = GAMClient().answer_many(q, clients, [np.arange(c.n) for c in clients], state)
        for c, row in zip(clients, rows, strict=True):
            np.testing.assert_array_equal(row, GAMClient().answer(q, c, np.arange(c.n), {}))


@pytest.mark.parametrize("participation", [1.0, 0.6])
def test_a_fit_all_at_once_equals_the_per_client_fit(participation):
    X, y = _data(400, 2, 2)
    clients = split(X, y, (120, 0, 80, 100, 100))
    ref = assert_paths_agree(
        lambda: _strategy(400, participation=participation), GAMClient, clients,
        participation=participation,
    )  # fmt: skip
    assert np.abs(ref["shapes"]).sum() > 0 and ref["pair_values"].size > 0
