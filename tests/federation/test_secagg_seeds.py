"""Self-mask seeds shared a batch of rounds at a time: exact sums, the sealed batch's
bindings, what a holder reveals and when, state across messages, the server's store.

Code: ``fedpriv/federation/secagg_seeds.py``, ``fedpriv/federation/secagg_store.py``.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from fedpriv.federation import shamir
from fedpriv.federation.secagg import (
    SecAggAbort,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    sum_plain,
)
from fedpriv.federation.secagg_store import SealedStore
from tests.federation.secagg_parties import CODEC, _clients, _round, _sigs, _vectors

BATCH = 4
N = 6


def _batched(k=5, batch=BATCH, seed=0):
    clients = _clients(k, seed=seed)
    for c in clients.values():
        c.config = SecAggConfig(seed_batch=batch)
    return clients


class CountingClient(SecAggClient):
    """Counts the sealed batches it opens."""

    opened = 0

    def _take(self, senders, inbox, r):
        type(self).opened += len(senders)
        return super()._take(senders, inbox, r)


def test_a_batch_sums_every_round_exactly_and_each_holder_opens_each_batch_once():
    clients = _batched()
    CountingClient.opened = 0
    for c in clients.values():
        c.__class__ = CountingClient
    sealed = {}
    for r in range(2 * BATCH + 1):  # three batches: [0, 4), [4, 8), [8, 12)
        xs = _vectors(clients, N, seed=r)
        total, ups, _ = _round(clients, xs, r)
        np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
        for i, up in ups.items():
            starts = {struct.unpack(">QH", c[:10]) for c in up.shares.values()}
            assert starts == {(r - r % BATCH, BATCH)}  # one header: the batch covering r
            sealed.setdefault((i, r // BATCH), up.shares)
            assert up.shares == sealed[(i, r // BATCH)]  # the same bytes all batch long
    # 5 holders × 4 owners × 3 batches: one opening each, not one per round.
    assert CountingClient.opened == 5 * 4 * 3


def test_a_batch_travels_once_unless_the_server_asks_again():
    clients = _batched()
    c = clients[1]
    args = dict(participants=sorted(clients), codec=CODEC)
    first = c.mask(np.zeros(N), round_id=0, resend=False, **args)
    assert len(first.shares) == 4  # a new batch always goes out
    assert c.mask(np.zeros(N), round_id=1, resend=False, **args).shares == {}
    again = c.mask(np.zeros(N), round_id=2, resend=True, **args)
    assert again.shares == first.shares  # the very bytes: no second sealing under a nonce


def test_the_seeds_of_a_batch_are_fresh_and_each_masks_one_round():
    clients = _batched(k=3)
    c = clients[1]
    args = dict(participants=[1, 2, 3], codec=CODEC)
    c.mask(np.zeros(N), round_id=0, **args)
    batch = next(iter(c._batches.values()))
    seeds = [s for s in batch.seeds[1:]]
    assert len({shamir.to_bytes(s) for s in seeds}) == BATCH - 1  # distinct draws
    assert batch.seeds[0] is None  # round 0's seed forgotten once used
    c.mask(np.zeros(N), round_id=2, **args)  # round 1 skipped: its seed goes too
    assert batch.seeds[:3] == [None] * 3
    with pytest.raises(ValueError, match="round-1 seed was used or passed"):
        c.mask(np.zeros(N), round_id=1, **args)


@pytest.mark.parametrize(
    "forge, why",
    [
        (lambda ct, other: other, "failed authentication"),  # another holder's batch
        (lambda ct, other: ct[:-1] + bytes([ct[-1] ^ 1]), "failed authentication"),
        (lambda ct, other: struct.pack(">QH", 8, BATCH) + ct[10:], "not round 0"),
        (lambda ct, other: ct[:10] + ct[10:-40], "malformed"),
    ],
    ids=["moved", "tag", "other_rounds", "truncated"],
)
def test_a_sealed_batch_is_bound_to_its_pair_and_rounds(forge, why):
    clients = _batched()
    xs = _vectors(clients, N, seed=1)
    server = SecAggServer(codec=CODEC)
    ups = {i: clients[i].mask(xs[i], round_id=0, participants=sorted(clients), codec=CODEC)
           for i in clients}  # fmt: skip
    live, gone = server.unmask_plan(round_id=0, participants=sorted(clients), masked=ups)
    box = server.inboxes(live, {i: u.shares for i, u in ups.items()})[1]
    sigs = _sigs(clients, 0, live, gone)
    forged = {**box, 2: forge(box[2], box[3])}
    with pytest.raises(ValueError, match=why):
        clients[1].unmask(round_id=0, survivors=live, dropped=gone, n=N, inbox=forged,
                          signatures=sigs)  # fmt: skip
    # The twin: the untouched inbox is answered.
    got = clients[1].unmask(round_id=0, survivors=live, dropped=gone, n=N, inbox=box,
                            signatures=sigs)  # fmt: skip
    assert sorted(got.shares) == live


def test_a_holder_reveals_round_r_shares_only_in_round_r():
    clients = _batched()
    r0 = _round(clients, _vectors(clients, N, seed=2), 0)[2]
    r1 = _round(clients, _vectors(clients, N, seed=3), 1)[2]
    holder = 1
    held_r0, held_r1 = r0[holder].shares, r1[holder].shares
    # Different rounds, different seeds, different shares; none of round 1's came out in 0.
    assert not set(held_r0.values()) & set(held_r1.values())
    # What it still holds: rounds 2 and 3 only (rounds 0 and 1 zeroed once answered).
    data = clients[holder]._held[(0, BATCH)][1]
    assert not data[:, : 2 * shamir.SHARE_BYTES].any()
    assert data[:, 2 * shamir.SHARE_BYTES :].any()
    with pytest.raises(ValueError, match="never masked for round 2"):  # not before its round
        clients[holder].unmask(round_id=2, survivors=sorted(clients), dropped=[], n=N,
                               inbox={}, signatures={})  # fmt: skip


def _attack(clients, victim, forget_lists):
    """A server that gets t shares of b_w^1 before w masks round 1 (w listed as a survivor),
    then asks w to mask and claims w dropped to collect w's pair masks. Returns what it
    recovers for x_w (the sum of what it learned), or None if the holders refuse."""
    others = [i for i in clients if i != victim]
    xs = _vectors(clients, N, seed=9)
    _round(clients, {i: xs[i] for i in clients}, 0)  # the batch is out: shares are held
    for i in others:
        clients[i].mask(xs[i], round_id=1, participants=sorted(clients), codec=CODEC)
    live = sorted(clients)  # the victim "survived" round 1 before it even masked
    saved = {i: clients[i].export_state() for i in others}
    sigs = _sigs(clients, 1, live, [], signers=others)
    shares = {i: clients[i].unmask(round_id=1, survivors=live, dropped=[], n=N, inbox={},
                                   signatures=sigs).shares for i in others}  # fmt: skip
    pts = sorted(others)[: clients[others[0]].check_threshold(5, None)]
    seed = shamir.reconstruct([p + 1 for p in pts], np.stack(
        [shamir.from_bytes(shares[p][victim]) for p in pts]), threshold=len(pts))  # fmt: skip
    y = clients[victim].mask(xs[victim], round_id=1, participants=live, codec=CODEC).vector
    if forget_lists:  # the broken twin: holders that forget what they signed and answered
        for i in others:
            clients[i] = SecAggClient.restore(
                client_id=i, private_key_bytes=saved[i][0], book=saved[i][1],
                config=clients[i].config,
            )  # fmt: skip
    gone, rest = [victim], others
    try:
        sigs = _sigs(clients, 1, rest, gone)
        masks = [clients[i].unmask(round_id=1, survivors=rest, dropped=gone, n=N, inbox={},
                                   signatures=sigs).mask for i in rest]  # fmt: skip
    except ValueError:
        return None, xs[victim]
    from fedpriv.federation.secagg_common import self_mask

    got = y - self_mask(seed, 1, N) + sum(masks[1:], masks[0])  # pair masks as left in y
    return CODEC.decode(got), xs[victim]


def test_an_early_seed_does_not_unmask_its_owner_and_the_twin_shows_why():
    got, _ = _attack(_batched(), victim=5, forget_lists=False)
    assert got is None  # every honest holder refuses a second list for round 1
    got, x = _attack(_batched(), victim=5, forget_lists=True)
    np.testing.assert_allclose(got, x, atol=1e-5)  # without the one-list rule: x_w out


def test_a_batch_survives_export_and_restore_mid_batch():
    clients = _batched()
    _round(clients, _vectors(clients, N, seed=4), 0)  # the batch [0, 4) is out and held
    ids = sorted(clients)
    for r in (1, 2, 3):
        for i, c in list(clients.items()):  # a stateless runtime: rebuilt for every message
            sk, book = c.export_state()
            clients[i] = SecAggClient.restore(client_id=i, private_key_bytes=sk, book=book,
                                              config=c.config)  # fmt: skip
        xs = _vectors(clients, N, seed=10 + r)
        ups = {i: clients[i].mask(xs[i], round_id=r, participants=ids, codec=CODEC,
                                  resend=False) for i in ids}  # fmt: skip
        assert all(u.shares == {} for u in ups.values())  # the seeds came through
        sigs = _sigs(clients, r, ids, [])
        answers = {i: clients[i].unmask(round_id=r, survivors=ids, dropped=[], n=N, inbox={},
                                        signatures=sigs) for i in ids}  # fmt: skip
        total = SecAggServer(codec=CODEC).aggregate(
            round_id=r, participants=ids, masked={i: u.vector for i, u in ups.items()},
            answers=answers,
        )  # fmt: skip
        np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))


def test_the_server_store_asks_for_what_it_lacks_and_forwards_each_batch_once():
    clients = _batched()
    store = SealedStore()
    ids = sorted(clients)
    assert store.resend(0, ids) == frozenset(ids)
    ups = {i: clients[i].mask(np.zeros(N), round_id=0, participants=ids, codec=CODEC)
           for i in ids}  # fmt: skip
    sealed = store.take(0, ups)
    assert store.resend(1, ids) == frozenset() and store.resend(BATCH, ids) == frozenset(ids)
    box = store.inboxes(ids, sealed)
    assert {v: sorted(b) for v, b in box.items()} == {v: [u for u in ids if u != v] for v in ids}
    store.used(box, answered=[1, 2])
    box = store.inboxes(ids, sealed)
    assert box[1] == {} and box[2] == {} and sorted(box[3]) == [1, 2, 4, 5]
    empty = {i: dataclasses.replace(u, shares={}, round_id=1) for i, u in ups.items()}
    assert set(store.take(1, empty)) == set(ids)  # kept from round 0
    with pytest.raises(ValueError, match="no sealed shares covering round 4"):
        store.take(BATCH, empty)
    bad = {1: dataclasses.replace(ups[1], shares={2: b"\0" * 9})}
    with pytest.raises(ValueError, match="10-byte header"):
        store.take(0, bad)


def test_the_self_mask_key_is_rfc5869_hkdf_sha256():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from fedpriv.federation.secagg_common import self_mask_key

    for seed in (np.zeros(5, np.uint64), shamir.draw_seed(), shamir.draw_seed()):
        kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"fedpriv-secagg-self-mask")  # fmt: skip
        assert self_mask_key(seed) == kdf.derive(shamir.to_bytes(seed))
    assert self_mask_key(np.ones(5, np.uint64)) != self_mask_key(np.zeros(5, np.uint64))


def test_an_ended_batch_and_used_own_shares_leave_the_node_state():
    clients = _batched(k=3)
    c, args = clients[1], dict(participants=[1, 2, 3], codec=CODEC)
    c.mask(np.zeros(N), round_id=0, **args)
    c.mask(np.zeros(N), round_id=1, **args)
    batch = c._batches[0]
    assert batch.own[:2] == [None, None] and all(batch.own[2:])  # used shares go
    c.mask(np.zeros(N), round_id=BATCH + 1, **args)  # rounds 2, 3 never asked: batch ended
    assert sorted(c._batches) == [BATCH + 1]
    state = c.export_state()[1]
    assert batch.sealed[2].hex() not in state  # the ended batch's sealed shares are gone


def test_a_node_holds_no_longer_batch_than_its_run_allows():
    clients = _batched()
    clients[1].config = SecAggConfig(seed_batch=BATCH - 1)  # this node's run: 3 rounds
    ups = {i: clients[i].mask(np.zeros(N), round_id=0, participants=sorted(clients),
                              codec=CODEC) for i in clients}  # fmt: skip
    server = SecAggServer(codec=CODEC)
    live, gone = server.unmask_plan(round_id=0, participants=sorted(clients), masked=ups)
    box = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 0, live, gone)
    with pytest.raises(ValueError, match="cover 4 rounds, more than secagg-seed-batch = 3"):
        clients[1].unmask(round_id=0, survivors=live, dropped=gone, n=N, inbox=box[1],
                          signatures=sigs)  # fmt: skip
    got = clients[3].unmask(round_id=0, survivors=live, dropped=gone, n=N, inbox=box[3],
                            signatures=sigs)  # fmt: skip
    assert sorted(got.shares) == live  # the twin: a node whose run allows 4 answers


def test_the_server_screens_a_batch_longer_than_the_run_allows():
    from fedpriv.federation.replies import check_masked

    clients = _batched()
    up = clients[1].mask(np.zeros(N), round_id=0, participants=sorted(clients), codec=CODEC)
    kw = dict(sender=1, round_id=0, n=N, participants=sorted(clients))
    assert "more than the run's 1" in check_masked(up, **kw, max_batch=1)
    assert check_masked(up, **kw, max_batch=BATCH) is None
    empty = dataclasses.replace(up, shares={})
    assert check_masked(empty, **kw, sealed_due=False) is None  # sent with an earlier round
    assert "shares addressed to []" in check_masked(empty, **kw, sealed_due=True)


@pytest.mark.parametrize(
    ("hint", "count"),
    [(3, 3), (1, 1), (BATCH, BATCH), (10**9, BATCH), (None, BATCH), (0, BATCH), (-2, BATCH),
     (True, BATCH), (2.0, BATCH), ("2", BATCH)],
)  # fmt: skip
def test_the_rounds_left_hint_shortens_a_batch_and_nothing_else(hint, count):
    # The server's hint (the rounds its strategy still plans) caps a new batch; a value a
    # round count cannot be is ignored, and no hint lengthens a batch past the run's.
    clients = _batched()
    for r in range(count + 1):  # the batch, then the first round of the next
        xs = _vectors(clients, N, seed=r)
        total, ups, _ = _round(clients, xs, r, rounds_left=hint)
        np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
        for up in ups.values():
            heads = {struct.unpack(">QH", c[:10]) for c in up.shares.values()}
            start = r - r % count
            assert heads == {(start, min(count, BATCH))}


def test_an_unmask_answer_is_one_buffer_read_as_a_mapping():
    # A holder answers its shares as one buffer (ShareColumn): a read-only mapping equal to
    # the dict of the same shares, that never prints them and refuses a buffer of the wrong
    # length; the server checks it as it checks a dict.
    from fedpriv.federation.replies import check_answer
    from fedpriv.federation.secagg_seeds import ShareColumn

    clients = _batched()
    xs = _vectors(clients, N, seed=1)
    total, _, answers = _round(clients, xs, 0)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
    got = answers[2].shares
    assert isinstance(got, ShareColumn) and sorted(got) == sorted(clients)
    plain = {w: got.blob[40 * k : 40 * k + 40] for k, w in enumerate(got.owners)}
    assert got == plain and dict(got) == plain and got[3] == plain[3] and len(got) == 5
    assert got.blob.hex() not in repr(got) and plain[3].hex() not in repr(got)
    assert answers[2].nbytes == 5 * 40
    with pytest.raises(ValueError, match="40 bytes each"):
        ShareColumn((1, 2), bytes(79))
    with pytest.raises(ValueError, match="each owner once"):
        ShareColumn((1, 1), bytes(80))
    with pytest.raises(TypeError):
        got[3] = bytes(40)  # read-only
    with pytest.raises(AttributeError, match="read-only"):
        got.blob = got.blob[:-1]
    short = ShareColumn(got.owners[:-1], got.blob[:-40])
    answer = dataclasses.replace(answers[2], shares=short)
    assert check_answer(answer, survivors=sorted(clients), dropped=[], n=N) is not None
    assert check_answer(answers[2], survivors=sorted(clients), dropped=[], n=N) is None
    # A buffer cut short behind the constructor's back is refused by the screening and,
    # unscreened, aborts the sum (no crash, nothing released).
    for cut in (1, 40):
        forged = ShareColumn(got.owners, got.blob)
        object.__setattr__(forged, "blob", got.blob[:-cut])
        answer = dataclasses.replace(answers[2], shares=forged)
        assert check_answer(answer, survivors=sorted(clients), dropped=[], n=N) == (
            "a share is not 40 bytes"
        )
        xs = _vectors(clients, N, seed=2 + cut)
        server = SecAggServer(codec=CODEC)
        _, ups, honest = _round(clients, xs, 2 + cut, server=server, aggregate=False)
        bad = {**honest, 2: dataclasses.replace(honest[2], shares=forged)}
        with pytest.raises(SecAggAbort, match="not 40 bytes"):
            server.aggregate(round_id=2 + cut, participants=sorted(clients),
                             masked={i: u.vector for i, u in ups.items()}, answers=bad)  # fmt: skip
