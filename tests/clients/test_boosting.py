"""The boosting client: every way of keeping (or losing) state gives the same replies."""

import numpy as np
import pytest

from clients.boosting import BoostingClient
from fedpriv.federation.protocol import ClientData
from strategies.boosting import BoostingConfig, DPBoostingStrategy
from tests.keys import private_rng


def _clients(rng, sizes=(120, 75, 200), d=6):
    return [
        ClientData(client_id=k, X=rng.random((n, d)), y=(rng.random(n) < 0.4).astype(float))
        for k, n in enumerate(sizes)
    ]


def _replies(mode: str, rounds: int = 8):
    rng = np.random.default_rng(0)
    clients = _clients(rng)
    strategy = DPBoostingStrategy(BoostingConfig(rounds=rounds, depth=4))
    strategy.begin(
        n_features=6, ledger=None, rng=np.random.default_rng(1), secret_rng=private_rng(1)
    )
    handler, shared, states, out = BoostingClient(), {}, [{} for _ in clients], []
    while (q := strategy.next_query()) is not None:
        samples = [np.flatnonzero(rng.random(c.n) < 0.3) for c in clients]
        if q.round == 3:
            samples[1] = np.zeros(0, dtype=np.intp)  # a client with an empty sample
        if mode == "many":
            rep = handler.answer_many(q, clients, samples, shared)
        else:
            rep = np.array(
                [
                    handler.answer(q, c, s, st)
                    for c, s, st in zip(clients, samples, states, strict=True)
                ]
            )
            for st in states:
                if mode == "drop-cache":  # what the Flower client does every round
                    for key in handler.cache_keys:
                        st.pop(key, None)
                elif mode == "no-state":  # rebuilt from the public query every round
                    st.clear()
        out.append(rep)
        strategy.update(q, rep.sum(axis=0))
    return np.array(out)


def test_all_state_policies_give_bit_identical_replies():
    ref = _replies("per-client")
    for mode in ("many", "drop-cache", "no-state"):
        np.testing.assert_array_equal(_replies(mode), ref, err_msg=mode)
    assert np.abs(ref).sum() > 0


def test_reply_bounds_follow_the_clipping():
    reps = _replies("many")
    L = reps.shape[-1] // 2
    counts = reps[..., L:].sum(axis=-1)  # Σh ≤ 0.25 per sampled record
    assert (reps[..., L:] >= 0).all() and (counts <= 0.25 * 200).all()


def test_refuses_samples_outside_the_client_and_inconsistent_queries():
    rng = np.random.default_rng(3)
    (c,) = _clients(rng, sizes=(10,))
    strategy = DPBoostingStrategy(BoostingConfig(rounds=2, depth=2))
    strategy.begin(
        n_features=6, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    q = strategy.next_query()
    with pytest.raises(ValueError, match="outside its client's rows"):
        BoostingClient().answer(q, c, np.array([3, 10]), {})
    broken = type(q)(**{**q.__dict__, "arrays": {**q.arrays, "leaf_values": np.zeros((1, 4))}})
    with pytest.raises(ValueError, match="tree structures"):
        BoostingClient().answer(broken, c, np.array([1]), {})
