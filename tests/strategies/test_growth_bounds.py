"""Lumberjack's growth is capped by public values, whatever a client adds to its counts.

A hostile client raises every count it returns (to at most the shim's public
per-client range, beyond which the codec refuses the reply). Without caps
every node then passes the sparse threshold and each stage grows from
``max_frontier`` roots' complete subtrees: on heart (k = 4, d = 21, ε = 8)
≈ 49,000 nodes per tree against ≈ 1,447 allowed by the record bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy, build, feature_space

from fedpriv.data import load_heart
from fedpriv.federation.protocol import ClientData
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.methods import StrategyContext
from fedpriv.models.lumberjack_bounds import heavy_level_cap
from fedpriv.privacy import PrivacyBudget, PrivacyLedger, SparseThreshold
from tests.keys import key_for, private_rng

# Small enough to run in well under a second per fit; ε = 8 puts τ ≈ 29 below +50.
CFG = LumberjackConfig(trees=4, depth=21)  # stages 7, 7, 7
EPS = 8.0


class Recording:
    """The Lumberjack client half; client 0 adds ``bump`` to every count (if any)."""

    method = "lumberjack"

    def __init__(self, bump: float = 0.0, max_abs: float = np.inf) -> None:
        self.inner, self.bump, self.max_abs = LumberjackClient(), bump, max_abs
        self.lengths: dict[int, int] = {}

    def answer(self, query, data, sample, state, key=None):
        out = self.inner.answer(query, data, sample, state, key)
        self.lengths[query.round] = out.size
        if data.client_id == 0 and self.bump:
            # As far as the shim lets it: record_bound · max_records per coordinate.
            out = np.minimum(out + self.bump, query.record_bound * self.max_abs)
        return out


@pytest.fixture(scope="module")
def heart():
    ds = load_heart()
    X, y = ds.xy("train")
    parts = np.array_split(np.arange(y.size), 3)
    clients = [ClientData(client_id=i, X=X[p], y=y[p]) for i, p in enumerate(parts)]
    context = StrategyContext(schema=ds.schema, n_features=X.shape[1], n_records=y.size)
    return clients, context


def _run(clients, strategy, handler):
    InProcessRuntime(
        clients=clients, handler=handler, seed=0, secret_key=key_for(5), secure_aggregation=False
    ).run(strategy, ledger=PrivacyLedger(budget=PrivacyBudget(epsilon=EPS, delta=1e-6)))
    return strategy


@pytest.mark.parametrize("bump", [50.0, 1e6])
def test_a_hostile_client_cannot_grow_the_trees_beyond_the_public_caps(heart, bump):
    # ~0.5 s each. The caps recomputed here from public values only (module docstring
    # of fedpriv.models.lumberjack_bounds): B per level, N ≤ 1 + 2·B·d per tree.
    clients, context = heart
    biggest = max(c.n for c in clients)
    honest = _run(clients, build(CFG, context), Recording())
    hostile = Recording(bump, max_abs=biggest)
    strategy = _run(clients, build(CFG, context), hostile)
    cal = strategy.calibration_
    B = heavy_level_cap(
        n_records=context.n_records,
        n_trees=CFG.trees,
        heights=CFG.heights,
        tau=cal.tau,
        sigma=cal.sigma,
    )
    assert B == strategy.caps_.level < context.n_records // 8
    F = min(CFG.max_frontier, B)
    nodes = [t.left.size for t in strategy.model().trees]
    assert max(nodes) <= 1 + 2 * B * CFG.depth
    assert max(nodes) <= strategy.caps_.nodes_per_tree
    # The attack bites: far more nodes than the honest run, the cap reached.
    assert min(nodes) > 10 * max(t.left.size for t in honest.model().trees)
    assert max(nodes) > strategy.caps_.nodes_per_tree // 2
    leaves = [int(t.is_leaf.sum()) for t in strategy.model().trees]
    assert max(leaves) <= (strategy.caps_.nodes_per_tree + 1) // 2
    k, C = CFG.trees, context.n_classes
    stages = [k * (1 if s == 0 else 2 * F) * (2**h - 1) for s, h in enumerate(CFG.heights)]
    want = [*stages, k * C * (1 + B * CFG.depth)]
    got = [hostile.lengths[r] for r in range(CFG.rounds)]
    assert all(g <= w for g, w in zip(got, want, strict=True)), (got, want)
    assert all(g <= strategy.caps_.reply_length(r) for r, g in enumerate(got))


def test_honest_runs_never_meet_the_record_bound_caps(heart):
    # ~0.5 s. The same key with and without the record bound: the same forest, bit
    # for bit (the caps bind with probability <= 1e-9 on honest counts).
    clients, context = heart
    capped = _run(clients, build(CFG, context), Recording())
    assert capped.caps_.level < CFG.max_frontier  # the record bound is the tighter cap
    free = LumberjackStrategy(CFG, space=feature_space(context, CFG.split_features))
    free = _run(clients, free, Recording())
    a, b = capped.model().to_arrays(), free.model().to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert max(t.left.size for t in capped.model().trees) > 20  # trees that did grow


def test_the_level_cap_bounds_the_threshold_answers_of_any_honest_level():
    # ~0.1 s. A level's honest counts sum to at most n; for every split of n into
    # equal counts c (the worst case for a count of ⊤ answers), the ⊤ answers stay
    # below B in every trial. Non-private: B = n; a gate g: B <= n / (g + 1).
    n, sigma, tau = 2000, 5.0, 30.0
    B = heavy_level_cap(n_records=n, n_trees=4, heights=[7, 7, 7], tau=tau, sigma=sigma)
    assert n // int(tau + 4 * sigma) < B < n // 10
    mech, rng = SparseThreshold(sigma=sigma, gap=tau - 1.0), private_rng(7)
    worst = 0
    for c in range(1, int(tau + 6 * sigma)):
        counts = np.full((20, n // c), c)  # 20 trials
        worst = max(worst, int(mech.check(counts, rng=rng).sum(axis=1).max()))
    assert worst <= B < 4 * worst  # a guarantee, and not a vacuous one
    assert heavy_level_cap(n_records=n, n_trees=4, heights=[7], tau=None) == n
    gated = heavy_level_cap(n_records=n, n_trees=4, heights=[7], gate=99, tau=101.0, sigma=1e3)
    assert gated == n // 100
    with pytest.raises(ValueError, match="n_records"):
        heavy_level_cap(n_records=0, n_trees=4, heights=[7], tau=tau, sigma=sigma)
