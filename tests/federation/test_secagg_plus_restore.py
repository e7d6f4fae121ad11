"""SecAgg+'s consistency round per neighbourhood, and a node restored from its state.

Protocol: ``fedpriv/federation/secagg_consistency.py`` and ``secagg_topology.py``;
K = 20 at the defaults gives degree k = 12 and threshold t = 8.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.federation import secagg_consistency
from fedpriv.federation.secagg import SecAggClient, SecAggServer, sum_plain
from fedpriv.federation.secagg_graph import harary_graph
from tests.federation.secagg_plus_rounds import (
    CODEC,
    RUN,
    K,
    N,
    _answers,
    _book,
    _clients,
    _mask,
    _vectors,
)


# --- the consistency round per neighbourhood ----------------------------------------------
def test_a_client_verifies_t_of_its_neighbours_signatures_only(monkeypatch):
    clients = _clients()
    g = clients[0].graph
    xs = _vectors(range(K), seed=7)
    ups = _mask(clients, xs, 0)
    server = SecAggServer(codec=CODEC, graph=g)
    live, gone = server.unmask_plan(round_id=0, participants=list(range(K)), masked=ups)
    sigs = {i: clients[i].sign_survivors(round_id=0, survivors=live, dropped=gone) for i in live}
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    seen = []
    real = secagg_consistency._verifies
    monkeypatch.setattr(secagg_consistency, "_verifies", lambda *a: seen.append(a) or real(*a))
    monkeypatch.setattr(secagg_consistency, "_accepted", {})  # a node alone: none remembered
    clients[3].unmask(
        round_id=0, survivors=live, dropped=gone, n=N, inbox=inboxes[3], signatures=sigs
    )
    assert len(seen) == g.threshold == 8  # of K − 1 = 19 signatures on offer
    # Non-neighbours' signatures do not count: 7 of them with 7 neighbours' are refused.
    far = {j: sigs[j] for j in range(K) if j not in g.closed(5)}
    offered = {**far, **{j: sigs[j] for j in g.neighbours(5)[:7]}}
    assert len(offered) == 14 > g.threshold
    with pytest.raises(ValueError, match=r"7 valid signatures .* below threshold t = 8"):
        clients[5].unmask(
            round_id=0, survivors=live, dropped=gone, n=N, inbox=inboxes[5], signatures=offered
        )


def test_remembered_verifications_are_exact_inputs_only():
    c = _clients()[1]
    msg = b"a signed survivor list"
    sig = c._signer.sign(msg)
    key = c._verify_key(1)
    assert secagg_consistency._verifies(key, sig, msg)
    assert secagg_consistency._verifies(key, sig, msg)  # remembered
    assert not secagg_consistency._verifies(key, sig, msg + b"!")  # another message
    assert not secagg_consistency._verifies(c._verify_key(2), sig, msg)  # another key
    forged = bytes([sig[0] ^ 1]) + sig[1:]
    assert not secagg_consistency._verifies(key, forged, msg)
    # valid_signers' shortcut over remembered triples: the same signers, a forgery refused.
    keys = {1: key, 2: c._verify_key(2)}
    assert secagg_consistency.valid_signers(msg, {1: sig}, keys, [1, 2], need=1) == [1]
    assert secagg_consistency.valid_signers(msg, {1: forged}, keys, [1, 2], need=1) == []
    assert secagg_consistency.valid_signers(msg, {2: sig}, keys, [1, 2], need=1) == []


# --- restoring a node from its state ----------------------------------------------------------
def test_a_restored_client_derives_the_same_graph_and_keeps_its_round():
    clients = _clients()
    xs = _vectors(range(K), seed=8)
    ups = _mask({**clients}, {i: xs[i] for i in range(K) if i != 2}, 0)
    sk, book = clients[2].export_state()
    twin = SecAggClient.restore(client_id=2, private_key_bytes=sk, book=book)
    assert twin.graph.neighbours(2) == clients[2].graph.neighbours(2)
    assert sorted(twin._keys) == sorted(clients[2]._keys)
    ups[2] = twin.mask(
        xs[2], round_id=0, participants=list(range(K)), codec=CODEC, threshold=8,
        neighbours=twin.graph.neighbours(2),
    )  # fmt: skip
    g = clients[0].graph
    server = SecAggServer(codec=CODEC, graph=g)
    clients = {**clients, 2: twin}
    live, gone = server.unmask_plan(round_id=0, participants=list(range(K)), masked=ups)
    answers = _answers(server, clients, ups, live, gone)
    masked = {i: u.vector for i, u in ups.items()}
    everyone = list(range(K))
    total = server.aggregate(round_id=0, participants=everyone, masked=masked, answers=answers)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))


def test_the_graph_is_the_harary_graph_of_the_public_seed():
    from fedpriv.federation.secagg_consistency import book_digest
    from fedpriv.federation.secagg_graph import graph_seed

    clients = _clients()
    public, verify = _book(clients)
    seed = graph_seed(run_id=RUN, book_digest=book_digest(public, verify))
    expected = harary_graph(range(K), 12, seed)
    g = clients[7].graph
    np.testing.assert_array_equal(g.graph.ring, expected.ring)
