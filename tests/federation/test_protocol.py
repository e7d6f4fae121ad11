"""Poisson sampling is exactly Bernoulli(q) per record, on both of its code paths.

Amplification by subsampling (every accounted step is a PoissonSampledDpEvent)
holds only for independent per-record inclusion, so the sampler is tested like
a mechanism: inclusion rates, pairwise independence and the size law, each
with a broken sampler the same test rejects.
"""

import numpy as np
import pytest
from scipy import stats

from fedpriv.federation.protocol import (
    GEOMETRIC_MAX_RATE,
    GEOMETRIC_MIN_RECORDS,
    poisson_sample,
)
from tests.keys import private_rng

REPS = 3000
# (n, q): the uniform-draw path and the geometric-gap path.
PATHS = [(300, 0.3), (GEOMETRIC_MIN_RECORDS + 952, 0.02)]


def _indicators(sampler, n, q, seed=0):
    rng = private_rng(seed)
    out = np.zeros((REPS, n), dtype=bool)
    for r in range(REPS):
        out[r, sampler(n, q, rng)] = True
    return out


def _inclusion_pvalue(ind, q):
    counts = ind.sum(axis=0)
    chi2 = np.sum((counts - REPS * q) ** 2) / (REPS * q * (1 - q))
    return float(stats.chi2.sf(chi2, df=ind.shape[1]))


def _pair_pvalue(ind, q):
    # Adjacent records kept together: Binomial(REPS · (n − 1), q²) if independent.
    both = int(np.sum(ind[:, :-1] & ind[:, 1:]))
    trials = REPS * (ind.shape[1] - 1)
    return float(stats.binomtest(both, trials, q * q).pvalue)


def _size_pvalue(ind, q):
    # Sizes ~ Binomial(n, q): z-tests of their mean and variance (a fixed-size
    # sampler has the right mean and no variance); the smaller p-value.
    sizes = ind.sum(axis=1)
    law = stats.binom(ind.shape[1], q)
    z_mean = (sizes.mean() - law.mean()) / np.sqrt(law.var() / REPS)
    z_var = (sizes.var(ddof=1) - law.var()) / (law.var() * np.sqrt(2 / (REPS - 1)))
    return float(2 * stats.norm.sf(max(abs(z_mean), abs(z_var))))


@pytest.mark.parametrize(("n", "q"), PATHS)
def test_inclusion_is_independent_bernoulli(n, q):
    assert (q <= GEOMETRIC_MAX_RATE and n >= GEOMETRIC_MIN_RECORDS) == (n > 1000)
    ind = _indicators(poisson_sample, n, q)
    assert _inclusion_pvalue(ind, q) > 1e-3
    assert _pair_pvalue(ind, q) > 1e-3
    assert _size_pvalue(ind, q) > 1e-3
    assert ind.sum(axis=1).mean() == pytest.approx(n * q, rel=0.02)


def test_the_tests_reject_broken_samplers():
    def fixed_size(n, q, rng):  # sampling without replacement: no size variance
        return np.sort(rng.choice(n, size=round(n * q), replace=False))

    def clumped(n, q, rng):  # blocks of two: right rate, dependent neighbours
        keep = np.flatnonzero(rng.random((n + 1) // 2) < q)
        return np.unique(np.concatenate([2 * keep, 2 * keep + 1]).clip(max=n - 1))

    def biased(n, q, rng):  # the first record twice as likely
        rows = np.flatnonzero(rng.random(n) < q)
        return np.union1d(rows, [0]) if rng.random() < q else rows

    n, q = PATHS[0]
    assert _size_pvalue(_indicators(fixed_size, n, q), q) < 1e-6
    assert _pair_pvalue(_indicators(clumped, n, q), q) < 1e-6
    assert _inclusion_pvalue(_indicators(biased, n, q), q) < 1e-3


@pytest.mark.parametrize(("n", "q"), [*PATHS, (0, 0.5), (5, 1.0), (40_000, 0.001)])
def test_samples_are_sorted_unique_in_range_and_reproducible(n, q):
    a = poisson_sample(n, q, private_rng(7))
    b = poisson_sample(n, q, private_rng(7))
    np.testing.assert_array_equal(a, b)
    assert a.dtype.kind == "i" and np.all(np.diff(a) > 0)
    assert a.size == 0 or (a[0] >= 0 and a[-1] < n)
    if q == 1.0:
        np.testing.assert_array_equal(a, np.arange(n))


def test_rate_is_validated():
    with pytest.raises(ValueError, match=r"rate must lie in \(0, 1\]; got 0.0"):
        poisson_sample(10, 0.0, private_rng(0))


def test_a_seeded_generator_is_refused():
    # Coins from a seeded PCG64 are replayable by anyone who knows the seed.
    with pytest.raises(TypeError, match="private generator"):
        poisson_sample(10, 0.5, np.random.default_rng(0))
