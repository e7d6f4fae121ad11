"""Shamir sharing of many secrets at once (``fedpriv/federation/shamir.py``; Shamir 1979):
any t shares reconstruct, t − 1 shares say nothing, inconsistent shares are refused."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.federation import field, shamir

P = shamir.PRIME
SMALL = 13  # a tiny field: the same code path, small enough to enumerate
ALPHA_FRESH = 1e-6  # split draws from the OS CSPRNG: a small false-alarm rate


def _elements(draw, shape, prime):
    n = int(np.prod(shape))
    top = st.one_of(st.sampled_from([0, prime - 1]), st.integers(0, prime - 1))
    return np.array(draw(st.lists(top, min_size=n, max_size=n)), dtype=np.uint64).reshape(shape)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    prime=st.sampled_from([P, 2**31 - 1, SMALL]),
    t=st.integers(1, 6),
    extra=st.integers(0, 4),
    batch=st.sampled_from([(), (1,), (5,), (3, 4)]),
    data=st.data(),
)
def test_any_t_or_more_shares_reconstruct_every_secret(prime, t, extra, batch, data):
    n = t + extra
    xs = data.draw(st.lists(st.integers(1, prime - 1), min_size=n, max_size=n, unique=True))
    secrets = _elements(data.draw, batch, prime)
    ys = shamir.split(secrets, xs=xs, threshold=t, prime=prime)
    assert ys.shape == (n, *batch) and ys.dtype == np.uint64 and (ys < prime).all()
    rows = data.draw(st.permutations(range(n)))[: data.draw(st.integers(t, n))]
    got = shamir.reconstruct([xs[i] for i in rows], ys[rows], threshold=t, prime=prime)
    np.testing.assert_array_equal(got, secrets)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    t=st.integers(2, 4),
    secrets=st.lists(st.integers(0, SMALL - 1), min_size=2, max_size=2),
    data=st.data(),
)
def test_t_minus_one_shares_are_uniform_whatever_the_secret(t, secrets, data):
    # Exact, over GF(13) with the code that splits over GF(2^61 − 1): for each secret,
    # the 13^(t−1) coefficient vectors (one batch) give every (t−1)-tuple of share values
    # exactly once, i.e. the shares are uniform and independent of the secret (Shamir
    # 1979's perfect secrecy). Per limb of a seed this is the whole argument: limbs have
    # independent polynomials.
    xs = data.draw(st.lists(st.integers(1, SMALL - 1), min_size=t - 1, max_size=t - 1, unique=True))
    every = np.array(list(itertools.product(range(SMALL), repeat=t - 1)), dtype=np.uint64)
    for s in secrets:
        same = np.full(len(every), s, dtype=np.uint64)
        ys = shamir.evaluate(same, every.T.copy(), xs, prime=SMALL)
        assert sorted(map(tuple, ys.T.tolist())) == sorted(map(tuple, every.tolist()))


@pytest.mark.parametrize("secret", [0, SMALL - 1])
def test_split_draws_uniform_shares_whatever_the_secret(secret):
    # The CSPRNG path: t − 1 = 2 shares of one secret, 169 cells, 200 draws expected each.
    ys = shamir.split(
        np.full(169 * 200, secret, np.uint64), xs=[3, 7, 11], threshold=3, prime=SMALL
    )
    cells = np.bincount(ys[0].astype(np.int64) * SMALL + ys[1].astype(np.int64), minlength=169)
    assert stats.chisquare(cells).pvalue > ALPHA_FRESH
    # Over GF(2^61 − 1): the top 4 bits of one share, 16 near-equal bins.
    ys = shamir.split(np.zeros(16 * 1000, np.uint64), xs=[1, 2], threshold=2)
    top = np.bincount(ys[0] >> np.uint64(57), minlength=16)
    assert stats.chisquare(top).pvalue > ALPHA_FRESH


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    t=st.integers(1, 5),
    extra=st.integers(1, 4),
    col=st.integers(0, 5),
    delta=st.integers(1, P - 1),
    data=st.data(),
)
def test_a_wrong_share_among_more_than_t_is_refused_naming_its_secret(t, extra, col, delta, data):
    n = t + extra
    xs = data.draw(st.lists(st.integers(1, 2**40), min_size=n, max_size=n, unique=True))
    seeds = field.random_elements((6, shamir.LIMBS))  # six seeds, one batch
    ys = shamir.split(seeds, xs=xs, threshold=t)
    row = data.draw(st.integers(0, n - 1))  # among the base or the extra points
    ys[row, col, 2] = (ys[row, col, 2] + np.uint64(delta)) % np.uint64(P)
    with pytest.raises(shamir.ShamirError, match="some share is wrong") as err:
        shamir.reconstruct(xs, ys, threshold=t)
    assert err.value.index == (col, 2)
    # The t smallest points alone cannot tell: that limb comes out wrong, the rest right.
    base = sorted(range(n), key=xs.__getitem__)[:t]
    got = shamir.reconstruct([xs[i] for i in base], ys[base], threshold=t)
    others = np.ones(seeds.shape, dtype=bool)
    others[col, 2] = row not in base
    np.testing.assert_array_equal(got[others], seeds[others])
    assert row not in base or got[col, 2] != seeds[col, 2]


def test_exactly_t_wrong_shares_give_garbage_and_too_few_are_refused():
    seed = shamir.draw_seed()
    ys = shamir.split(seed, xs=[1, 2, 3, 4, 5], threshold=3)
    bad = ys[:3].copy()
    bad[1, 0] = (bad[1, 0] + np.uint64(1)) % np.uint64(P)
    got = shamir.reconstruct([1, 2, 3], bad, threshold=3)
    assert got[0] != seed[0] and (got[1:] == seed[1:]).all()  # undetectable, but not the seed
    with pytest.raises(shamir.ShamirError, match="need at least threshold = 3 shares; got 2"):
        shamir.reconstruct([1, 2], ys[:2], threshold=3)
    outside = ys.copy()
    outside[4, 3] = np.uint64(P)  # not a field element
    with pytest.raises(shamir.ShamirError, match="x = 5 is not an element") as err:
        shamir.reconstruct([1, 2, 3, 4, 5], outside, threshold=3)
    assert err.value.index == (3,)


def test_the_lagrange_weights_are_computed_once_per_point_set():
    shamir.lagrange_weights.cache_clear()
    xs = [9, 4, 7, 2]
    for _ in range(3):  # three rounds, 1000 secrets each, the same survivors
        secrets = shamir.draw_seed()[None].repeat(200, axis=0)
        ys = shamir.split(secrets, xs=xs, threshold=3)
        np.testing.assert_array_equal(shamir.reconstruct(xs, ys, threshold=3), secrets)
    assert shamir.lagrange_weights.cache_info().misses == 1
    weights = shamir.lagrange_weights((2, 4, 7), (0, 4, 9))
    np.testing.assert_array_equal(weights[1], [0, 1, 0])  # at a base point: that share
    assert not weights.flags.writeable


def test_bad_parameters_are_refused_and_coefficients_are_fresh():
    seed = np.array([5], dtype=np.uint64)
    with pytest.raises(ValueError, match="distinct ints"):
        shamir.split(seed, xs=[1, 1, 2], threshold=2)
    with pytest.raises(ValueError, match="distinct ints"):
        shamir.split(seed, xs=[0, 1, 2], threshold=2)  # x = 0 would be the secret itself
    with pytest.raises(ValueError, match="distinct ints"):
        shamir.split(seed, xs=[1, P], threshold=2)  # P ≡ 0
    with pytest.raises(ValueError, match=r"threshold must be an int in \[1, 3\]"):
        shamir.split(seed, xs=[1, 2, 3], threshold=4)
    with pytest.raises(ValueError, match="secrets must be uint64 elements"):
        shamir.split(np.array([P], dtype=np.uint64), xs=[1, 2], threshold=2)
    with pytest.raises(ValueError, match="secrets must be uint64 elements"):
        shamir.split(np.array([5]), xs=[1, 2], threshold=2)  # int64: not the field's type
    with pytest.raises(ValueError, match="ys must be uint64 of shape"):
        shamir.reconstruct([1, 2], np.zeros((3, 5), np.uint64), threshold=2)
    a = shamir.split(seed, xs=[1, 2], threshold=2)
    assert not np.array_equal(a, shamir.split(seed, xs=[1, 2], threshold=2))


def test_a_seed_share_is_40_bytes_and_malformed_bytes_are_refused():
    seed = shamir.draw_seed()
    assert seed.shape == (shamir.LIMBS,) and shamir.LIMBS * np.log2(float(P)) >= 256
    share = shamir.split(seed, xs=[1, 2, 3], threshold=2)[0]
    raw = shamir.to_bytes(share)
    assert len(raw) == shamir.SHARE_BYTES == 40
    np.testing.assert_array_equal(shamir.from_bytes(raw), share)
    with pytest.raises(ValueError, match="take 40 bytes; got 39"):
        shamir.from_bytes(raw[:-1])
    with pytest.raises(ValueError, match="field elements must be uint64 elements"):
        shamir.from_bytes(raw[:-8] + (2**64 - 1).to_bytes(8, "little"))


def test_a_seeds_bytes_are_its_to_bytes_and_refuse_what_it_refuses():
    seed = shamir.draw_seed()
    assert shamir.seed_bytes(seed) == shamir.to_bytes(seed) == seed.astype("<u8").tobytes()
    view = np.stack([seed, seed])[:, ::-1][0]  # a strided view: the same bytes in C order
    assert shamir.seed_bytes(view) == shamir.to_bytes(view)
    for bad in (np.full(shamir.LIMBS, P, np.uint64), seed.astype(np.int64)):
        with pytest.raises(ValueError, match="elements of GF"):
            shamir.seed_bytes(bad)
