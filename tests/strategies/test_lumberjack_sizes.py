"""Lumberjack's automatic trees and depth: from the budget and the public record bound only."""

import itertools
import math

import numpy as np
import pytest
from fedpriv.server.estimators import LumberjackClassifier
from fedpriv.strategies.lumberjack import LumberjackConfig

from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.methods import get_method
from fedpriv.models.lumberjack import stage_heights
from fedpriv.models.lumberjack_sizes import (
    GROWTH_RATIO,
    MIN_AUTO_TREES,
    PAPER_DEPTH,
    PAPER_TREES,
    auto_size,
    size_ladder,
    sizing_records,
)
from fedpriv.privacy import staged_queries_per_record
from tests.keys import key_for

HEART_BOUND = 4 * declared_max_records("heart", 4, 0)  # 640: 4 hospitals × the largest's rows
ADULT_BOUND = 26_050


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _m(plan, h=7):
    return staged_queries_per_record(plan[0], stage_heights(plan[1], h))


def test_the_ladder_runs_from_the_paper_plan_by_decreasing_queries_and_keeps_set_values():
    ladder = size_ladder(trees=0, depth=0, stage_height=7)
    assert ladder[0] == (PAPER_TREES, PAPER_DEPTH) == (30, 49)
    assert ladder[:7] == [(30, d) for d in (49, 42, 35, 28, 21, 14, 7)]  # stages first
    assert ladder[7:] == [(k, 7) for k in range(29, MIN_AUTO_TREES - 1, -1)]  # then trees
    m = [_m(p) for p in ladder]
    assert all(a > b for a, b in itertools.pairwise(m))  # strictly fewer queries
    assert size_ladder(trees=12, depth=0, stage_height=7) == [(12, d) for d in range(49, 0, -7)]
    assert size_ladder(trees=0, depth=21, stage_height=7) == [(k, 21) for k in range(30, 4, -1)]
    assert size_ladder(trees=12, depth=21, stage_height=7) == [(12, 21)]
    # Another stage height: whole stages under the paper depth (m still falls).
    ladder10 = size_ladder(trees=30, depth=0, stage_height=10)
    assert ladder10 == [(30, 49), (30, 40), (30, 30), (30, 20), (30, 10)]
    m10 = [_m(p, 10) for p in ladder10]
    assert all(a > b for a, b in itertools.pairwise(m10))


@pytest.mark.parametrize("n_records", [1, 50, 300, 640, 2_000, 26_050, 10**7])
def test_the_bisection_finds_the_first_growable_plan(n_records):
    ladder = size_ladder(trees=0, depth=0, stage_height=7)

    def tau(k, d):  # any τ rising with m
        return 3.0 * math.sqrt(_m((k, d)))

    growable = [p for p in ladder if n_records >= GROWTH_RATIO * tau(*p)]
    want = growable[0] if growable else ladder[-1]
    assert auto_size(n_records=n_records, tau=tau, trees=0, depth=0, stage_height=7) == want


@pytest.mark.parametrize(
    ("bound", "epsilon", "plan"),
    [
        # Heart: the paper plan's τ (1,605 at ε 0.5; 442 at 2) is beyond a 640-record bound.
        (HEART_BOUND, 0.5, (MIN_AUTO_TREES, 7)),
        (HEART_BOUND, 2.0, (30, 7)),
        (HEART_BOUND, 8.0, (30, 49)),
        # Adult: the paper's plan is growable at every ε here and is kept.
        (ADULT_BOUND, 0.5, (30, 49)),
        (ADULT_BOUND, 2.0, (30, 49)),
        (ADULT_BOUND, 8.0, (30, 49)),
    ],
)
def test_the_resolved_plan_is_the_largest_that_the_public_bound_can_grow(bound, epsilon, plan):
    cfg = LumberjackConfig().resolved(epsilon=epsilon, delta=1e-6, n_records=bound)
    assert (cfg.trees, cfg.depth) == plan
    assert cfg.rounds == len(stage_heights(cfg.depth)) + 1
    ladder = size_ladder(trees=0, depth=0, stage_height=7)
    i = ladder.index(plan)

    def tau(p):
        return cfg.tau(epsilon=epsilon, delta=1e-6, trees=p[0], depth=p[1])

    if plan != ladder[-1]:
        assert bound >= GROWTH_RATIO * tau(plan)  # growable ...
    if i > 0:
        assert bound < GROWTH_RATIO * tau(ladder[i - 1])  # ... and the one before is not
    # The τ the strategy calibrates is the one the rule used.
    assert cfg.tau(epsilon=epsilon, delta=1e-6, trees=30, depth=49) == pytest.approx(
        {0.5: 1605.5, 2.0: 441.9, 8.0: 127.5}[epsilon], rel=1e-3
    )


def test_set_values_win_and_a_resolved_config_resolves_to_itself():
    fixed = LumberjackConfig(trees=12, depth=21)
    assert fixed.resolved(epsilon=0.5, delta=1e-6, n_records=HEART_BOUND) is fixed
    trees_set = LumberjackConfig(trees=12).resolved(epsilon=0.5, delta=1e-6, n_records=640)
    assert (trees_set.trees, trees_set.depth) == (12, 7)  # depth alone moved
    depth_set = LumberjackConfig(depth=21).resolved(epsilon=2.0, delta=1e-6, n_records=640)
    assert depth_set.depth == 21 and MIN_AUTO_TREES <= depth_set.trees < 30
    once = LumberjackConfig().resolved(epsilon=2.0, delta=1e-6, n_records=640)
    assert once.resolved(epsilon=8.0, delta=1e-6, n_records=10**6) is once
    # Non-private, or without a public bound: the paper's sizes.
    for eps, n in ((math.inf, 640), (None, 640), (2.0, None)):
        plan = LumberjackConfig().resolved(epsilon=eps, delta=1e-6, n_records=n)
        assert (plan.trees, plan.depth) == (30, 49)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"trees": -1}, r"^trees must be an integer in \[0, inf\) \(0: automatic\); got -1$"),
        ({"depth": 201}, r"^depth must be an integer in \[0, 200\] \(0: automatic\); got 201$"),
        (
            {"depth": 2.0},
            r"^depth must be an integer in \[0, 200\] .*; got 2.0 \(float\)$",
        ),
    ],
)
def test_bad_sizes_are_refused_naming_key_value_and_range(settings, message):
    with pytest.raises((TypeError, ValueError), match=message):
        LumberjackConfig(**settings)


def _fit(data, y=None, **kw):
    # An injected key: the same noise every run. Heart's public per-hospital bound.
    args = {"epsilon": 2.0, "seed": 1, "secret_key": key_for(1), "num_clients": 4,
            "max_records": declared_max_records("heart", 4, 0), **kw}  # fmt: skip
    return LumberjackClassifier(**args).fit(data, y)


def test_the_size_follows_the_declared_bound_not_the_rows(heart):
    # The same declared bound, a third of the rows gone: the same plan. At ε 2 the
    # bound (640) affords 30 trees of depth 7; the rows' counts (391, 260) would not.
    X, y = heart.xy("train")
    full = _fit(heart, epsilon=2.0)
    keep = 2 * len(y) // 3
    fewer = _fit(X[:keep], y=y[:keep], epsilon=2.0)
    assert (full.config_.trees, full.config_.depth) == (fewer.config_.trees, fewer.config_.depth)
    assert (full.config_.trees, full.config_.depth) == (30, 7)
    by_rows = LumberjackConfig().resolved(epsilon=2.0, delta=1e-6, n_records=len(y))
    assert by_rows.trees < 30  # what a count-sized plan would have been
    # A larger declared bound (same rows) keeps the paper's plan: the bound decides.
    big = _fit(heart, epsilon=0.5, max_records=5_000)
    assert (big.config_.trees, big.config_.depth) == (30, 49)


def test_rounds_planned_are_the_resolved_plans(heart):
    clf = _fit(heart, epsilon=2.0)
    assert (clf.config_.trees, clf.config_.depth) == (30, 7)
    assert clf.run_outcome_.rounds_planned == clf.config_.rounds == 2  # one stage, the leaves
    assert clf.communication_.rounds == 2 and clf.run_status_ == "completed"
    assert len(clf.model_.trees) == 30


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_on_heart_the_automatic_forest_spreads_where_the_paper_plan_is_constant(heart, epsilon):
    X, y = heart.xy("test")
    _, ytr = heart.xy("train")
    base = float(np.mean((ytr.mean() - y) ** 2))
    paper = _fit(heart, epsilon=epsilon, trees=30, depth=49)
    auto = _fit(heart, epsilon=epsilon)
    p_paper, p_auto = paper.predict_proba(X)[:, 1], auto.predict_proba(X)[:, 1]
    # The paper's plan: no node (ε 0.5) or only the odd root (ε 2) passes at this size.
    assert np.std(p_paper) < 0.03
    assert np.std(p_auto) >= 0.05
    brier = float(np.mean((p_auto - y) ** 2))
    assert brier <= base - 0.015
    assert brier <= float(np.mean((p_paper - y) ** 2)) - 0.01
    # Both spend the budget they were given.
    assert 0.99 * epsilon <= auto.epsilon_spent_ <= epsilon
    assert 0.99 * epsilon <= paper.epsilon_spent_ <= epsilon


def test_a_released_count_sizes_the_plan_and_a_declared_bound_is_used_as_it_is():
    assert sizing_records(640) == 640  # declared: the bound itself
    assert sizing_records(2_400, 391.7) == 391.7  # released: ñ, not its upper bound U
    assert sizing_records(2_400, -35.0) == 1.0  # clipped to [1, U]
    assert sizing_records(2_400, 9_000.0) == 2_400
    at_u = LumberjackConfig().resolved(epsilon=0.99, delta=1e-6, n_records=2_400)
    at_n = LumberjackConfig().resolved(
        epsilon=0.99, delta=1e-6, n_records=2_400, released_count=391.0
    )
    assert (at_u.trees, at_u.depth) == (30, 21)  # τ ≈ 542: more than Heart's 391 rows
    assert (at_n.trees, at_n.depth) == (MIN_AUTO_TREES, 7)  # τ ≈ 118
    # The registry passes ñ on only to a ``resolved`` that takes it: DP-SGD's schedule
    # (and a plugin's contract) follow the bound alone.
    logistic = get_method("logistic")
    cfg = logistic.config_class()
    assert logistic.resolve_config(
        cfg, epsilon=1.0, delta=1e-5, n_records=2_400, released_count=391.0
    ) == logistic.resolve_config(cfg, epsilon=1.0, delta=1e-5, n_records=2_400)


def test_without_a_declared_bound_heart_at_epsilon_1_grows_from_the_released_count(heart):
    # No max_records (the README's quickstart): the fit releases the count and its bound U
    # is several times the 391 rows; sized from U no node could pass τ (the forest was the
    # class rates), sized from ñ the lean plan grows. The bounds still use U.
    clf = LumberjackClassifier(epsilon=1.0, seed=1, secret_key=key_for(1)).fit(heart)
    n = heart.xy("train")[1].size
    assert clf.context_.n_records > 4 * n  # U, for the caps and the codec
    assert (clf.config_.trees, clf.config_.depth) == (MIN_AUTO_TREES, 7)
    assert clf.calibration_.tau < n / 2  # the root and its children can pass
    p = clf.predict_proba(heart.xy("test")[0])[:, 1]
    assert np.std(p) >= 0.05 and clf.run_status_ == "completed"
    assert 0.99 <= clf.epsilon_spent_ <= 1.0
