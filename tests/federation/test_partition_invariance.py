"""Remark 1 as a runtime property: at ρ = 1 the pooled sample is Poisson(q), whatever the partition.

Benchmark paper §5.6, Remark 1: under full participation the union of the
clients' independent Poisson(q) samples is a Poisson(q) sample of the pooled
data, so a round's statistics do not depend on how the rows are split. The
probe below runs the real :class:`InProcessRuntime` with a handler that
replies with the indicator of the global rows it sampled, so each round's
aggregate is the pooled inclusion vector. Three checks, each with an explicit
p-value floor:

* every row is included with frequency q (χ² of the per-row counts against
  Binomial(R, q));
* rows are included independently: within-client disjoint pairs are
  co-included at rate q² (χ²), and the pooled sample size is
  Binomial(n, q) (χ² goodness of fit);
* this holds for IID, Dirichlet(0.1) label-skew and Zipf(1.5) size-imbalance
  partitions.

Broken twins that the same checks reject: partial participation ρ = 0.5
(the pooled sample is then *not* Poisson(ρ·q), the paper's accounting error)
and a fixed-size sampler in place of Poisson sampling.
"""

import numpy as np
import pytest
from scipy import stats

from fedpriv.data import dirichlet, iid, zipf
from fedpriv.federation import protocol
from fedpriv.federation.protocol import Query, make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import chi_square_selection_test
from tests.keys import key_for

N, K, Q, ROUNDS = 40, 4, 0.3, 3000
PASS, FAIL = 1e-3, 1e-6  # p-value floor for a sound sampler, ceiling for a broken one


class _IndicatorHandler:
    """Replies with the indicator of the global row ids (feature 0) it sampled."""

    def answer(self, query, data, sample, state, key=None):
        reply = np.zeros(query.reply_length)
        reply[data.X[sample, 0].astype(np.int64)] = 1.0
        return reply


class _ProbeStrategy:
    """Asks for the indicator ``ROUNDS`` times and keeps every aggregate."""

    method = "probe"
    noise_multiplier_ = None

    def begin(self, *, n_features, ledger, rng, secret_rng):
        self.rows: list[np.ndarray] = []

    def next_query(self):
        if len(self.rows) >= ROUNDS:
            return None
        return Query(
            round=len(self.rows), method="probe", sampling_rate=Q, reply_length=N, record_bound=1
        )

    def update(self, query, aggregate):
        self.rows.append(np.zeros(N) if aggregate is None else aggregate)


def _inclusions(partition, *, participation=1.0, seed=0):
    X = np.arange(N, dtype=np.float64)[:, None]
    rt = InProcessRuntime(
        clients=make_clients(X, np.zeros(N), partition),
        handler=_IndicatorHandler(),
        seed=seed,
        secret_key=key_for(seed),  # the Poisson and participation coins
        participation=participation,
        secure_aggregation=False,
    )
    probe = rt.run(_ProbeStrategy(), ledger=None)
    return np.rint(np.array(probe.rows)).astype(np.int64), partition


def _pooled_poisson_pvalues(inclusions, partition, rate):
    """p-values of (marginal rate, within-client pair independence, sample-size law)."""
    rounds = inclusions.shape[0]
    counts = inclusions.sum(axis=0)
    var = rounds * rate * (1 - rate)
    marginal = stats.chi2.sf(np.sum((counts - rounds * rate) ** 2 / var), df=counts.size)
    pairs = [(p[i], p[i + 1]) for p in partition for i in range(0, p.size - 1, 2)]
    both = np.array([np.sum(inclusions[:, a] & inclusions[:, b]) for a, b in pairs])
    r2 = rate * rate
    pair = stats.chi2.sf(np.sum((both - rounds * r2) ** 2 / (rounds * r2 * (1 - r2))), len(pairs))
    sizes = inclusions.sum(axis=1)
    size = chi_square_selection_test(sizes, stats.binom.pmf(np.arange(N + 1), N, rate))
    return marginal, pair, size


def _partitions():
    rng = np.random.default_rng(5)
    y = (np.arange(N) % 2).astype(int)
    return {
        "iid": iid(N, n_clients=K, rng=rng),
        "dirichlet-0.1": dirichlet(y, n_clients=K, alpha=0.1, rng=rng),
        "zipf-1.5": zipf(N, n_clients=K, s=1.5, rng=rng),
    }


@pytest.mark.parametrize("name", ["iid", "dirichlet-0.1", "zipf-1.5"])
def test_full_participation_pools_to_a_poisson_sample_whatever_the_partition(name):
    partition = _partitions()[name]
    inclusions, partition = _inclusions(partition)
    # Measured p-values under key_for(0) (marginal, pairs, sizes): iid .77/.36/.45,
    # dirichlet .35/.050/.047, zipf .56/.36/.11. The ρ = 0.5 twin below: pairs 8e-259, sizes 0.
    assert min(_pooled_poisson_pvalues(inclusions, partition, Q)) > PASS


def test_partial_participation_is_not_a_poisson_sample_at_rho_q():
    # The paper's effective-rate premise: with ρ = 0.5 the marginal rate is ρ·q,
    # but a client's rows come and go together, so pairs and sizes give it away.
    partition = _partitions()["dirichlet-0.1"]
    inclusions, partition = _inclusions(partition, participation=0.5)
    marginal, pair, size = _pooled_poisson_pvalues(inclusions, partition, 0.5 * Q)
    assert marginal > PASS  # the marginal rate alone looks fine...
    assert pair < FAIL and size < FAIL  # ...independence does not


def test_a_fixed_size_sampler_is_caught(monkeypatch):
    def fixed_size(n, rate, rng):
        return np.sort(rng.choice(n, size=round(rate * n), replace=False))

    # The transport samples through protocol.client_sample, which draws per record here.
    monkeypatch.setattr(protocol, "poisson_sample", fixed_size)
    inclusions, partition = _inclusions(_partitions()["iid"])
    assert _pooled_poisson_pvalues(inclusions, partition, Q)[2] < FAIL
