"""Many Shamir reconstructions at once (``shamir.reconstruct_many``): the same secrets and
the same refusals as one ``reconstruct`` per item, and a SecAgg+ round whose seeds have
different holder sets (a silent neighbour) names the client whose seed a forged share
spoils."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.federation import field, shamir
from fedpriv.federation.secagg import SecAggAbort, SecAggServer, sum_plain
from tests.federation.secagg_plus_rounds import CODEC, _clients, _finish_round, _mask, _vectors

P = shamir.PRIME


def _items(data, prime, t, count):
    """``count`` items of shares of random secrets at distinct point sets of t..t + 4."""
    items, secrets = [], []
    for _ in range(count):
        n = t + data.draw(st.integers(0, 4))
        xs = data.draw(st.lists(st.integers(1, min(prime - 1, 300)), min_size=n, max_size=n,
                                unique=True))  # fmt: skip
        batch = data.draw(st.sampled_from([(), (2,), (shamir.LIMBS,)]))
        s = field.random_elements(batch, prime) if batch else field.random_elements(1, prime)[0]
        s = np.asarray(s, dtype=np.uint64)
        items.append((xs, shamir.split(s, xs=xs, threshold=t, prime=prime)))
        secrets.append(s)
    return items, secrets


@settings(max_examples=30, deadline=None, derandomize=True)
@given(prime=st.sampled_from([P, 2**31 - 1]), t=st.integers(1, 6), count=st.integers(1, 7),
       data=st.data())  # fmt: skip
def test_many_items_reconstruct_as_one_call_each(prime, t, count, data):
    items, secrets = _items(data, prime, t, count)
    got = shamir.reconstruct_many(items, threshold=t, prime=prime)
    assert len(got) == count
    for (xs, ys), s, g in zip(items, secrets, got, strict=True):
        np.testing.assert_array_equal(g, s)
        np.testing.assert_array_equal(g, shamir.reconstruct(xs, ys, threshold=t, prime=prime))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(t=st.integers(1, 5), count=st.integers(2, 6), data=st.data())
def test_a_wrong_share_names_its_item_and_secret_and_too_few_points_their_item(t, count, data):
    items, _ = _items(data, P, t, count)
    k = data.draw(st.integers(0, count - 1))
    xs, ys = items[k]
    if len(xs) > t:  # a wrong extra share is detected (exactly t could not be)
        ys = ys.copy()
        row = data.draw(st.integers(0, len(xs) - 1))
        flat = ys.reshape(len(xs), -1)
        col = data.draw(st.integers(0, flat.shape[1] - 1))
        flat[row, col] = (flat[row, col] + np.uint64(1)) % np.uint64(P)
        bad = [*items[:k], (xs, ys), *items[k + 1 :]]
        with pytest.raises(shamir.ShamirError, match="some share is wrong") as err:
            shamir.reconstruct_many(bad, threshold=t)
        assert err.value.item == k
        assert err.value.index == tuple(np.unravel_index(col, ys.shape[1:]))
        shamir.reconstruct_many(items, threshold=t)  # the twin: untouched, accepted
    short = [*items[:k], (xs[: t - 1], ys[: t - 1]), *items[k + 1 :]]
    with pytest.raises(shamir.ShamirError, match=f"need at least threshold = {t}") as err:
        shamir.reconstruct_many(short, threshold=t)
    assert err.value.item == k


def test_a_forged_share_in_a_round_with_a_silent_neighbour_names_its_owner():
    clients = _clients()
    g = clients[0].graph
    xs = _vectors(range(len(clients)), seed=4)
    silent = 5  # its neighbours' seeds each miss one holder: one group per missing rank
    honest = _finish_round(clients, SecAggServer(codec=CODEC, graph=g), _mask(clients, xs, 0),
                           silent={silent})  # fmt: skip
    np.testing.assert_array_equal(honest[0], sum_plain(xs.values(), CODEC))  # exact
    owner = g.neighbours(silent)[0]  # its seed's holders lack 5: not the full group
    holder = next(h for h in g.neighbours(owner) if h != silent)
    server = SecAggServer(codec=CODEC, graph=g)
    _, answers, _ = _finish_round(clients, server, ups := _mask(clients, xs, 1), 1,
                                  silent={silent}, aggregate=False)  # fmt: skip
    share = shamir.from_bytes(answers[holder].shares[owner])
    share[2] = (share[2] + np.uint64(1)) % np.uint64(P)
    forged = {**answers[holder].shares, owner: share.astype("<u8").tobytes()}
    answers[holder] = dataclasses.replace(answers[holder], shares=forged)
    with pytest.raises(SecAggAbort, match=rf"seed of client {owner} is unrecoverable"):
        server.aggregate(round_id=1, participants=sorted(clients),
                         masked={i: u.vector for i, u in ups.items()}, answers=answers)  # fmt: skip


@pytest.mark.parametrize("prime", [P, 8191])
def test_the_combined_check_refuses_every_off_share_and_passes_the_untouched(prime):
    # Many extra shares are checked by random combinations of their rows (p^−rows ≤ 2^−60
    # per wrong column): a share one off in any row and column is never let through.
    t, extra = 12, 30
    xs = list(range(1, t + extra + 1))
    seeds = field.random_elements((40, shamir.LIMBS), prime)
    ys = shamir.split(seeds, xs=xs, threshold=t, prime=prime)
    flat = ys.reshape(len(xs), -1)
    weights = shamir.lagrange_weights(tuple(xs[:t]), (0, *xs[t:]), prime)
    rng = np.random.default_rng(7)
    for _ in range(100):
        bad = flat.copy()
        row, col = int(rng.integers(t, t + extra)), int(rng.integers(flat.shape[1]))
        bad[row, col] = (bad[row, col] + np.uint64(rng.integers(1, prime))) % np.uint64(prime)
        assert shamir._checked(weights, bad, t, prime) is None
    # The twin: untouched shares pass and give the seeds.
    got = shamir._checked(weights, flat, t, prime)
    np.testing.assert_array_equal(got.reshape(seeds.shape), seeds)


def test_the_servers_share_layout_follows_each_answers_own_order(monkeypatch):
    # The server finds each share by its place in its holder's answer, remembered while the
    # answers' orders repeat: an answer listing the same shares in another order is read by
    # that order, never by the remembered one.
    from fedpriv.federation import secagg_server

    clients = _clients()
    xs = _vectors(clients, seed=3)
    ups = _mask(clients, xs, 0)
    server = SecAggServer(codec=CODEC, graph=clients[0].graph)
    total, answers, _ = _finish_round(clients, server, ups)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
    masked = {i: u.vector for i, u in ups.items()}

    def again(answers):
        fresh = SecAggServer(codec=CODEC, graph=clients[0].graph)
        return fresh.aggregate(round_id=0, participants=sorted(clients), masked=masked,
                               answers=answers)  # fmt: skip

    np.testing.assert_array_equal(again(answers), total)  # the remembered layout
    stale = secagg_server._last_index[0][1]
    turned = dict(answers)
    for i in list(turned)[:3]:  # three answers list their shares backwards
        a = turned[i]
        turned[i] = type(a)(shares=dict(reversed(list(a.shares.items()))), lost=a.lost, mask=a.mask)
    np.testing.assert_array_equal(again(turned), total)
    # The twin: a server that kept the remembered layout reads the wrong shares.
    monkeypatch.setattr(secagg_server, "_share_index", lambda *a: stale)
    with pytest.raises(SecAggAbort, match="unrecoverable"):
        again(turned)
