"""The release-boundary test for boosting, DP-SGD and the fully random forest.

Each learner runs on D (heart's training rows over three clients) and on D
plus one canary record appended last to client 0, with the same injected key
(existing rows keep their Poisson coins, the server its noise and
participation coins) and every release of the D + 1 run replayed from the D
run (the mechanism still runs, so accounting and noise streams stay
aligned). Every query each client receives, every reply length, the
communication figures, the ledger and the model must then be identical: the
model and the queries are functions of released values only. A broken twin
that puts one exact statistic into the next query fails the same test.
"""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.clients.random_forest import RandomForestClient
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy

from fedpriv.data import load_heart
from fedpriv.federation.protocol import Query, make_clients
from fedpriv.models.lumberjack import FeatureSpace
from tests.strategies.release_boundary import differences, run, with_canary

EPS, DELTA = 2.0, 1e-5


@pytest.fixture(scope="module")
def heart():
    ds = load_heart()
    X, y = ds.xy("train")
    clients = make_clients(X, y, np.array_split(np.arange(y.size), 3))
    space = FeatureSpace.from_schema(ds.schema, "columns")
    # A typical record (client 1's first), so that it moves the gradients it enters.
    return clients, with_canary(clients, X[200], y[200]), space, y.size


def _learners(space, n):
    """(name, strategy factory, handler); n: the public record count (README)."""
    boost = BoostingConfig(rounds=6, depth=3, sampling_rate=0.5)
    sgd = LogisticConfig(rounds=5, sampling_rate=0.5)

    def forest(mode, leaves):
        cfg = RandomForestConfig(trees=3, depth=3, mode=mode, leaf_mechanism=leaves)
        return lambda: RandomForestStrategy(cfg, space=space)

    return {
        "boosting": (lambda: DPBoostingStrategy(boost, participation=0.7), BoostingClient()),
        "dpsgd": (lambda: DPSGDStrategy(sgd, n_records=n), DPSGDClient()),
        "forest-all": (forest("all", "gaussian"), RandomForestClient()),
        "forest-disjoint": (forest("disjoint", "gaussian"), RandomForestClient()),
        "forest-disjoint-em": (forest("disjoint", "exponential"), RandomForestClient()),
    }


class LeaksExactSum:
    """Broken twin: the next query carries the exact sum of the last aggregate."""

    def __init__(self, inner):
        self.inner, self.method, self.exact = inner, inner.method, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def next_query(self):
        q = self.inner.next_query()
        if q is None:
            return None
        config = {**q.config, "exact_sum": self.exact}
        return Query(q.round, q.method, q.sampling_rate, q.reply_length, q.record_bound,
                     q.arrays, config)  # fmt: skip

    def update(self, query, aggregate):
        self.exact = float(np.sum(aggregate))
        self.inner.update(query, aggregate)


def _pair(heart, name, twin=False):
    d_clients, d1_clients, space, n = heart
    make, handler = _learners(space, n)[name]
    wrap = LeaksExactSum if twin else (lambda s: s)
    d = run(wrap(make()), handler, d_clients, epsilon=EPS, delta=DELTA)
    d1 = run(wrap(make()), handler, d1_clients, epsilon=EPS, delta=DELTA, replay=d["released"])
    return d, d1


@pytest.mark.parametrize(
    "name", ["boosting", "dpsgd", "forest-all", "forest-disjoint", "forest-disjoint-em"]
)
def test_clients_reports_and_model_are_functions_of_released_values(heart, name):
    d, d1 = _pair(heart, name)
    assert len(d["received"]) == len(d1["received"]) > 0
    assert differences(d["received"], d1["received"]) == []  # queries, reply lengths
    assert differences(d["communication"], d1["communication"]) == []
    assert differences(d["ledger"], d1["ledger"]) == []
    # The exponential mechanism's labels are drawn outside ledger.release (ledger.spend):
    # they are the released values and may differ; nothing else in the model may.
    allowed = ("leaf_scores",) if name.endswith("-em") else ()
    assert differences(d["model"], d1["model"], allowed=allowed) == []


@pytest.mark.parametrize("name", ["boosting", "dpsgd"])
def test_the_canary_moves_the_unforced_releases(heart, name):
    # Meaningful: without the replay, the canary changes what is released.
    d_clients, d1_clients, space, n = heart
    make, handler = _learners(space, n)[name]
    d = run(make(), handler, d_clients, epsilon=EPS, delta=DELTA)
    d1 = run(make(), handler, d1_clients, epsilon=EPS, delta=DELTA)
    assert differences(d["released"], d1["released"]) != []


@pytest.mark.parametrize("name", ["boosting", "dpsgd"])
def test_a_query_carrying_an_exact_statistic_fails_the_same_test(heart, name):
    d, d1 = _pair(heart, name, twin=True)
    leaks = differences(d["received"], d1["received"])
    assert leaks and all("exact_sum" in p for p in leaks)
