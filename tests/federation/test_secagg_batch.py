"""The in-process batched masking step: the bytes each client's own call would produce.

Code: ``fedpriv/federation/secagg_batch.py``. K = 20 at the defaults gives SecAgg+'s
sparse graph with degree k = 12 and threshold t = 8 (``test_secagg_plus.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.federation import field, secagg_batch
from fedpriv.federation.secagg import SecAggServer, sum_plain
from tests.federation.secagg_plus_rounds import CODEC, K, N, _finish_round
from tests.federation.secagg_plus_rounds import _clients as _sparse_clients

RUN = "run-secagg-batch"


def _clients():
    return _sparse_clients(run_id=RUN)


def _options(clients, r, change=None):
    change = change or {}
    g = clients[0].graph
    return [
        {**dict(round_id=r, participants=sorted(clients), codec=CODEC, threshold=g.threshold,
                neighbours=g.neighbours(i)), **change.get(i, {})}
        for i in sorted(clients)
    ]  # fmt: skip


def _scripted(monkeypatch, draws):
    """field.random_elements returning ``draws`` in turn (each checked for its shape)."""
    queue = list(draws)

    def random_elements(shape, prime=field.PRIME):
        out = queue.pop(0)
        assert out.shape == (shape if isinstance(shape, tuple) else (shape,))
        return out

    monkeypatch.setattr(field, "random_elements", random_elements)
    return queue


def test_batched_masks_are_the_bytes_of_each_clients_own_call(monkeypatch):
    xs = np.random.default_rng(1).uniform(-3, 3, size=(K, N))
    rng = np.random.default_rng(2)
    t = _clients()[0].graph.threshold
    seeds = rng.integers(0, field.PRIME, (K, 5), dtype=np.uint64)
    free = rng.integers(0, field.PRIME, (t - 1, K, 5), dtype=np.uint64)
    alone = _clients()
    # One round per batch (the clients' seed_batch): a batch axis of 1.
    queue = _scripted(
        monkeypatch, [a for b in range(K) for a in (seeds[b][None], free[:, b][:, None])]
    )
    own = [alone[i].mask(xs[i], **kw) for i, kw in zip(range(K), _options(alone, 3), strict=True)]
    assert not queue
    many = _clients()
    queue = _scripted(monkeypatch, [seeds[:, None], free[:, :, None]])
    batch = secagg_batch.mask_many([many[i] for i in range(K)], list(xs), _options(many, 3))
    assert not queue
    for a, b in zip(own, batch, strict=True):
        np.testing.assert_array_equal(a.vector, b.vector)
        assert a.shares == b.shares and a.round_id == b.round_id
    for i in range(K):
        assert many[i].export_state() == alone[i].export_state()  # own share, round record


def test_a_batched_round_sums_exactly_and_a_refusal_fails_its_client_only():
    clients = _clients()
    xs = np.random.default_rng(4).uniform(-3, 3, size=(K, N))
    bad = {5: {"threshold": clients[0].graph.threshold - 1}}  # an announced t it refuses
    out = secagg_batch.mask_many(
        [clients[i] for i in range(K)], list(xs), _options(clients, 0, bad)
    )
    assert isinstance(out[5], ValueError) and "threshold" in str(out[5])
    ups = {i: u for i, u in enumerate(out) if i != 5}
    server = SecAggServer(codec=CODEC, graph=clients[0].graph)
    total, answers, _ = _finish_round(clients, server, ups)
    assert sorted(answers) == [i for i in range(K) if i != 5]  # client 5 dropped, alone
    np.testing.assert_array_equal(total, sum_plain([xs[i] for i in answers], CODEC))


def test_a_party_masks_once_per_batch():
    clients = _clients()
    with pytest.raises(ValueError, match="twice"):
        secagg_batch.mask_many(
            [clients[0], clients[0]], [np.zeros(N)] * 2, _options(clients, 0)[:2]
        )


def test_a_long_id_tuple_is_checked_once_and_a_bad_one_every_time():
    from fedpriv.federation.secagg_common import check_ids

    ids = tuple(range(200, 0, -1))
    assert check_ids("survivors", ids) == tuple(range(1, 201))
    assert check_ids("survivors", ids) == tuple(range(1, 201))  # seen and valid: remembered
    bad = (*range(100), 5)
    for _ in range(2):
        with pytest.raises(ValueError, match="distinct"):
            check_ids("survivors", bad)
    assert check_ids("survivors", ids) == tuple(range(1, 201))
