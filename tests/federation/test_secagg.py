"""Secure aggregation: exact sums, double masking against stragglers, pinned keys, Shamir.

Protocol and threat model: ``fedpriv/federation/secagg.py`` (Bonawitz et al., CCS 2017,
§4). Shamir sharing: ``fedpriv/federation/shamir.py`` (Shamir 1979).
"""

import time

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.errors import ClientFailure
from fedpriv.federation import shamir
from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggAbort,
    SecAggClient,
    SecAggConfig,
    SecAggKeyError,
    SecAggOverflowError,
    SecAggServer,
    UnmaskAnswer,
    sum_plain,
)
from fedpriv.federation.secagg_server import seed_groups
from fedpriv.federation.secagg_topology import Complete

ALPHA = 1e-3  # false-alarm rate of the chi-square uniformity tests (fixed keys: deterministic)
# Self-mask seeds come from the OS CSPRNG, so tests on them vary run to run: a smaller
# false-alarm rate keeps them from flaking, with power to spare (the twins give p ≈ 0).
ALPHA_FRESH = 1e-6
EPS = np.finfo(np.float64).eps
CODEC = FixedPointCodec(scale=2.0**20, max_abs=3.0, max_summands=8)


def _clients(k, seed=0, *, ids=None, cls=None):
    """K set-up clients (pinned key book) with fixed (test-only) keys."""
    rng = np.random.default_rng(seed)
    ids = list(range(1, k + 1)) if ids is None else ids
    cls = cls or {}
    clients = {
        i: cls.get(i, SecAggClient)(client_id=i, private_key_bytes=rng.bytes(32)) for i in ids
    }
    keys = {i: c.public_key for i, c in clients.items()}
    verify = {i: c.verify_key for i, c in clients.items()}
    for c in clients.values():
        c.setup(keys, verify_keys=verify)
    return clients


def _sigs(clients, r, live, gone, signers=None):
    """The consistency round, honest: each survivor (or each of ``signers``) signs (S, D)."""
    return {
        j: clients[j].sign_survivors(round_id=r, survivors=live, dropped=gone)
        for j in (live if signers is None else signers)
    }


def _vectors(ids, n, seed, max_abs=CODEC.max_abs):
    rng = np.random.default_rng(seed)
    return {i: rng.uniform(-max_abs, max_abs, size=n) for i in ids}


def _round(clients, xs, r, *, participants=None, late=(), codec=CODEC, server=None):
    """One honest round. Every client in ``xs`` masks; those in ``late`` reply after the
    deadline (the server holds their reply but treats them as dropped), participants
    not in ``xs`` never reply. Returns (sum, every masked upload, unmask answers)."""
    participants = sorted(clients) if participants is None else participants
    server = server or SecAggServer(codec=codec)
    ups = {
        i: clients[i].mask(xs[i], round_id=r, participants=participants, codec=codec) for i in xs
    }
    on_time = {i: u for i, u in ups.items() if i not in late}
    live, gone = server.unmask_plan(round_id=r, participants=participants, masked=on_time)
    inboxes = server.inboxes(live, {i: u.shares for i, u in on_time.items()})
    n = len(next(iter(xs.values())))
    sigs = _sigs(clients, r, live, gone)
    answers = {
        i: clients[i].unmask(
            round_id=r, survivors=live, dropped=gone, n=n, inbox=inboxes[i], signatures=sigs
        )
        for i in live
    }
    masked = {i: u.vector for i, u in on_time.items()}
    total = server.aggregate(round_id=r, participants=participants, masked=masked, answers=answers)
    return total, ups, answers


def _tolerance(k, codec=CODEC):
    # K rounding errors of 0.5/scale each, plus float error in x·scale, the sum and decoding.
    return k * 0.5 / codec.scale + 8 * k * codec.max_abs * EPS


# --- exactness --------------------------------------------------------------
@settings(max_examples=25, deadline=None, derandomize=True)
@given(k=st.integers(2, 8), n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_sum_is_exact_within_fixed_point_error(k, n, seed):
    clients = _clients(k, seed)
    xs = _vectors(clients, n, seed)
    xs[1][0] = CODEC.max_abs  # the bounds themselves must encode and sum correctly
    xs[2][-1] = -CODEC.max_abs
    total = _round(clients, xs, seed)[0]
    assert total.dtype == np.float64
    np.testing.assert_allclose(total, sum(xs.values()), rtol=0, atol=_tolerance(k))


def test_secure_and_plain_paths_give_identical_sums():
    clients = _clients(5)
    xs = _vectors(clients, 257, seed=3)
    np.testing.assert_array_equal(_round(clients, xs, 0)[0], sum_plain(xs.values(), CODEC))


def test_aggregate_does_not_depend_on_the_keys_or_the_self_mask_seeds():
    # CSPRNG keys and seeds differ every run; the released sum must not.
    xs = _vectors(range(1, 5), 64, seed=4)
    sums = [_round(_clients(4, seed=s), xs, 0)[0] for s in (1, 2)]
    fresh = {i: SecAggClient(client_id=i) for i in range(1, 5)}
    keys = {i: c.public_key for i, c in fresh.items()}
    verify = {i: c.verify_key for i, c in fresh.items()}
    assert len(set(keys.values())) == 4 and len(set(verify.values())) == 4
    for c in fresh.values():
        c.setup(keys, verify_keys=verify)
    sums.append(_round(fresh, xs, 0)[0])
    np.testing.assert_array_equal(sums[0], sums[1])
    np.testing.assert_array_equal(sums[0], sums[2])


# --- masks hide the vector ----------------------------------------------------
def test_pair_mask_is_the_specified_chacha20_keystream():
    # Recompute m_12^r from the spec: HKDF-SHA256(X25519) key, ChaCha20 with a 16-byte nonce
    # (le32 block counter ‖ b"fpSA" ‖ le64 round id) encrypting zeros.
    sk1, sk2 = bytes(range(32)), bytes(range(32, 64))
    c1 = SecAggClient(client_id=1, private_key_bytes=sk1)
    c2 = SecAggClient(client_id=2, private_key_bytes=sk2)
    c3 = SecAggClient(client_id=3)
    keys = {1: c1.public_key, 2: c2.public_key, 3: c3.public_key}
    verify = {1: c1.verify_key, 2: c2.verify_key, 3: c3.verify_key}
    c1.setup(keys, verify_keys=verify)
    c3.setup(keys, verify_keys=verify)
    c1.mask(np.zeros(300), round_id=41, participants=[1, 2, 3], codec=CODEC)
    up3 = c3.mask(np.zeros(300), round_id=41, participants=[1, 2, 3], codec=CODEC)
    inbox = {3: up3.shares[1]}
    sigs = _sigs({1: c1, 3: c3}, 41, [1, 3], [2])
    got = c1.unmask(round_id=41, survivors=[1, 3], dropped=[2], n=300, inbox=inbox, signatures=sigs)
    shared = X25519PrivateKey.from_private_bytes(sk1).exchange(
        X25519PrivateKey.from_private_bytes(sk2).public_key()
    )
    info = b"fedpriv-secagg" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    nonce = (1).to_bytes(4, "little") + b"fpSA" + (41).to_bytes(8, "little")
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(2400))
    np.testing.assert_array_equal(got.masks[2], np.frombuffer(stream, dtype="<u8"))


def _byte_chi2_p(words):
    counts = np.bincount(np.asarray(words, dtype=np.uint64).view(np.uint8), minlength=256)
    return stats.chisquare(counts).pvalue


def test_one_masked_vector_looks_uniform_and_the_test_has_power():
    clients = _clients(3, seed=5)
    x = np.random.default_rng(6).normal(0.0, 1.0, size=20_000).clip(-3.0, 3.0)
    masked = clients[2].mask(x, round_id=0, participants=[1, 2, 3], codec=CODEC).vector
    assert _byte_chi2_p(masked) > ALPHA_FRESH
    assert _byte_chi2_p(CODEC.encode(x)) < ALPHA  # the unmasked encoding is far from uniform


def test_masks_change_every_round_and_a_round_is_masked_once():
    clients = _clients(3)
    x = np.full(100, 0.5)
    m0 = clients[1].mask(x, round_id=0, participants=[1, 2, 3], codec=CODEC).vector
    m1 = clients[1].mask(x, round_id=1, participants=[1, 2, 3], codec=CODEC).vector
    assert not np.intersect1d(m0, m1).size  # not equal, nor a shifted copy
    with pytest.raises(ValueError, match="already masked for round 1"):
        clients[1].mask(x, round_id=1, participants=[1, 2, 3], codec=CODEC)


# --- fixed-point range ------------------------------------------------------
def test_overflow_is_refused_at_configuration_time_with_the_numbers():
    msg = r"8 \* \(1\.0 \* 1\.152921504606847e\+18 \+ 0\.5\) = 9\.22337e\+18 must be < 2\*\*63 - 1"
    with pytest.raises(SecAggOverflowError, match=msg):
        FixedPointCodec(scale=2.0**60, max_abs=1.0, max_summands=8)
    with pytest.raises(SecAggOverflowError, match="smaller scale"):
        FixedPointCodec(scale=1e300, max_abs=1e300, max_summands=1)  # product is inf
    with pytest.raises(SecAggOverflowError):  # exact arithmetic: 2^63 itself is refused
        FixedPointCodec(scale=1.0, max_abs=2.0**63, max_summands=1)
    # Exact limit, which float arithmetic would blur: the worst sum 2^63 − 1 itself is refused,
    # 2^63 − 2 is accepted.
    with pytest.raises(SecAggOverflowError):
        FixedPointCodec(scale=1.0, max_abs=0.5, max_summands=2**63 - 1)
    FixedPointCodec(scale=1.0, max_abs=0.5, max_summands=2**63 - 2)
    assert issubclass(SecAggOverflowError, ValueError)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_boundary_just_below_the_limit_is_accepted_and_sums_exactly(sign):
    # 8·(2^60 − 256 + 0.5) = 2^63 − 2044 < 2^63 − 1: the largest sum just fits int64.
    codec = FixedPointCodec(scale=2.0**60 - 256, max_abs=1.0, max_summands=8)
    clients = _clients(8)
    xs = {i: np.array([sign, -sign, 0.0]) for i in clients}
    total = _round(clients, xs, 0, codec=codec)[0]
    np.testing.assert_array_equal(total, [8 * sign, -8 * sign, 0.0])
    top = np.nextafter(2.0**63, 0.0)  # largest float below 2^63, single summand
    single = FixedPointCodec(scale=1.0, max_abs=top, max_summands=1)
    assert single.decode(single.encode([top, -top]))[0] == top


@pytest.mark.parametrize(
    ("kwargs", "err"),
    [
        ({"scale": 0.0, "max_abs": 1.0, "max_summands": 2}, ValueError),
        ({"scale": float("nan"), "max_abs": 1.0, "max_summands": 2}, ValueError),
        ({"scale": 1.0, "max_abs": float("inf"), "max_summands": 2}, ValueError),
        ({"scale": 1.0, "max_abs": 1.0, "max_summands": 0}, ValueError),
        ({"scale": 1.0, "max_abs": 1.0, "max_summands": 2.5}, TypeError),
    ],
)
def test_codec_rejects_bad_parameters(kwargs, err):
    with pytest.raises(err):
        FixedPointCodec(**kwargs)


def test_encode_refuses_out_of_bound_and_non_finite_values():
    with pytest.raises(ValueError, match=r"max_abs = 3\.0 .*found -3\.5 at flat index 1"):
        CODEC.encode([0.0, -3.5, 1.0])
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="finite"):
            CODEC.encode([0.0, bad])
    with pytest.raises(TypeError, match="uint64"):
        CODEC.decode(np.zeros(3, dtype=np.int64))
    assert CODEC.resolution == 2.0**-20
    enc = CODEC.encode([-1.0, 1.0])
    assert enc.dtype == np.uint64 and enc[0] == 2**64 - 2**20  # two's complement


# --- dropouts and stragglers ---------------------------------------------------
@pytest.mark.parametrize("dropped", [[3], [1, 4]])
def test_dropout_is_recovered_exactly_from_one_unmask_exchange(dropped):
    clients = _clients(5)
    xs = _vectors([i for i in clients if i not in dropped], 64, seed=7)
    total, _, answers = _round(clients, xs, 0)
    assert sorted(answers) == sorted(xs)  # one answer per survivor, every round
    for got in answers.values():
        assert sorted(got.shares) == sorted(xs) and sorted(got.masks) == dropped
    np.testing.assert_allclose(total, sum(xs.values()), rtol=0, atol=_tolerance(5))
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))


def test_a_survivor_silent_at_the_unmask_is_recovered_from_t_shares_without_dropouts():
    clients = _clients(5)  # t = 3
    xs = _vectors(clients, 32, seed=8)
    server = SecAggServer(codec=CODEC)
    ups = {
        i: clients[i].mask(xs[i], round_id=0, participants=[1, 2, 3, 4, 5], codec=CODEC) for i in xs
    }
    live, gone = server.unmask_plan(round_id=0, participants=[1, 2, 3, 4, 5], masked=ups)
    assert (live, gone) == ([1, 2, 3, 4, 5], [])
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 0, live, gone)
    answers = {
        i: clients[i].unmask(
            round_id=0, survivors=live, dropped=gone, n=32, inbox=inboxes[i], signatures=sigs
        )
        for i in (1, 3, 5)  # 2 and 4 fall silent: their self-masks come from 3 = t shares
    }
    masked = {i: u.vector for i, u in ups.items()}
    total = server.aggregate(round_id=0, participants=live, masked=masked, answers=answers)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))


def test_every_round_needs_the_unmask_answers():
    # Without them the sum is still covered by every survivor's self-mask: noise.
    clients = _clients(4)
    xs = _vectors(clients, 8, seed=8)
    ups = {
        i: clients[i].mask(xs[i], round_id=0, participants=[1, 2, 3, 4], codec=CODEC) for i in xs
    }
    plain = sum((u.vector for u in ups.values()), start=np.zeros(8, dtype=np.uint64))
    assert np.abs(CODEC.decode(plain) - sum(xs.values())).min() > 1.0
    server = SecAggServer(codec=CODEC)
    masked = {i: u.vector for i, u in ups.items()}
    with pytest.raises(SecAggAbort, match=r"0 unmask answers, below threshold t = 3"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4], masked=masked, answers={})


def test_fewer_than_t_survivors_abort_the_round_and_release_nothing():
    clients = _clients(5)  # t = 3
    xs = _vectors([1, 2], 16, seed=9)
    ups = {
        i: clients[i].mask(xs[i], round_id=0, participants=[1, 2, 3, 4, 5], codec=CODEC) for i in xs
    }
    server = SecAggServer(codec=CODEC)
    with pytest.raises(SecAggAbort, match=r"2 of 5 replied, below threshold t = 3"):
        server.unmask_plan(round_id=0, participants=[1, 2, 3, 4, 5], masked=ups)
    assert not server.accept_late(0, 3)  # closed: no later reply or answer revives it
    with pytest.raises(ValueError, match="round 0 is closed"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4, 5], masked={}, answers={})
    # The clients refuse too: even a server that asked would get nothing.
    with pytest.raises(ValueError, match=r"2 survivors < threshold t = 3"):
        clients[1].unmask(
            round_id=0, survivors=[1, 2], dropped=[3, 4, 5], n=16, inbox={}, signatures={}
        )
    # And t answers are needed even when t survivors replied: 2 answers of 3 abort.
    xs = _vectors([1, 2, 3], 16, seed=10)
    ups = {
        i: clients[i].mask(xs[i], round_id=1, participants=[1, 2, 3, 4, 5], codec=CODEC) for i in xs
    }
    server = SecAggServer(codec=CODEC)
    live, gone = server.unmask_plan(round_id=1, participants=[1, 2, 3, 4, 5], masked=ups)
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 1, live, gone)
    answers = {
        i: clients[i].unmask(
            round_id=1, survivors=live, dropped=gone, n=16, inbox=inboxes[i], signatures=sigs
        )
        for i in (1, 2)
    }
    masked = {i: u.vector for i, u in ups.items()}
    with pytest.raises(SecAggAbort, match="2 unmask answers, below threshold t = 3"):
        server.aggregate(round_id=1, participants=[1, 2, 3, 4, 5], masked=masked, answers=answers)
    assert issubclass(SecAggAbort, RuntimeError)


def test_with_dropouts_a_survivor_missing_from_the_unmask_aborts_the_round():
    clients = _clients(5)
    xs = _vectors([1, 2, 4, 5], 16, seed=9)
    server = SecAggServer(codec=CODEC)
    ups = {
        i: clients[i].mask(xs[i], round_id=0, participants=[1, 2, 3, 4, 5], codec=CODEC) for i in xs
    }
    live, gone = server.unmask_plan(round_id=0, participants=[1, 2, 3, 4, 5], masked=ups)
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 0, live, gone)
    answers = {
        i: clients[i].unmask(
            round_id=0, survivors=live, dropped=gone, n=16, inbox=inboxes[i], signatures=sigs
        )
        for i in (1, 2, 4)  # 5 silent: its pair mask with 3 stays in the sum
    }
    masked = {i: u.vector for i, u in ups.items()}
    with pytest.raises(SecAggAbort, match=r"survivors \[5\] did not reveal"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4, 5], masked=masked, answers=answers)
    assert not server.accept_late(0, 3)


class _PairwiseOnly(SecAggClient):
    """The old protocol's client: pair masks only, no self-mask (for the regression test)."""

    def _self_mask(self, seed, round_id, n):
        return np.zeros(n, dtype=np.uint64)


def _late_reply_attack(late, answers, straggler):
    """The server's best guess at a straggler's encoding: its late reply with every pair
    mask it received removed (all it legitimately holds about the straggler)."""
    guess = late.vector.copy()
    for got in answers.values():
        assert straggler not in got.shares  # no survivor ever hands out a share of its seed
        np.add(guess, got.masks[straggler], out=guess)
    return guess


@pytest.mark.parametrize("cls", [SecAggClient, _PairwiseOnly], ids=["double", "pairwise-only"])
def test_a_late_reply_plus_every_unmask_answer_does_not_unmask_the_straggler(cls):
    clients = _clients(5, cls={2: cls})  # client 2 is the straggler
    xs = _vectors(clients, 4096, seed=10)
    total, ups, answers = _round(clients, xs, 0, late=[2])
    np.testing.assert_array_equal(total, sum_plain([xs[i] for i in (1, 3, 4, 5)], CODEC))
    guess = _late_reply_attack(ups[2], answers, 2)
    truth = CODEC.encode(xs[2])
    if cls is _PairwiseOnly:  # the audit's attack on the old protocol: exact recovery
        np.testing.assert_array_equal(guess, truth)
    else:  # what is left is PRG(b_2^0), uniform, and no share of b_2^0 was released
        assert not np.any(guess == truth)
        assert _byte_chi2_p(guess - truth) > ALPHA_FRESH
        assert _byte_chi2_p(guess) > ALPHA_FRESH


def test_the_straggler_guess_has_the_same_distribution_whatever_its_vector():
    # Two very different straggler vectors, fresh seeds each round: the low bytes of the
    # server's best reconstruction follow the same (uniform) law, so the guess is
    # independent of the straggler's vector. The pairwise-only twin fails the same test.
    low = {}
    for label, value, cls in [
        ("zero", 0.0, SecAggClient),
        ("max", 3.0, SecAggClient),
        ("twin", 3.0, _PairwiseOnly),
    ]:
        clients = _clients(4, seed=11, cls={4: cls})
        counts = np.zeros(256, dtype=np.int64)
        for r in range(4):
            xs = {i: np.full(2048, value if i == 4 else 1.0) for i in clients}
            _, ups, answers = _round(clients, xs, r, late=[4])
            guess = _late_reply_attack(ups[4], answers, 4)
            counts += np.bincount((guess & np.uint64(0xFF)).astype(np.int64), minlength=256)
        low[label] = counts
    assert stats.chisquare(low["zero"]).pvalue > ALPHA_FRESH
    assert stats.chisquare(low["max"]).pvalue > ALPHA_FRESH
    assert stats.chi2_contingency(np.stack([low["zero"], low["max"]]))[1] > ALPHA_FRESH
    assert stats.chi2_contingency(np.stack([low["zero"], low["twin"]]))[1] < ALPHA_FRESH  # power


def test_a_late_reply_is_refused_once_the_round_is_closed():
    clients = _clients(5)
    xs = _vectors(clients, 32, seed=10)
    server = SecAggServer(codec=CODEC)
    assert server.accept_late(0, 2)  # still open
    _, ups, answers = _round(clients, xs, 0, late=[2], server=server)
    assert not server.accept_late(0, 2)
    masked = {i: u.vector for i, u in ups.items()}
    with pytest.raises(ValueError, match="closed"):
        server.aggregate(round_id=0, participants=sorted(clients), masked=masked, answers=answers)


def test_round_r_pair_masks_say_nothing_about_round_r_plus_one():
    clients = _clients(4)
    revealed = []
    for r in (0, 1):
        xs = _vectors([1, 2, 3], 500, seed=r)
        total, _, answers = _round(clients, xs, r, participants=[1, 2, 3, 4])
        np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
        revealed.append({i: a.masks[4] for i, a in answers.items()})
    for i in (1, 2, 3):
        assert not np.intersect1d(revealed[0][i], revealed[1][i]).size


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
    assert sorted(got.shares) == [1, 2, 3, 4] and sorted(got.masks) == [5]


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
    with pytest.raises(ValueError, match=r"one encrypted share from each other survivor"):
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
    assert isinstance(got, UnmaskAnswer) and got.nbytes == 4 * shamir.SHARE_BYTES + 8 * 10


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
    answers[2] = UnmaskAnswer(shares={**answers[2].shares, 4: bad}, masks={})
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
        assert all(len(ct) == 40 + 16 for ct in u.shares.values())  # share + Poly1305 tag
        assert u.nbytes == 8 * 20 + 2 * 56
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


# --- pinned keys ---------------------------------------------------------------
def test_key_substitution_is_refused_by_the_client():
    clients = _clients(4)
    pinned = {i: c.public_key for i, c in clients.items()}
    evil = SecAggClient(client_id=3).public_key
    c = clients[1]
    assert c.pinned_keys == pinned
    with pytest.raises(SecAggKeyError, match=r"public keys of clients \[3\] differ from those"):
        c.mask(
            np.zeros(4),
            round_id=0,
            participants=[1, 2, 3],
            codec=CODEC,
            public_keys={**pinned, 3: evil},
        )
    with pytest.raises(SecAggKeyError, match=r"participants \[7\] have no key pinned"):
        c.mask(np.zeros(4), round_id=0, participants=[1, 2, 7], codec=CODEC)
    with pytest.raises(RuntimeError, match="pinned once per run"):
        c.setup({**pinned, 3: evil}, verify_keys={})  # no re-keying after the key exchange
    assert issubclass(SecAggKeyError, ValueError)
    # Nothing was masked by the refused calls; the pinned keys are accepted.
    xs = _vectors([1, 2, 3], 4, seed=0)
    ups = {
        i: clients[i].mask(
            xs[i], round_id=0, participants=[1, 2, 3], codec=CODEC, public_keys=pinned
        )
        for i in xs
    }
    inbox = SecAggServer(codec=CODEC).inboxes([1, 2, 3], {i: u.shares for i, u in ups.items()})
    sigs = _sigs(clients, 0, [1, 2, 3], [])
    with pytest.raises(SecAggKeyError, match=r"clients \[2\] differ"):
        c.unmask(
            round_id=0, survivors=[1, 2, 3], dropped=[], n=4, inbox=inbox[1], public_keys={2: evil},
            signatures=sigs,
        )  # fmt: skip
    c.unmask(
        round_id=0, survivors=[1, 2, 3], dropped=[], n=4, inbox=inbox[1], public_keys=pinned,
        signatures=sigs,
    )  # fmt: skip


def test_a_restored_client_keeps_its_pins_pair_keys_and_round_bookkeeping():
    clients = _clients(3)
    xs = _vectors(clients, 6, seed=9)
    sk, book = clients[1].export_state()
    twin = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    assert twin.pinned_keys == clients[1].pinned_keys
    with pytest.raises(SecAggKeyError, match="differ"):  # the old restore re-derived here
        twin.mask(
            xs[1],
            round_id=4,
            participants=[1, 2, 3],
            codec=CODEC,
            public_keys={3: SecAggClient(client_id=3).public_key},
        )
    total = _round({**clients, 1: twin}, xs, 4)[0]  # same pair keys: the masks cancel
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
    sk, book = twin.export_state()
    again = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    with pytest.raises(ValueError, match="already masked for round 4"):
        again.mask(xs[1], round_id=4, participants=[1, 2, 3], codec=CODEC)
    fresh = SecAggClient.restore(client_id=1, private_key_bytes=sk, book="")
    with pytest.raises(SecAggKeyError, match="no pinned key book"):
        fresh.mask(xs[1], round_id=5, participants=[1, 2, 3], codec=CODEC)


def test_client_setup_and_mask_preconditions():
    c = SecAggClient(client_id=1, private_key_bytes=bytes(range(32)))
    with pytest.raises(SecAggKeyError, match="setup"):
        c.mask([0.0], round_id=0, participants=[1, 2], codec=CODEC)
    other = SecAggClient(client_id=2)
    with pytest.raises(ValueError, match="not this client's"):
        c.setup({1: other.public_key, 2: other.public_key}, verify_keys={})
    with pytest.raises(ValueError, match="verify key listed for client 1 is not this client's"):
        c.setup({1: c.public_key, 2: other.public_key}, verify_keys={1: other.verify_key})
    with pytest.raises(ValueError, match=r"verify keys must name the key book's clients \[1, 2\]"):
        c.setup({1: c.public_key, 2: other.public_key}, verify_keys={1: c.verify_key})
    c.setup(
        {1: c.public_key, 2: other.public_key}, verify_keys={1: c.verify_key, 2: other.verify_key}
    )
    with pytest.raises(ValueError, match="must include client 1"):
        c.mask([0.0], round_id=0, participants=[2], codec=CODEC)
    with pytest.raises(ValueError, match="number in"):
        c.mask([0.0], round_id=0, participants=[1], codec=CODEC)  # alone = plaintext
    with pytest.raises(ValueError, match="distinct"):
        c.mask([0.0], round_id=0, participants=[1, 2, 2], codec=CODEC)
    with pytest.raises(ValueError, match=r"threshold 1 announced for 2 participants.*t = 2"):
        c.mask([0.0], round_id=0, participants=[1, 2], codec=CODEC, threshold=1)


def test_an_empty_vector_encodes_to_the_empty_sum():
    codec = FixedPointCodec(max_abs=1.0, max_summands=4, scale=2.0**20)
    enc = codec.encode(np.zeros(0))
    assert enc.dtype == np.uint64 and enc.shape == (0,)
    assert codec.decode(enc).shape == (0,)
    total = _round(_clients(3), {i: np.zeros(0) for i in (1, 2, 3)}, 0, codec=codec)[0]
    assert total.shape == (0,)


# --- threshold -----------------------------------------------------------------
def test_threshold_default_is_a_strict_majority_of_at_least_two():
    t = SecAggConfig().threshold
    assert [t(n) for n in (2, 3, 4, 5, 6, 10, 101)] == [2, 2, 3, 3, 4, 6, 51]
    assert [SecAggConfig(threshold_fraction=0.0).threshold(n) for n in (2, 9)] == [2, 2]
    assert [SecAggConfig(threshold_fraction=0.99).threshold(n) for n in (2, 9)] == [2, 9]
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"threshold_fraction must lie in \[0, 1\)"):
            SecAggConfig(threshold_fraction=bad)
    with pytest.raises(ValueError, match=r"n \(participants\) must be an integer in \[2, inf\)"):
        SecAggConfig().threshold(1)


def test_a_stricter_threshold_aborts_where_the_default_recovers():
    xs = _vectors([1, 2, 3, 4], 8, seed=3)  # 5 of 5 asked, 4 reply
    strict = SecAggConfig(threshold_fraction=0.8)  # t = 5
    clients = _clients(5)
    assert _round(clients, xs, 0)[0].shape == (8,)
    for c in clients.values():
        c.config = strict
    with pytest.raises(SecAggAbort, match="below threshold t = 5"):
        _round(clients, xs, 1, server=SecAggServer(codec=CODEC, config=strict))


# --- the Flower ClientApp handlers ----------------------------------------------
def test_flower_handlers_pin_the_key_book_and_refuse_substitution_and_second_unmasks():
    from fedpriv.clients import app as client_app
    from flwr.app import ConfigRecord, Context, Message, Metadata, RecordDict

    def message(kind, cfg):
        meta = Metadata(
            run_id=1,
            message_id=f"{kind}-{time.monotonic_ns()}",
            src_node_id=0,
            dst_node_id=1,
            reply_to_message_id="",
            group_id="",
            created_at=time.time(),
            ttl=600.0,
            message_type=f"query.{kind}",
        )
        return Message(RecordDict({"config": ConfigRecord(cfg)}), metadata=meta)

    rng = np.random.default_rng(0)
    contexts, book, vbook = {}, {}, {}
    for pid in range(3):  # what the `keys` handler leaves in each node's state
        ctx = Context(
            run_id=1,
            node_id=10 + pid,
            node_config={"partition-id": pid, "num-partitions": 3},
            state=RecordDict(),
            run_config={"num-clients": 3},
        )
        client = SecAggClient(client_id=pid, private_key_bytes=rng.bytes(32))
        client_app._save_secagg(ctx, client)
        contexts[pid], book[pid], vbook[pid] = ctx, client.public_key, client.verify_key
    cfg = {"participants": [0, 1, 2], "public-keys": [book[p] for p in range(3)]}
    keybook = {**cfg, "verify-keys": [vbook[p] for p in range(3)]}
    for ctx in contexts.values():
        client_app.keybook(message("keybook", keybook), ctx)
    # The handlers are sanitised (only a code reaches the server): check the
    # node-local reasons on the unwrapped handlers, and the code on one wrapped call.
    with pytest.raises(RuntimeError, match="pinned once per run"):
        client_app.keybook.__wrapped__(message("keybook", keybook), contexts[0])
    with pytest.raises(ClientFailure, match="client_error"):
        client_app.keybook(message("keybook", keybook), contexts[0])
    evil = {**cfg, "public-keys": [book[0], SecAggClient(client_id=1).public_key, book[2]]}
    with pytest.raises(SecAggKeyError, match=r"clients \[1\] differ"):  # before any work
        client_app.answer.__wrapped__(message("fedpriv", evil), contexts[0])
    with pytest.raises(SecAggKeyError, match=r"participants \[3\] have no key pinned"):
        unknown = {"participants": [0, 1, 3], "public-keys": [book[0], book[1], book[2]]}
        client_app.answer.__wrapped__(message("fedpriv", unknown), contexts[0])
    # Step 1 as the `answer` handler does it, from and back to the node state.
    xs, ups = _vectors(range(3), 5, seed=1), {}
    for pid, ctx in contexts.items():
        state = ctx.state["secagg"]
        c = SecAggClient.restore(
            client_id=pid, private_key_bytes=bytes(state["sk"]), book=str(state["book"])
        )
        ups[pid] = c.mask(xs[pid], round_id=0, participants=[0, 1, 2], codec=CODEC)
        client_app._save_secagg(ctx, c)
    server = SecAggServer(codec=CODEC)
    inboxes = server.inboxes([0, 1, 2], {i: u.shares for i, u in ups.items()})
    view = {"round": 0, "survivors": [0, 1, 2], "dropped": [], **cfg}
    sigs = {
        pid: bytes(
            client_app.consistency(message("consistency", view), ctx).content["meta"]["signature"]
        )
        for pid, ctx in contexts.items()
    }
    with pytest.raises(ValueError, match="already signed another survivor list for round 0"):
        client_app.consistency.__wrapped__(
            message("consistency", {**view, "survivors": [0, 1], "dropped": [2]}), contexts[0]
        )
    forged = {**cfg, "verify-keys": [vbook[0], SecAggClient(client_id=1).verify_key, vbook[2]]}
    with pytest.raises(SecAggKeyError, match=r"verify keys of clients \[1\] differ"):
        client_app.consistency.__wrapped__(message("consistency", {**view, **forged}), contexts[0])

    def unmask(pid, wrapped=False, **over):
        base = {
            "round": 0,
            "survivors": [0, 1, 2],
            "dropped": [],
            "n": 5,
            **cfg,
            "signers": list(sigs),
            "signatures": list(sigs.values()),
            "from": list(inboxes[pid]),
            "ct": list(inboxes[pid].values()),
        }
        handler = client_app.unmask if wrapped else client_app.unmask.__wrapped__
        return handler(message("unmask", {**base, **over}), contexts[pid])

    with pytest.raises(SecAggKeyError, match="differ"):
        unmask(0, **{"public-keys": evil["public-keys"]})
    with pytest.raises(ValueError, match="listed both as survivors and as dropped"):
        unmask(0, dropped=[2])
    with pytest.raises(ValueError, match=r"1 valid signatures by survivors.*below threshold t = 2"):
        unmask(0, signers=[0], signatures=[sigs[0]])
    answers = {}
    for pid in range(3):
        rep = unmask(pid, wrapped=True)
        got, rec = rep.content["unmask"], rep.content["masks"]
        answers[pid] = UnmaskAnswer(
            shares=dict(zip(got["of"], got["share"], strict=True)),
            masks={int(k): rec[k].numpy() for k in rec.keys()},
        )
    with pytest.raises(ValueError, match="already answered the unmask of round 0"):
        unmask(1)  # the node state remembers the first answer
    masked = {i: u.vector for i, u in ups.items()}
    total = server.aggregate(round_id=0, participants=[0, 1, 2], masked=masked, answers=answers)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
