"""The boosting client: every way of keeping (or losing) state gives the same replies."""

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy

from fedpriv.federation.protocol import ClientData
from tests.keys import private_rng


def _clients(rng, sizes=(120, 75, 200), d=6, n_classes=2):
    return [
        ClientData(
            client_id=k,
            X=rng.random((n, d)),
            y=(rng.random(n) < 0.4).astype(float)
            if n_classes == 2
            else rng.integers(0, n_classes, n).astype(float),
        )
        for k, n in enumerate(sizes)
    ]


def _replies(mode: str, rounds: int = 8, n_classes: int = 2):
    rng = np.random.default_rng(0)
    clients = _clients(rng, n_classes=n_classes)
    strategy = DPBoostingStrategy(BoostingConfig(rounds=rounds, depth=4), n_classes=n_classes)
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
    return out


@pytest.mark.parametrize("n_classes", [2, 3])
def test_all_state_policies_give_bit_identical_replies(n_classes):
    # Round 0 is the intercept's (2·C sums), then one tree per round.
    ref = _replies("per-client", n_classes=n_classes)
    c = 1 if n_classes == 2 else n_classes
    assert ref[0].shape == (3, 2 * c) and ref[1].shape == (3, 2 * 16 * c)
    for mode in ("many", "drop-cache", "no-state"):
        got = _replies(mode, n_classes=n_classes)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=mode)
    assert np.abs(ref[-1]).sum() > 0


def test_reply_bounds_follow_the_clipping():
    reps = np.array(_replies("many")[1:])
    L = reps.shape[-1] // 2
    counts = reps[..., L:].sum(axis=-1)  # Σh ≤ 0.25 per sampled record
    assert (reps[..., L:] >= 0).all() and (counts <= 0.25 * 200).all()


def test_refuses_samples_outside_the_client_and_inconsistent_queries():
    rng = np.random.default_rng(3)
    (c,) = _clients(rng, sizes=(10,))
    strategy = DPBoostingStrategy(BoostingConfig(rounds=2, depth=2, intercept=False))
    strategy.begin(
        n_features=6, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng(0)
    )
    q = strategy.next_query()
    with pytest.raises(ValueError, match="outside its client's rows"):
        BoostingClient().answer(q, c, np.array([3, 10]), {})
    broken = type(q)(**{**q.__dict__, "arrays": {**q.arrays, "leaf_values": np.zeros((1, 4))}})
    with pytest.raises(ValueError, match="tree structures"):
        BoostingClient().answer(broken, c, np.array([1]), {})
