"""GF(p) arithmetic on uint64 arrays (``fedpriv/federation/field.py``): every operation
against Python's exact integers, the 128-bit products over the whole uint64 range."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.federation import field

P = field.PRIME
ALPHA_FRESH = 1e-6  # OS-CSPRNG draws vary run to run: a small false-alarm rate
#: Values where a carry, a fold or the final subtraction changes: around p, 2^61, 2^32, 2^64.
EDGES = [0, 1, 2, 7, 8, P - 1, P, P + 1, 2 * P, 2**61, 2**61 + 7, 2**32 - 1, 2**32, 2**63,
         2**64 - 8, 2**64 - 1]  # fmt: skip
U64 = st.one_of(st.sampled_from(EDGES), st.integers(0, 2**64 - 1))
ELEMENT = st.one_of(st.sampled_from([0, 1, P - 2, P - 1]), st.integers(0, P - 1))


def _u64(values):
    return np.array(values, dtype=np.uint64)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pairs=st.lists(st.tuples(U64, U64), min_size=1, max_size=64))
def test_the_128_bit_product_reduces_exactly_over_the_whole_uint64_range(pairs):
    a, b = _u64([x for x, _ in pairs]), _u64([y for _, y in pairs])
    got = field.mulmod(a, b)
    assert got.dtype == np.uint64
    assert [int(v) for v in got] == [x * y % P for x, y in pairs]
    assert [int(v) for v in field.reduce(a)] == [x % P for x, _ in pairs]


def test_every_edge_pair_reduces_exactly():
    a, b = np.meshgrid(_u64(EDGES), _u64(EDGES))
    want = [[x * y % P for x in EDGES] for y in EDGES]  # a[i, j] = EDGES[j], b[i, j] = EDGES[i]
    np.testing.assert_array_equal(field.mulmod(a, b), _u64(want))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(pairs=st.lists(st.tuples(ELEMENT, ELEMENT), min_size=1, max_size=32), e=st.integers(0, P))
def test_add_sub_pow_and_inverse_agree_with_python_integers(pairs, e):
    a, b = _u64([x for x, _ in pairs]), _u64([y for _, y in pairs])
    assert [int(v) for v in field.addmod(a, b)] == [(x + y) % P for x, y in pairs]
    assert [int(v) for v in field.submod(a, b)] == [(x - y) % P for x, y in pairs]
    assert [int(v) for v in field.powmod(a, e)] == [pow(x, e, P) for x, _ in pairs]
    nonzero = a[a != 0]
    np.testing.assert_array_equal(field.mulmod(field.inverse(nonzero), nonzero), 1)


@st.composite
def _products(draw):
    """(prime, a, b, a·b mod prime by Python integers): small matrices, edge entries."""
    prime = draw(st.sampled_from([P, 13, 2**31 - 1]))
    m, k, s = draw(st.integers(1, 5)), draw(st.integers(1, 9)), draw(st.integers(1, 5))
    entry = st.one_of(st.sampled_from([0, prime - 1]), st.integers(0, prime - 1))
    a = draw(st.lists(st.lists(entry, min_size=k, max_size=k), min_size=m, max_size=m))
    b = draw(st.lists(st.lists(entry, min_size=s, max_size=s), min_size=k, max_size=k))
    want = [[sum(a[i][j] * b[j][c] for j in range(k)) % prime for c in range(s)] for i in range(m)]
    return prime, a, b, want


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=_products())
def test_matmul_is_the_exact_matrix_product_mod_p(case):
    prime, a, b, want = case
    np.testing.assert_array_equal(field.matmul(_u64(a), _u64(b), prime), _u64(want))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=_products())
def test_matmul_limb_products_are_exact_on_small_matrices_too(case):
    # Products this small take the exact-integer path; the limb path must agree on them.
    prime, a, b, want = case
    assert len(a) * len(b) * len(b[0]) <= field.SMALL_WORK
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(field, "SMALL_WORK", 0)
        np.testing.assert_array_equal(field.matmul(_u64(a), _u64(b), prime), _u64(want))


def test_matmul_limb_sums_do_not_wrap_at_the_largest_entries():
    # (p−1)^2 ≡ 1, so each entry of the product of all-(p−1) matrices is k mod p; the
    # limb sums are then at their largest (k at the float64 class sums' bound, and past it,
    # at the float64 limb sums' and past it). Blocks over columns must agree too.
    for k in (1, field.FLOAT_CLASS_INNER, field.FLOAT_CLASS_INNER + 1, 2048, 2049, field.MAX_INNER):
        a = np.full((2, k), P - 1, dtype=np.uint64)
        b = np.full((k, 3), P - 1, dtype=np.uint64)
        np.testing.assert_array_equal(field.matmul(a, b), np.full((2, 3), k % P))
    a = field.random_elements((3, 4))
    b = field.random_elements((4, 50_000))  # more columns than one block
    want = [[sum(int(a[i, j]) * int(b[j, c]) for j in range(4)) % P for c in (0, 49_999)]
            for i in range(3)]  # fmt: skip
    np.testing.assert_array_equal(field.matmul(a, b)[:, [0, 49_999]], _u64(want))
    with pytest.raises(ValueError, match="inner dimension"):
        field.matmul(
            np.zeros((1, field.MAX_INNER + 1), np.uint64),
            np.zeros((field.MAX_INNER + 1, 1), np.uint64),
        )
    with pytest.raises(TypeError, match="uint64"):
        field.matmul(np.zeros((1, 1), np.int64), np.zeros((1, 1), np.uint64))


def test_exclusive_products_leave_out_exactly_one_factor():
    d = field.random_elements((4, 7))
    d[1, 3] = 0  # a zero factor: only its own position keeps a non-zero product
    got = field.exclusive_products(d)
    for i in range(4):
        for j in range(7):
            want = 1
            for m in range(7):
                want = want * int(d[i, m]) % P if m != j else want
            assert int(got[i, j]) == want
    assert np.count_nonzero(got[1]) == 1


def test_random_elements_are_uniform_fresh_and_in_the_field():
    for prime in (13, P):
        x = field.random_elements((40, 1000), prime)
        assert x.dtype == np.uint64 and x.shape == (40, 1000) and (x < prime).all()
    small = field.random_elements(130_000, 13)  # rejection keeps 13 of 16 values, uniformly
    assert stats.chisquare(np.bincount(small, minlength=13)).pvalue > ALPHA_FRESH
    big = field.random_elements(160_000)  # the top four bits of 61: 16 near-equal bins
    assert stats.chisquare(np.bincount(big >> np.uint64(57), minlength=16)).pvalue > ALPHA_FRESH
    assert not np.array_equal(field.random_elements(4), field.random_elements(4))


def test_only_the_default_mersenne_prime_or_a_small_prime_is_accepted():
    for bad in (15, 2**31 + 11, 2**61 + 1, 2**89 - 1, 2, 13.0, True):
        with pytest.raises(ValueError, match="prime must be"):
            field.check_prime(bad)
    with pytest.raises(ZeroDivisionError):
        field.inverse(_u64([3, 0]))
