"""Secure aggregation: exact sums, uniform-looking masks, overflow refusal, dropout recovery."""

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
    needs_reveal,
    sum_plain,
)

ALPHA = 1e-3  # false-alarm rate of the chi-square uniformity test
EPS = np.finfo(np.float64).eps
CODEC = FixedPointCodec(scale=2.0**20, max_abs=3.0, max_summands=8)


def _clients(k, seed=0, *, ids=None):
    """K set-up clients with fixed (test-only) keys so every run is identical."""
    rng = np.random.default_rng(seed)
    ids = list(range(1, k + 1)) if ids is None else ids
    clients = {i: SecAggClient(client_id=i, private_key_bytes=rng.bytes(32)) for i in ids}
    keys = {i: c.public_key for i, c in clients.items()}
    for c in clients.values():
        c.setup(keys)
    return clients


def _vectors(ids, n, seed, max_abs=CODEC.max_abs):
    rng = np.random.default_rng(seed)
    return {i: rng.uniform(-max_abs, max_abs, size=n) for i in ids}


def _masked(clients, xs, round_id, codec=CODEC, participants=None):
    participants = sorted(clients) if participants is None else participants
    return {
        i: clients[i].mask(xs[i], round_id=round_id, participants=participants, codec=codec)
        for i in xs
    }


def _tolerance(k, codec=CODEC):
    # K rounding errors of 0.5/scale each, plus float error in x·scale, the sum and decoding.
    return k * 0.5 / codec.scale + 8 * k * codec.max_abs * EPS


# --- exactness --------------------------------------------------------------
@settings(max_examples=40, deadline=None, derandomize=True)
@given(k=st.integers(2, 8), n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_sum_is_exact_within_fixed_point_error(k, n, seed):
    clients = _clients(k, seed)
    xs = _vectors(clients, n, seed)
    xs[1][0] = CODEC.max_abs  # the bounds themselves must encode and sum correctly
    xs[2][-1] = -CODEC.max_abs
    total = SecAggServer(codec=CODEC).aggregate(
        round_id=seed, participants=sorted(clients), masked=_masked(clients, xs, seed)
    )
    assert total.dtype == np.float64
    np.testing.assert_allclose(total, sum(xs.values()), rtol=0, atol=_tolerance(k))


def test_secure_and_plain_paths_give_identical_sums():
    clients = _clients(5)
    xs = _vectors(clients, 257, seed=3)
    secure = SecAggServer(codec=CODEC).aggregate(
        round_id=0, participants=sorted(clients), masked=_masked(clients, xs, 0)
    )
    np.testing.assert_array_equal(secure, sum_plain(xs.values(), CODEC))


def test_aggregate_does_not_depend_on_the_keys():
    # CSPRNG keys differ every run; the released sum must not.
    xs = _vectors(range(1, 5), 64, seed=4)
    sums = []
    for clients in (_clients(4, seed=1), _clients(4, seed=2)):
        server = SecAggServer(codec=CODEC)
        masked = _masked(clients, xs, 0)
        sums.append(server.aggregate(round_id=0, participants=[1, 2, 3, 4], masked=masked))
    fresh = {i: SecAggClient(client_id=i) for i in range(1, 5)}
    keys = {i: c.public_key for i, c in fresh.items()}
    assert len(set(keys.values())) == 4
    for c in fresh.values():
        c.setup(keys)
    server = SecAggServer(codec=CODEC)
    masked = _masked(fresh, xs, 0)
    sums.append(server.aggregate(round_id=0, participants=[1, 2, 3, 4], masked=masked))
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
    c1.setup(keys)
    c1.mask(np.zeros(300), round_id=41, participants=[1, 2, 3], codec=CODEC)
    revealed = c1.reveal(round_id=41, missing=[2], n=300)[2]
    shared = X25519PrivateKey.from_private_bytes(sk1).exchange(
        X25519PrivateKey.from_private_bytes(sk2).public_key()
    )
    info = b"fedpriv-secagg" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    nonce = (1).to_bytes(4, "little") + b"fpSA" + (41).to_bytes(8, "little")
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(2400))
    np.testing.assert_array_equal(revealed, np.frombuffer(stream, dtype="<u8"))


def _byte_chi2_p(words):
    counts = np.bincount(np.asarray(words, dtype=np.uint64).view(np.uint8), minlength=256)
    return stats.chisquare(counts).pvalue


def test_one_masked_vector_looks_uniform_and_the_test_has_power():
    clients = _clients(3, seed=5)
    x = np.random.default_rng(6).normal(0.0, 1.0, size=20_000).clip(-3.0, 3.0)
    masked = clients[2].mask(x, round_id=0, participants=[1, 2, 3], codec=CODEC)
    assert _byte_chi2_p(masked) > ALPHA
    assert _byte_chi2_p(CODEC.encode(x)) < ALPHA  # the unmasked encoding is far from uniform


def test_masks_change_every_round_and_a_round_is_masked_once():
    clients = _clients(3)
    x = np.full(100, 0.5)
    m0 = clients[1].mask(x, round_id=0, participants=[1, 2, 3], codec=CODEC)
    m1 = clients[1].mask(x, round_id=1, participants=[1, 2, 3], codec=CODEC)
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
    total = SecAggServer(codec=codec).aggregate(
        round_id=0, participants=sorted(clients), masked=_masked(clients, xs, 0, codec)
    )
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


# --- dropout ---------------------------------------------------------------
@pytest.mark.parametrize("dropped", [[3], [1, 4]])
def test_dropout_is_recovered_from_the_survivors_reveals(dropped):
    clients = _clients(5)
    xs = _vectors(clients, 64, seed=7)
    participants = sorted(clients)
    survivors = {i: xs[i] for i in participants if i not in dropped}
    masked = _masked(clients, survivors, 0, participants=participants)
    server = SecAggServer(codec=CODEC)
    assert server.missing(participants, masked) == dropped
    assert needs_reveal(participants, masked)
    reveals = {i: clients[i].reveal(round_id=0, missing=dropped, n=64) for i in survivors}
    total = server.aggregate(round_id=0, participants=participants, masked=masked, reveals=reveals)
    np.testing.assert_allclose(total, sum(survivors.values()), rtol=0, atol=_tolerance(5))
    np.testing.assert_array_equal(total, sum_plain(survivors.values(), CODEC))


def test_no_dropout_needs_no_reveal_round_trip():
    clients = _clients(4)
    xs = _vectors(clients, 8, seed=8)
    masked = _masked(clients, xs, 0)
    assert not needs_reveal([1, 2, 3, 4], masked)
    server = SecAggServer(codec=CODEC)
    with pytest.raises(ValueError, match="nobody is missing"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4], masked=masked, reveals={1: {}})
    server.aggregate(round_id=0, participants=[1, 2, 3, 4], masked=masked)


def test_a_missing_reveal_aborts_and_closes_the_round():
    clients = _clients(5)
    xs = _vectors([1, 2, 4, 5], 16, seed=9)
    masked = _masked(clients, xs, 0, participants=[1, 2, 3, 4, 5])
    reveals = {i: clients[i].reveal(round_id=0, missing=[3], n=16) for i in (1, 2, 4)}  # 5 silent
    server = SecAggServer(codec=CODEC)
    with pytest.raises(SecAggAbort, match=r"survivors \[5\] did not reveal"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4, 5], masked=masked, reveals=reveals)
    assert issubclass(SecAggAbort, RuntimeError)
    assert not server.accept_late(0, 3)
    with pytest.raises(ValueError, match="round 0 is closed"):
        server.aggregate(round_id=0, participants=[1, 2, 3, 4, 5], masked=masked, reveals=reveals)


def test_a_late_reply_of_a_dropped_client_is_refused():
    clients = _clients(5)
    xs = _vectors(clients, 32, seed=10)
    participants = sorted(clients)
    masked = _masked(clients, xs, 0)  # client 2 masks, but its reply arrives late
    late = masked.pop(2)
    reveals = {i: clients[i].reveal(round_id=0, missing=[2], n=32) for i in masked}
    server = SecAggServer(codec=CODEC)
    assert server.accept_late(0, 2)  # still open
    server.aggregate(round_id=0, participants=participants, masked=masked, reveals=reveals)
    assert not server.accept_late(0, 2)
    with pytest.raises(ValueError, match="closed"):
        server.aggregate(round_id=0, participants=participants, masked={**masked, 2: late})
    # Why the refusal matters: the late reply plus the reveals would unmask client 2 exactly.
    unmasked = late.copy()
    for rev in reveals.values():
        np.add(unmasked, rev[2], out=unmasked)
    np.testing.assert_allclose(CODEC.decode(unmasked), xs[2], rtol=0, atol=_tolerance(1))


def test_round_r_reveals_do_not_unmask_round_r_plus_one():
    clients = _clients(4)
    participants = [1, 2, 3, 4]
    revealed = []
    for r in (0, 1):
        xs = _vectors([1, 2, 3], 500, seed=r)
        masked = _masked(clients, xs, r, participants=participants)
        revealed.append({i: clients[i].reveal(round_id=r, missing=[4], n=500) for i in masked})
        server = SecAggServer(codec=CODEC)
        stale = revealed[0]  # round 0's masks applied to round 1 leave noise, not the sum
        total = server.aggregate(
            round_id=r, participants=participants, masked=masked, reveals=stale
        )
        ok = np.abs(total - sum(xs.values())) <= _tolerance(3)
        assert ok.all() if r == 0 else not ok.any()
    for i in (1, 2, 3):
        assert not np.intersect1d(revealed[0][i][4], revealed[1][i][4]).size


def test_reveal_answers_only_safe_requests():
    clients = _clients(4)
    xs = _vectors([1, 2, 3, 4], 10, seed=11)
    _masked(clients, xs, 5)
    c = clients[1]
    with pytest.raises(ValueError, match="never masked for round 6"):
        c.reveal(round_id=6, missing=[4], n=10)  # a future round's masks would unmask it
    with pytest.raises(ValueError, match="peers"):
        c.reveal(round_id=5, missing=[1], n=10)  # itself
    with pytest.raises(ValueError, match="peers"):
        c.reveal(round_id=5, missing=[9], n=10)  # not a participant
    with pytest.raises(ValueError, match="n must equal"):
        c.reveal(round_id=5, missing=[4], n=11)
    with pytest.raises(ValueError, match="min_survivors"):
        c.reveal(round_id=5, missing=[2, 3, 4], n=10)  # would expose client 1 alone
    c.reveal(round_id=5, missing=[4], n=10)
    with pytest.raises(ValueError, match="already revealed"):
        c.reveal(round_id=5, missing=[3], n=10)  # a second set would unmask repliers


def test_client_setup_and_mask_preconditions():
    c = SecAggClient(client_id=1, private_key_bytes=bytes(range(32)))
    with pytest.raises(RuntimeError, match="setup"):
        c.mask([0.0], round_id=0, participants=[1, 2], codec=CODEC)
    other = SecAggClient(client_id=2)
    with pytest.raises(ValueError, match="not this client's"):
        c.setup({1: other.public_key, 2: other.public_key})
    c.setup({1: c.public_key, 2: other.public_key})
    with pytest.raises(RuntimeError, match="once per run"):
        c.setup({2: other.public_key})
    with pytest.raises(ValueError, match="must include client 1"):
        c.mask([0.0], round_id=0, participants=[2, 3], codec=CODEC)
    with pytest.raises(ValueError, match="number in"):
        c.mask([0.0], round_id=0, participants=[1], codec=CODEC)  # alone = plaintext
    with pytest.raises(ValueError, match=r"\[3\] had no public key"):
        c.mask([0.0], round_id=0, participants=[1, 2, 3], codec=CODEC)
    with pytest.raises(ValueError, match="distinct"):
        c.mask([0.0], round_id=0, participants=[1, 2, 2], codec=CODEC)


def test_server_needs_only_masked_vectors_and_reveals():
    # The server sees uint64 arrays and the codec, nothing of the clients' keys or inputs.
    clients = _clients(3)
    xs = _vectors(clients, 20, seed=12)
    payload = {i: bytes(m) for i, m in _masked(clients, xs, 0).items()}  # as sent on the wire
    server = SecAggServer(codec=CODEC)
    masked = {i: np.frombuffer(b, dtype=np.uint64) for i, b in payload.items()}
    total = server.aggregate(round_id=0, participants=[1, 2, 3], masked=masked)
    np.testing.assert_allclose(total, sum(xs.values()), rtol=0, atol=_tolerance(3))
    with pytest.raises(ValueError, match="must be uint64 of shape"):
        server.aggregate(round_id=1, participants=[1, 2], masked={1: np.zeros(3), 2: np.zeros(3)})
    with pytest.raises(ValueError, match="must come from participants"):
        server.aggregate(round_id=1, participants=[1, 2], masked={3: masked[3]})


def test_a_restored_client_masks_exactly_as_the_original_and_rederives_changed_keys():
    clients = _clients(3)
    keys = {i: c.public_key for i, c in clients.items()}
    xs = _vectors(clients, 6, seed=9)
    sk, book = clients[1].export_state()
    twin = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book, public_keys=keys)
    np.testing.assert_array_equal(
        twin.mask(xs[1], round_id=4, participants=[1, 2, 3], codec=CODEC),
        clients[1].mask(xs[1], round_id=4, participants=[1, 2, 3], codec=CODEC),
    )
    # Round bookkeeping travels with the state: round 4 cannot be masked twice.
    sk, book = twin.export_state()
    again = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book, public_keys=keys)
    with pytest.raises(ValueError, match="already masked for round 4"):
        again.mask(xs[1], round_id=4, participants=[1, 2, 3], codec=CODEC)
    # A peer with a new public key gets a freshly derived pair key, never the saved one.
    new3 = SecAggClient(client_id=3, private_key_bytes=bytes(range(32)))
    moved = {**keys, 3: new3.public_key}
    peer = SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book, public_keys=moved)
    new3.setup(moved)
    clients[2]._prgs = None
    clients[2].setup(moved)
    survivors = {1: peer, 2: clients[2], 3: new3}
    masked = _masked(survivors, xs, round_id=5)
    total = SecAggServer(codec=CODEC).aggregate(round_id=5, participants=[1, 2, 3], masked=masked)
    np.testing.assert_allclose(total, sum(xs.values()), atol=_tolerance(3))


def test_an_empty_vector_encodes_to_the_empty_sum():
    codec = FixedPointCodec(max_abs=1.0, max_summands=4, scale=2.0**20)
    enc = codec.encode(np.zeros(0))
    assert enc.dtype == np.uint64 and enc.shape == (0,)
    assert codec.decode(enc).shape == (0,)
