"""Secure aggregation against a lying coordinator: the consistency round and the node's rules.

Protocol: ``fedpriv/federation/secagg.py`` and ``secagg_consistency.py`` (Bonawitz et al.,
CCS 2017, §4, ConsistencyCheck). Every attack here is played by the test as the server,
with a twin that restores the old behaviour and shows the attack then succeeds.
"""

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedpriv.federation import secagg_consistency, shamir
from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggAbort,
    SecAggClient,
    SecAggConfig,
    SecAggKeyError,
    SecAggServer,
    sum_plain,
)
from fedpriv.federation.secagg_common import node_config_floor, point, self_mask
from fedpriv.privacy.distributed import DistributedNoise, draw_share, share_spec, share_streams
from fedpriv.privacy.randomness import GRID
from tests.federation.boosting_fits import assert_same_model, boosting_fit, toy_clients
from tests.keys import key_for

CODEC = FixedPointCodec(scale=2.0**20, max_abs=3.0, max_summands=8)
IDS = [1, 2, 3, 4, 5]


def _clients(ids=IDS, seed=0, config=None):
    rng = np.random.default_rng(seed)
    clients = {
        i: SecAggClient(client_id=i, private_key_bytes=rng.bytes(32), config=config) for i in ids
    }
    keys = {i: c.public_key for i, c in clients.items()}
    verify = {i: c.verify_key for i, c in clients.items()}
    for c in clients.values():
        c.setup(keys, verify_keys=verify)
    return clients


def _vectors(ids, n, seed):
    rng = np.random.default_rng(seed)
    return {i: rng.uniform(-CODEC.max_abs, CODEC.max_abs, size=n) for i in ids}


def _masked(clients, xs, r=0, codec=CODEC, **kw):
    participants = sorted(clients)
    return {
        i: clients[i].mask(xs[i], round_id=r, participants=participants, codec=codec, **kw)
        for i in xs
    }


def _book(clients):
    return (
        {i: c.public_key for i, c in clients.items()},
        {i: c.verify_key for i, c in clients.items()},
    )


# --- equivocation ----------------------------------------------------------------
# Victim 1. Client 1 is told S = {1, 2, 3}: it reveals its own share of b_1 and its pair
# masks with 4 and 5. Clients 2 and 3 are told 1 dropped: they reveal their pair masks
# with 1. Clients 4 and 5 are told 1 survived: they reveal their shares of b_1. With
# t = 3 shares of b_1 and every pair mask of client 1, the server unmasks y_1 alone
# (n = 2t − 1 = 5 suffices, no colluder needed).
VIEWS = {
    1: ([1, 2, 3], [4, 5]),
    2: ([2, 3, 4, 5], [1]),
    3: ([2, 3, 4, 5], [1]),
    4: ([1, 4, 5], [2, 3]),
    5: ([1, 4, 5], [2, 3]),
}


def _equivocate(clients, ups, r=0):
    """The lying server: each client gets its own view, signs it, and is asked to unmask it
    with every signature collected (the most the server holds). Answers, refusals."""
    server = SecAggServer(codec=CODEC)
    shares = {i: u.shares for i, u in ups.items()}
    sigs = {
        i: clients[i].sign_survivors(round_id=r, survivors=live, dropped=gone)
        for i, (live, gone) in VIEWS.items()
    }
    answers, refusals = {}, {}
    for i, (live, gone) in VIEWS.items():
        try:
            answers[i] = clients[i].unmask(
                round_id=r, survivors=live, dropped=gone, n=CODEC_N,
                inbox=server.inboxes(live, shares)[i], signatures=sigs,
            )  # fmt: skip
        except ValueError as err:
            refusals[i] = str(err)
    return answers, refusals, sigs


CODEC_N = 64


def _unmask_victim(y1, answers, r=0):
    """y_1 − PRG(b_1) − (every pair mask of client 1), from the equivocation's answers."""
    ys = np.stack([shamir.from_bytes(answers[i].shares[1]) for i in (1, 4, 5)])
    out = y1 - self_mask(
        shamir.reconstruct([point(i) for i in (1, 4, 5)], ys, threshold=3), r, y1.size
    )
    assert answers[1].lost == (4, 5) and answers[2].lost == answers[3].lost == (1,)
    out -= answers[1].mask  # m_14 + m_15 as they enter y_1
    out += answers[2].mask + answers[3].mask  # −m_12, −m_13 as they enter y_2, y_3
    return out


def test_a_server_that_shows_clients_different_survivors_gets_no_unmask_answer():
    clients = _clients()
    xs = _vectors(IDS, CODEC_N, seed=1)
    ups = _masked(clients, xs)
    answers, refusals, sigs = _equivocate(clients, ups)
    assert answers == {} and sorted(refusals) == IDS  # nothing released, by anyone
    for why in refusals.values():
        assert "valid signatures by survivors on this survivor list" in why
    # The server's own check aborts every one of its views and closes the round.
    for live, gone in {tuple(map(tuple, v)) for v in VIEWS.values()}:
        with pytest.raises(SecAggAbort, match=r"valid signatures on the survivor list < t = 3"):
            SecAggServer(codec=CODEC).check_signatures(
                round_id=0, participants=IDS, survivors=live, dropped=gone,
                signatures=sigs, key_book=_book(clients),
            )  # fmt: skip
    # One list per client and round: another is refused, the same one signed again.
    with pytest.raises(ValueError, match="already signed another survivor list for round 0"):
        clients[2].sign_survivors(round_id=0, survivors=[1, 2, 3], dropped=[4, 5])
    assert clients[2].sign_survivors(round_id=0, survivors=[2, 3, 4, 5], dropped=[1]) == sigs[2]


def test_twin_without_signature_checks_the_equivocating_server_unmasks_one_input(monkeypatch):
    monkeypatch.setattr(secagg_consistency, "check_signatures", lambda **kw: [])
    clients = _clients()
    xs = _vectors(IDS, CODEC_N, seed=1)
    ups = _masked(clients, xs)
    answers, refusals, _ = _equivocate(clients, ups)
    assert refusals == {} and sorted(answers) == IDS
    got = _unmask_victim(ups[1].vector, answers)
    np.testing.assert_array_equal(CODEC.decode(got), sum_plain([xs[1]], CODEC))  # exactly x_1


def test_an_honest_round_passes_the_check_and_the_server_forwards_only_valid_signatures():
    clients = _clients()
    xs = _vectors([1, 2, 3, 4], CODEC_N, seed=2)  # 5 drops
    ups = _masked(clients, xs)
    server = SecAggServer(codec=CODEC)
    live, gone = server.unmask_plan(round_id=0, participants=IDS, masked=ups)
    sigs = {i: clients[i].sign_survivors(round_id=0, survivors=live, dropped=gone) for i in live}
    assert {len(s) for s in sigs.values()} == {secagg_consistency.SIGNATURE_BYTES}
    bad = {**sigs, 1: bytes(64), 5: sigs[2]}  # a garbled one, one from a non-survivor
    ok = server.check_signatures(
        round_id=0, participants=IDS, survivors=live, dropped=gone, signatures=bad,
        key_book=_book(clients),
    )  # fmt: skip
    assert ok == {j: sigs[j] for j in (2, 3, 4)}  # t = 3 valid ones, forwarded
    bad[2] = sigs[3]  # another survivor's signature under 2's name: 2 valid < t
    with pytest.raises(SecAggAbort, match=r"2 valid signatures on the survivor list < t = 3"):
        SecAggServer(codec=CODEC).check_signatures(
            round_id=0, participants=IDS, survivors=live, dropped=gone, signatures=bad,
            key_book=_book(clients),
        )  # fmt: skip
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    answers = {
        i: clients[i].unmask(
            round_id=0, survivors=live, dropped=gone, n=CODEC_N, inbox=inboxes[i], signatures=ok
        )
        for i in live
    }
    masked = {i: u.vector for i, u in ups.items()}
    total = server.aggregate(round_id=0, participants=IDS, masked=masked, answers=answers)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
    # Another run's (key book's) signatures on the same list never verify.
    other = _clients(seed=9)
    _masked(other, xs)
    foreign = {i: other[i].sign_survivors(round_id=0, survivors=live, dropped=gone) for i in live}
    with pytest.raises(SecAggAbort, match="0 valid signatures"):
        SecAggServer(codec=CODEC).check_signatures(
            round_id=0, participants=IDS, survivors=live, dropped=gone, signatures=foreign,
            key_book=_book(clients),
        )  # fmt: skip


def test_the_signed_list_survives_a_restart_from_the_node_state():
    clients = _clients()
    _masked(clients, _vectors(IDS, 8, seed=3))
    sig = clients[1].sign_survivors(round_id=0, survivors=[1, 2, 3], dropped=[4, 5])
    sk, book = clients[1].export_state()
    again = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    assert again.verify_key == clients[1].verify_key
    assert again.pinned_verify_keys == clients[1].pinned_verify_keys
    assert again.sign_survivors(round_id=0, survivors=[1, 2, 3], dropped=[4, 5]) == sig
    with pytest.raises(ValueError, match="already signed another survivor list"):
        again.sign_survivors(round_id=0, survivors=[1, 2, 3, 4], dropped=[5])
    with pytest.raises(ValueError, match="already signed another survivor list"):
        again.unmask(
            round_id=0, survivors=[1, 2, 3, 4, 5], dropped=[], n=8, inbox={}, signatures={}
        )


# --- pinned verify keys ------------------------------------------------------------
def _forged(signers, gone, digest, *, live, r=0):
    """Signatures on (S, D) the server makes itself for ``signers``, under keys of its own."""
    msg = secagg_consistency.view_message(digest, r, live, gone)
    keys = {j: Ed25519PrivateKey.generate() for j in signers}
    sigs = {j: k.sign(msg) for j, k in keys.items()}
    return sigs, {j: k.public_key().public_bytes_raw() for j, k in keys.items()}


@pytest.mark.parametrize("twin", [False, True], ids=["pinned", "twin-accepts-new-keys"])
def test_signatures_count_only_under_the_pinned_verify_keys(twin):
    clients = _clients()
    xs = _vectors(IDS, 8, seed=4)
    ups = _masked(clients, xs)
    live, gone = [1, 2, 3], [4, 5]
    c = clients[1]
    inbox = SecAggServer(codec=CODEC).inboxes(live, {i: u.shares for i, u in ups.items()})[1]
    sigs, new_keys = _forged([2, 3], gone, c._digest, live=live)  # 2 and 3 never signed
    sigs[1] = c.sign_survivors(round_id=0, survivors=live, dropped=gone)
    with pytest.raises(SecAggKeyError, match=r"verify keys of clients \[2, 3\] differ"):
        c.check_keys(live, verify_keys={**c.pinned_verify_keys, **new_keys})
    if twin:  # the old rule: whatever key a later message names is used (in place of the pin)
        c._vpinned.update(new_keys)
        got = c.unmask(round_id=0, survivors=live, dropped=gone, n=8, inbox=inbox, signatures=sigs)
        assert list(got.lost) == gone  # answered on the server's word alone
    else:
        with pytest.raises(ValueError, match=r"1 valid signatures by survivors.*t = 3"):
            c.unmask(round_id=0, survivors=live, dropped=gone, n=8, inbox=inbox, signatures=sigs)


# --- lying dropouts under distributed noise (the attacks: tests/privacy/lying_coordinator/)
N_NOISE = 20_000  # coordinates: the std estimate's relative error is ~1/√(2N) = 0.5 %


def _noisy_round(m, r, *, erase_bound=False):
    """n = 5 zero vectors with distributed noise shares sized for ``m`` survivors."""
    spec = share_spec(1.0, asked=5, setting=DistributedNoise(dropouts=5 - m, max_parties=5))
    codec = FixedPointCodec(scale=1.0 / GRID, max_abs=1.0, max_summands=5)
    clients = _clients()
    ups = {
        i: clients[i].mask(
            np.zeros(N_NOISE),
            round_id=r,
            participants=IDS,
            codec=codec,
            noise=draw_share(share_streams(key_for(i)), r, N_NOISE, spec.share_std),
            min_survivors=spec.min_survivors,
        )
        for i in IDS
    }
    if erase_bound:  # the twin: the node forgets the m its share was sized for (old code)
        for c in clients.values():
            c._rounds[r].min_survivors = 0
    return clients, ups, codec


def _claim(clients, ups, codec, live, r):
    """The server claims ``live`` survived (everyone uploaded); the released sum or None."""
    gone = sorted(set(IDS) - set(live))
    server = SecAggServer(codec=codec)
    sigs, refusals = {}, []
    for i in live:
        try:
            sigs[i] = clients[i].sign_survivors(round_id=r, survivors=live, dropped=gone)
        except ValueError as err:
            refusals.append(str(err))
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    answers = {}
    for i in live:
        try:
            answers[i] = clients[i].unmask(
                round_id=r, survivors=live, dropped=gone, n=N_NOISE, inbox=inboxes[i],
                signatures=sigs,
            )  # fmt: skip
        except ValueError as err:
            refusals.append(str(err))
    if len(answers) < len(live):
        return None, refusals
    masked = {i: ups[i].vector for i in live}
    return server.aggregate(round_id=r, participants=IDS, masked=masked, answers=answers), []


# --- the node's threshold floor --------------------------------------------------------------
def test_the_threshold_floor_is_the_nodes_and_a_run_setting_only_raises_it():
    low = SecAggConfig(threshold_fraction=0.0)  # the run's setting: t = 2
    assert [low.threshold(n) for n in (5, 10)] == [2, 2]
    assert [low.effective_threshold(n) for n in (5, 10)] == [3, 6]  # default floor: majority
    strict = SecAggConfig(threshold_fraction=0.0, min_threshold_fraction=0.8)
    assert [strict.effective_threshold(n) for n in (2, 5, 10)] == [2, 5, 9]
    assert SecAggConfig(min_threshold_fraction=1.0).effective_threshold(7) == 7
    assert SecAggConfig(threshold_fraction=0.9).effective_threshold(10) == 10  # the run's, higher
    for bad in (0.49, 1.01, float("nan")):
        with pytest.raises(ValueError, match=r"secagg-min-threshold\) must lie in \[0.5, 1\]"):
            SecAggConfig(min_threshold_fraction=bad)
    assert node_config_floor({}) == 0.5
    assert node_config_floor({"secagg-min-threshold": "0.75"}) == 0.75
    with pytest.raises(ValueError, match=r"secagg-min-threshold must lie in \[0.5, 1\]; got 0.2"):
        node_config_floor({"secagg-min-threshold": 0.2})


def _low_threshold_attack(config):
    """Run setting t = 2 for n = 5; the server announces it, claims three dropped, and
    unmasks two inputs. The released sum, or the refusal."""
    clients = _clients(config=config)
    xs = _vectors(IDS, 8, seed=5)
    try:
        ups = _masked(clients, xs, threshold=2)
    except ValueError as err:
        return None, str(err)
    live, gone = [1, 2], [3, 4, 5]
    server = SecAggServer(codec=CODEC, config=config)
    sigs = {i: clients[i].sign_survivors(round_id=0, survivors=live, dropped=gone) for i in live}
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    answers = {
        i: clients[i].unmask(
            round_id=0, survivors=live, dropped=gone, n=8, inbox=inboxes[i], signatures=sigs
        )
        for i in live
    }
    masked = {i: ups[i].vector for i in live}
    total = server.aggregate(round_id=0, participants=IDS, masked=masked, answers=answers)
    return total, sum_plain([xs[1], xs[2]], CODEC)


# --- in-process runs ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def boosting_clients():
    return toy_clients(1500, 5)


def _fit(clients, **kw):
    strategy, rt, ledger = boosting_fit(clients, rounds=8, depth=3, sampling_rate=0.1, **kw)
    return strategy.model(), rt.communication, ledger


def _without_consistency(monkeypatch):
    """The old protocol: no consistency exchange, no signature check anywhere."""
    from fedpriv.federation.runtime import InProcessTransport

    monkeypatch.setattr(InProcessTransport, "consistency", lambda self, plan, s, d: {})
    monkeypatch.setattr(SecAggServer, "check_signatures", lambda self, **kw: {})
    monkeypatch.setattr(secagg_consistency, "check_signatures", lambda **kw: [])


def test_the_consistency_round_leaves_the_released_model_bit_for_bit(boosting_clients, monkeypatch):
    with_check = _fit(boosting_clients, dropout_rate=0.3)
    _without_consistency(monkeypatch)
    without = _fit(boosting_clients, dropout_rate=0.3)
    assert len(with_check[0].trees) == 8
    assert_same_model(with_check[0], without[0])
    assert with_check[2].epsilon() == without[2].epsilon()
    ca, cb = with_check[1], without[1]
    assert ca.rounds_aborted == cb.rounds_aborted and ca.recoveries == cb.recoveries > 0
    released = ca.rounds - ca.rounds_aborted
    assert 0 < released < ca.rounds  # some rounds recovered, some aborted
    assert ca.round_trips == 2 + ca.rounds + 2 * released  # + consistency and unmask each
    # 64 B per signature: each released round, every survivor signed once.
    extra = (ca.bytes_uploaded - cb.bytes_uploaded).sum()
    assert extra % 64 == 0 and released * 3 * 64 <= extra <= released * 5 * 64 + 5 * 32


def test_in_process_nodes_with_a_higher_floor_refuse_every_round(boosting_clients):
    # Every node's floor 0.8 (t = 5 of 5); the run announces its majority t = 3: refused.
    _, comm, ledger = _fit(boosting_clients, node_min_threshold=0.8)
    assert comm.rounds == 8 and comm.rounds_aborted == 8 and len(ledger.entries) == 0
    assert comm.client_errors == 8 * 5
    # The same floor as the run's rule: every round released.
    _, comm, ledger = _fit(boosting_clients, node_min_threshold=0.5)
    assert comm.rounds_aborted == 0 and len(ledger.entries) == 8
