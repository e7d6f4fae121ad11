"""What a secure-aggregation round refuses, and what its server sees: an unmask request
that overlaps, repeats or is malformed; inconsistent or forged Shamir shares (each
aborts the round); survivors grouped by the points of their shares' holders; the
server routing sealed bytes between survivors only (Bonawitz et al., CCS 2017, §4).
"""

import numpy as np
import pytest

from fedpriv.federation import shamir
from fedpriv.federation.secagg import SecAggAbort, SecAggClient, SecAggServer, UnmaskAnswer
from fedpriv.federation.secagg_server import seed_groups
from fedpriv.federation.secagg_topology import Complete
from tests.federation.secagg_parties import (
    CODEC,
    _clients,
    _sigs,
    _vectors,
)


# --- the unmask request --------------------------------------------------------
def _masked_round(k=5, r=5, n=10, seed=11):
    clients = _clients(k)
    xs = _vectors(clients, n, seed=seed)
    ups = {
        i: clients[i].mask(xs[i], round_id=r, participants=sorted(clients), codec=CODEC) for i in xs
    }
    server = SecAggServer(codec=CODEC)
    return clients, ups, server


def test_unmask_refuses_overlapping_survivor_and_dropped_lists():
    clients, ups, server = _masked_round()
    inbox = server.inboxes([1, 2, 3, 4], {i: u.shares for i, u in ups.items()})[1]
    with pytest.raises(ValueError, match=r"clients \[4\] are listed both as survivors and as"):
        clients[1].unmask(
            round_id=5, survivors=[1, 2, 3, 4], dropped=[4, 5], n=10, inbox=inbox, signatures={}
        )
    # The refusal released nothing and committed nothing: an honest request is answered.
    sigs = _sigs(clients, 5, [1, 2, 3, 4], [5])
    got = clients[1].unmask(
        round_id=5, survivors=[1, 2, 3, 4], dropped=[5], n=10, inbox=inbox, signatures=sigs
    )
    assert sorted(got.shares) == [1, 2, 3, 4] and got.lost == (5,)


def test_unmask_refuses_a_second_request_for_the_same_round():
    clients, ups, server = _masked_round()
    boxes = {i: u.shares for i, u in ups.items()}
    first = server.inboxes([1, 2, 3, 4, 5], boxes)[1]
    sigs = _sigs(clients, 5, [1, 2, 3, 4, 5], [])
    clients[1].unmask(
        round_id=5, survivors=[1, 2, 3, 4, 5], dropped=[], n=10, inbox=first, signatures=sigs
    )
    # A second request, same lists or other ones, would hand out shares and masks of one
    # client under two views: refused either way.
    second = server.inboxes([1, 2, 3, 4], boxes)[1]
    for live, gone, inbox in [([1, 2, 3, 4, 5], [], first), ([1, 2, 3, 4], [5], second)]:
        with pytest.raises(ValueError, match="already answered the unmask of round 5"):
            clients[1].unmask(
                round_id=5, survivors=live, dropped=gone, n=10, inbox=inbox, signatures=sigs
            )
    # The rule survives a restart from the exported state.
    sk, book = clients[1].export_state()
    again = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    with pytest.raises(ValueError, match="already answered"):
        again.unmask(
            round_id=5, survivors=[1, 2, 3, 4], dropped=[5], n=10, inbox=second, signatures=sigs
        )


def test_unmask_answers_only_well_formed_requests():
    clients, ups, server = _masked_round()
    inbox = server.inboxes([1, 2, 3, 4], {i: u.shares for i, u in ups.items()})[1]
    c = clients[1]
    sigs = _sigs(clients, 5, [1, 2, 3, 4], [5])
    with pytest.raises(ValueError, match="never masked for round 6"):
        c.unmask(
            round_id=6, survivors=[1, 2, 3, 4], dropped=[5], n=10, inbox=inbox, signatures=sigs
        )
    with pytest.raises(ValueError, match="must split the round-5 participants"):
        c.unmask(
            round_id=5, survivors=[1, 2, 3], dropped=[5], n=10, inbox=inbox, signatures=sigs
        )  # 4 unlisted
    with pytest.raises(ValueError, match="must split the round-5 participants"):
        c.unmask(
            round_id=5, survivors=[1, 2, 3, 4], dropped=[5, 9], n=10, inbox=inbox, signatures=sigs
        )
    with pytest.raises(ValueError, match="with client 1 a survivor"):
        c.unmask(
            round_id=5, survivors=[2, 3, 4], dropped=[1, 5], n=10, inbox=inbox, signatures=sigs
        )
    with pytest.raises(ValueError, match="n must equal"):
        c.unmask(
            round_id=5, survivors=[1, 2, 3, 4], dropped=[5], n=11, inbox=inbox, signatures=sigs
        )
    with pytest.raises(ValueError, match=r"no share of client 3's round-5 seed: neither held"):
        c.unmask(
            round_id=5,
            survivors=[1, 2, 3, 4],
            dropped=[5],
            n=10,
            inbox={2: inbox[2]},
            signatures=sigs,
        )
    moved = {**inbox, 2: inbox[3], 3: inbox[2]}  # ciphertexts moved between senders
    with pytest.raises(ValueError, match="failed authentication"):
        c.unmask(
            round_id=5, survivors=[1, 2, 3, 4], dropped=[5], n=10, inbox=moved, signatures=sigs
        )
    other = _clients(5, seed=1)[3].mask(
        np.zeros(10), round_id=5, participants=[1, 2, 3, 4, 5], codec=CODEC
    )
    with pytest.raises(ValueError, match="failed authentication"):  # another run's key
        c.unmask(
            round_id=5,
            survivors=[1, 2, 3, 4],
            dropped=[5],
            n=10,
            inbox={**inbox, 3: other.shares[1]},
            signatures=sigs,
        )
    got = c.unmask(
        round_id=5, survivors=[1, 2, 3, 4], dropped=[5], n=10, inbox=inbox, signatures=sigs
    )
    assert isinstance(got, UnmaskAnswer) and got.nbytes == 4 * shamir.SHARE_BYTES + 8 * 10 + 8


def _forge_limb(raw, value):
    share = shamir.from_bytes(raw)
    share[3] = value(share[3])  # one limb of five
    return share.astype("<u8").tobytes()


FORGED_SHARES = {
    # answer 2's share of client 4's seed -> the abort it must cause
    "off_the_polynomial": (
        lambda raw: _forge_limb(raw, lambda v: (v + np.uint64(1)) % np.uint64(shamir.PRIME)),
        r"seed of client 4 is unrecoverable.*some share is wrong",
    ),
    "not_a_field_element": (
        lambda raw: _forge_limb(raw, lambda v: np.uint64(shamir.PRIME)),
        r"seed of client 4 is unrecoverable.*x = 3 is not an element of GF",
    ),
    "too_short": (lambda raw: raw[:-1], r"client 2's unmask answer holds a share that is not 40"),
}


@pytest.mark.parametrize("case", sorted(FORGED_SHARES))
def test_inconsistent_or_malformed_shares_are_detected_and_abort_the_round(case):
    clients, ups, server = _masked_round()
    live = [1, 2, 3, 4, 5]
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 5, live, [])
    answers = {
        i: clients[i].unmask(
            round_id=5, survivors=live, dropped=[], n=10, inbox=inboxes[i], signatures=sigs
        )
        for i in live
    }
    forge, why = FORGED_SHARES[case]
    bad = forge(answers[2].shares[4])
    answers[2] = UnmaskAnswer(shares={**answers[2].shares, 4: bad})
    masked = {i: u.vector for i, u in ups.items()}
    with pytest.raises(SecAggAbort, match=why):
        server.aggregate(round_id=5, participants=live, masked=masked, answers=answers)
    assert not server.accept_late(5, 4)  # the round is closed: nothing is released for it


def test_survivors_are_grouped_by_the_points_of_the_answers_holding_their_shares():
    # One Lagrange computation per group. Under the complete graph every answer holds
    # every survivor's share at its own point (id + 1): one group, whoever answered.
    # (The sparse graph's groups: tests/federation/test_secagg_plus.py.)
    hood = Complete(participants=(1, 2, 3, 4), threshold=3)
    assert seed_groups(hood, (1, 2, 3, 4), (1, 2, 3, 4)) == {
        (2, 3, 4, 5): [(u, (1, 2, 3, 4)) for u in (1, 2, 3, 4)]
    }
    assert seed_groups(hood, (1, 3, 4), (1, 2, 3, 4)) == {
        (2, 4, 5): [(u, (1, 3, 4)) for u in (1, 2, 3, 4)]
    }


def test_server_sees_only_bytes_and_routes_shares_between_survivors_only():
    _, ups, server = _masked_round(k=3, r=0, n=20)
    payload = {i: bytes(u.vector) for i, u in ups.items()}  # as sent on the wire
    masked = {i: np.frombuffer(b, dtype=np.uint64) for i, b in payload.items()}
    for u in ups.values():
        # One round's batch: a 10-byte header (first round, rounds), the share, its tag.
        assert all(len(ct) == 10 + 40 + 16 for ct in u.shares.values())
        assert u.nbytes == 8 * 20 + 2 * 66
    inboxes = server.inboxes([1, 3], {i: u.shares for i, u in ups.items()})
    assert inboxes == {1: {3: ups[3].shares[1]}, 3: {1: ups[1].shares[3]}}
    with pytest.raises(ValueError, match="survivor 1 sent no encrypted share for survivor 3"):
        server.inboxes([1, 3], {1: {}, 3: ups[3].shares})
    with pytest.raises(ValueError, match="must be uint64 of shape"):
        server.aggregate(
            round_id=1, participants=[1, 2], masked={1: np.zeros(3), 2: np.zeros(3)}, answers={}
        )
    with pytest.raises(ValueError, match="must come from participants"):
        server.aggregate(round_id=1, participants=[1, 2], masked={3: masked[3]}, answers={})
