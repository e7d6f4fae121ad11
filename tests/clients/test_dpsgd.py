"""DP-SGD client half: one client alone = the same client among others, both backends."""

import itertools

import numpy as np
import pytest
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation.protocol import make_clients
from fedpriv.models.networks import InputMap
from tests.keys import private_rng


def _setup(model, seed=0, sizes=(30, 0, 45, 12), backend="fast"):
    rng = np.random.default_rng(seed)
    d = 5
    n = sum(sizes)
    X, y = rng.random((n, d)), (rng.random(n) < 0.3).astype(float)
    bounds = np.cumsum([0, *sizes])
    clients = make_clients(X, y, [np.arange(a, b) for a, b in itertools.pairwise(bounds)])
    cfg = (MLPConfig if model == "mlp" else LogisticConfig)(
        **({"hidden": 6} if model == "mlp" else {}), rounds=5, backend=backend
    )
    imap = InputMap(np.full(d, 0.5), np.full(d, np.sqrt(12)))
    strategy = DPSGDStrategy(cfg, n_records=n, input_map=imap)
    strategy.begin(
        n_features=d, ledger=None, rng=np.random.default_rng(seed), secret_rng=private_rng(seed)
    )
    samples = [np.flatnonzero(rng.random(c.n) < 0.5) for c in clients]
    centre = strategy.next_query()  # round 0: the feature mean, then the steps
    every = [np.arange(c.n) for c in clients]
    strategy.update(centre, DPSGDClient().answer_many(centre, clients, every, {}).sum(axis=0))
    return strategy.next_query(), clients, samples


def test_centring_round_sums_clipped_mapped_rows():
    rng = np.random.default_rng(1)
    clients = make_clients(rng.random((40, 3)), np.zeros(40), [np.arange(25), np.arange(25, 40)])
    imap = InputMap(np.zeros(3), np.array([1.0, 2.0, 30.0]))  # rows up to ‖x̃‖ ≈ 30
    strategy = DPSGDStrategy(LogisticConfig(rounds=4), n_records=40, input_map=imap)
    strategy.begin(n_features=3, ledger=None, rng=rng, secret_rng=private_rng(1))
    query = strategy.next_query()
    assert query.config["stage"] == "centre" and query.sampling_rate == 1.0
    assert query.record_bound == pytest.approx(np.sqrt(1 + 4 + 900))  # max ‖x̃‖ on [0, 1]^3
    samples = [np.arange(c.n) for c in clients]
    handler = DPSGDClient()
    replies = handler.answer_many(query, clients, samples, {})
    for c, s, row in zip(clients, samples, replies, strict=True):
        np.testing.assert_array_equal(handler.answer(query, c, s, {}), row)
        mapped = imap.apply(c.X)
        np.testing.assert_allclose(row, mapped.sum(axis=0), rtol=1e-12)  # none clipped here
    small = DPSGDClient().answer(
        type(query)(**{**query.__dict__, "config": {**query.config, "clip_norm": 1.0}}),
        clients[0],
        samples[0],
        {},
    )
    mapped = imap.apply(clients[0].X)
    np.testing.assert_allclose(small, (mapped / np.linalg.norm(mapped, axis=1)[:, None]).sum(0))
    strategy.update(query, replies.sum(axis=0))  # non-private: the exact mean is subtracted
    centred = strategy.next_query()
    X = np.concatenate([c.X for c in clients])
    recentred = InputMap(centred.arrays["input_shift"], centred.arrays["input_scale"])
    np.testing.assert_allclose(recentred.apply(X).mean(axis=0), 0.0, atol=1e-12)


@pytest.mark.parametrize("model", ["logistic", "mlp"])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_answer_many_is_bit_identical_to_answer(model, seed):
    query, clients, samples = _setup(model, seed)
    handler = DPSGDClient()
    batch = handler.answer_many(query, clients, samples, {})
    for c, s, row in zip(clients, samples, batch, strict=True):
        np.testing.assert_array_equal(handler.answer(query, c, s, {}), row)
    assert not np.any(batch[1])  # a client without rows sends zeros


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_opacus_backend_answers_the_same_query_alike(model):
    query, clients, samples = _setup(model)
    fast = DPSGDClient().answer_many(query, clients, samples, {})
    opq, _, _ = _setup(model, backend="opacus")
    slow = DPSGDClient().answer_many(opq, clients, samples, {})
    np.testing.assert_allclose(slow, fast, rtol=1e-10, atol=1e-12)
    assert np.abs(fast).max() > 1e-2


def test_replies_respect_the_record_bound_and_the_handler_keeps_no_state():
    query, clients, samples = _setup("mlp")
    state: dict = {}
    reply = DPSGDClient().answer(query, clients[0], samples[0], state)
    assert np.linalg.norm(reply) <= query.record_bound * samples[0].size
    assert state == {}


def test_refuses_bad_samples_and_unknown_backends():
    query, clients, _ = _setup("logistic")
    with pytest.raises(ValueError, match="outside its client's rows"):
        DPSGDClient().answer(query, clients[0], np.array([30]), {})
    bad = type(query)(**{**query.__dict__, "config": {**query.config, "backend": "jax"}})
    with pytest.raises(ValueError, match="backend must be 'fast' or 'opacus'"):
        DPSGDClient().answer(bad, clients[0], np.array([0]), {})
    custom = type(query)(**{**query.__dict__, "config": {**query.config, "model": "module"}})
    with pytest.raises(ValueError, match="custom module needs 'opacus'"):
        DPSGDClient().answer(custom, clients[0], np.array([0]), {})
    opacus = {**custom.config, "backend": "opacus"}
    with pytest.raises(ValueError, match="this client has none"):
        DPSGDClient().answer(
            type(query)(**{**query.__dict__, "config": opacus}), clients[0], np.array([0]), {}
        )
