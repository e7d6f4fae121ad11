"""Secure aggregation: exact sums, double masking against stragglers, pinned keys, Shamir.

Protocol and threat model: ``fedpriv/federation/secagg.py`` (Bonawitz et al., CCS 2017,
§4). Shamir sharing: ``fedpriv/federation/shamir.py`` (Shamir 1979).
"""

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggAbort,
    SecAggClient,
    SecAggOverflowError,
    SecAggServer,
    sum_plain,
)
from tests.federation.secagg_parties import (
    ALPHA,
    ALPHA_FRESH,
    CODEC,
    _clients,
    _round,
    _sigs,
    _tolerance,
    _vectors,
)


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
    assert got.lost == (2,)  # one dropped peer above client 1: its sum is +m_12
    np.testing.assert_array_equal(got.mask, np.frombuffer(stream, dtype="<u8"))


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
        assert sorted(got.shares) == sorted(xs) and list(got.lost) == dropped
        assert got.mask.shape == (64,)  # one sum, however many dropped
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
        assert got.lost == (straggler,)  # the only dropped client: its pair mask alone
        np.add(guess, got.mask, out=guess)
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
        revealed.append({i: a.mask for i, a in answers.items()})  # with 4, the only one
    for i in (1, 2, 3):
        assert not np.intersect1d(revealed[0][i], revealed[1][i]).size
