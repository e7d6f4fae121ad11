"""Partitioners: every row to exactly one client; Dirichlet skew grows as α shrinks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.data import DataError, dirichlet, iid, label_skew, natural, zipf


def _is_exact_cover(parts, n):
    allrows = np.concatenate(parts)
    return allrows.size == n and np.array_equal(np.sort(allrows), np.arange(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(20, 2000), k=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_iid_and_zipf_cover_every_row_once(n, k, seed):
    rng = np.random.default_rng(seed)
    assert _is_exact_cover(iid(n, n_clients=k, rng=rng), n)
    parts = zipf(n, n_clients=k, s=1.0, rng=rng)
    assert _is_exact_cover(parts, n)
    sizes = [p.size for p in parts]
    assert sizes == sorted(sizes, reverse=True)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(5, 3000), k=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_zipf_1_5_covers_every_row_once_with_zipf_sizes(n, k, seed):
    # The ablation's size imbalance (benchmark paper §5.6): Zipf(1.5) over K clients.
    if n < k:
        with pytest.raises(DataError, match=f"{n} rows cannot give {k} clients a row each"):
            zipf(n, n_clients=k, s=1.5, rng=np.random.default_rng(seed))
        return
    parts = zipf(n, n_clients=k, s=1.5, rng=np.random.default_rng(seed))
    assert len(parts) == k and _is_exact_cover(parts, n)
    sizes = np.array([p.size for p in parts])
    assert sizes.min() >= 1
    # Sizes are 1 + ⌊(n−K)·w_i⌋ (+ the remainder, < K, to client 0), w_i ∝ i^-1.5.
    w = np.arange(1, k + 1) ** -1.5
    target = 1 + (n - k) * w / w.sum()
    assert np.all(np.abs(sizes - target) <= np.r_[k, np.ones(k - 1)])


def test_zipf_partition_is_frozen_by_the_injected_generator():
    a = zipf(500, n_clients=10, s=1.5, rng=np.random.default_rng(3))
    b = zipf(500, n_clients=10, s=1.5, rng=np.random.default_rng(3))
    c = zipf(500, n_clients=10, s=1.5, rng=np.random.default_rng(4))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))
    with pytest.raises(TypeError, match=r"injected numpy\.random\.Generator"):
        zipf(500, n_clients=10, s=1.5, rng=3)
    with pytest.raises(ValueError, match=r"s must lie in \[0, inf\); got -1.5"):
        zipf(500, n_clients=10, s=-1.5, rng=np.random.default_rng(3))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(50, 2000),
    k=st.integers(2, 6),
    alpha=st.floats(0.3, 100.0),
    rate=st.floats(0.1, 0.9),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_covers_every_row_once(n, k, alpha, rate, seed):
    rng = np.random.default_rng(seed)
    y = (np.random.default_rng(seed + 1).random(n) < rate).astype(int)
    if y.min() == y.max():
        return
    try:
        parts = dirichlet(y, n_clients=k, alpha=alpha, rng=rng)
    except DataError:
        return  # tiny n with small alpha may not give every client a row
    assert _is_exact_cover(parts, n)
    assert all(p.size for p in parts)


@settings(max_examples=30, deadline=None)
@given(groups=st.lists(st.integers(0, 4), min_size=5, max_size=300))
def test_natural_covers_every_row_once(groups):
    g = np.array(groups)
    k = g.max() + 1
    if len(np.unique(g)) < k:
        with pytest.raises(DataError, match="zero rows"):
            natural(g)
        return
    parts = natural(g)
    assert _is_exact_cover(parts, g.size)
    for c, p in enumerate(parts):
        assert (g[p] == c).all()


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = np.repeat([0, 1, 2], 2000)
    skew = {
        a: np.mean(
            [
                label_skew(y, dirichlet(y, n_clients=10, alpha=a, rng=np.random.default_rng(s)))
                for s in range(10)
            ]
        )
        for a in (0.1, 1.0, 10.0, 1000.0)
    }
    assert skew[0.1] > skew[1.0] > skew[10.0] > skew[1000.0]
    assert skew[1000.0] < 0.02  # effectively IID
    assert skew[0.1] > 0.4


def test_zero_row_clients_are_refused():
    with pytest.raises(DataError, match="zero rows"):
        iid(3, n_clients=5, rng=np.random.default_rng(0))
    with pytest.raises(DataError, match="zero rows"):
        dirichlet(np.array([0, 1, 0]), n_clients=5, alpha=1.0, rng=np.random.default_rng(0))


def test_partitions_are_frozen_by_seed():
    a = iid(100, n_clients=3, rng=np.random.default_rng(42))
    b = iid(100, n_clients=3, rng=np.random.default_rng(42))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
