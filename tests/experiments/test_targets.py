"""The per-learner target tests: p-values against exact and scipy references, and twins
where the effect is absent."""

import math

import numpy as np
import pandas as pd
import pytest
from fedpriv.experiments.bench.stats import target_test
from fedpriv.experiments.bench.targets import checks, failures
from scipy import stats as sps


def test_paired_wilcoxon_p_is_the_exact_signed_rank_p():
    # Ten paired seeds, every difference positive and distinct: the exact two-sided
    # signed-rank p is 2 / 2^10 (only the all-positive and all-negative sign patterns
    # reach rank sum 55), whatever the sizes.
    ours = {s: 0.80 + 0.001 * (s + 1) for s in range(10)}
    ref = {s: 0.80 for s in range(10)}
    test, n, p = target_test(ours, ref)
    assert (test, n) == ("wilcoxon", 10)
    assert p == pytest.approx(2.0 / 2**10, rel=1e-12)
    assert p == pytest.approx(sps.wilcoxon(list(ours.values()), list(ref.values())).pvalue)


def test_paired_twin_without_an_effect_is_not_significant():
    # The same magnitudes with alternating signs: rank sums W+ = 30, W- = 25 of 55, so
    # the exact two-sided p is large (scipy's exact distribution as the reference).
    diffs = [0.001 * (s + 1) * (-1) ** s for s in range(10)]
    ours = {s: 0.80 + d for s, d in enumerate(diffs)}
    ref = {s: 0.80 for s in range(10)}
    _, _, p = target_test(ours, ref)
    assert p == pytest.approx(sps.wilcoxon(diffs).pvalue)
    assert p > 0.5


def test_unpaired_seeds_use_welch_and_a_number_the_one_sample_test():
    rng = np.random.default_rng(3)
    forest = {s: v for s, v in enumerate(rng.normal(0.75, 0.01, 5))}
    tuned = {s: v for s, v in enumerate(rng.normal(0.80, 0.01, 20))}
    test, n, p = target_test(forest, tuned)
    want = sps.ttest_ind(list(forest.values()), list(tuned.values()), equal_var=False).pvalue
    assert (test, n) == ("welch", 5) and p == pytest.approx(want)
    test, n, p = target_test(tuned, 0.80)
    want = sps.wilcoxon(np.array(list(tuned.values())) - 0.80).pvalue
    assert (test, n) == ("wilcoxon (one-sample)", 20) and p == pytest.approx(want)


def test_degenerate_samples_give_nan():
    assert math.isnan(target_test({0: 0.5, 1: 0.6}, {0: 0.5, 1: 0.6})[2])
    assert math.isnan(target_test({0: 0.5}, {1: 0.6, 2: 0.7})[2])


def _long(rows):
    out = []
    for stage, d, e, learner, seed, metrics in rows:
        for k, v in metrics.items():
            out.append(
                {"stage": stage, "dataset": d, "learner": learner, "variant": "selected",
                 "config": "c", "epsilon": e, "seed": seed, "metric": k, "value": v}
            )  # fmt: skip
    return pd.DataFrame(out)


def _fit(auc, brier=0.10):
    return {"auc": auc, "brier": brier, "brier_base": 0.13, "epsilon_spent": 1.0}


def test_checks_test_every_tree_learner_on_its_own():
    rng = np.random.default_rng(7)
    base = rng.normal(0.80, 0.004, 20)
    rows = [("main", "brfss", 1.0, "logistic", s, _fit(base[s])) for s in range(20)]
    # dp_gam ahead on every seed (distinct steps); boosting its twin without an effect.
    rows += [
        ("main", "brfss", 1.0, "dp_gam", s, _fit(base[s] + 0.001 * (s + 1))) for s in range(20)
    ]
    rows += [
        ("main", "brfss", 1.0, "boosting", s, _fit(base[s] + 0.001 * (s + 1) * (-1) ** s))
        for s in range(20)
    ]
    rows += [("main", "brfss", 1.0, "lumberjack", s, _fit(0.70 + 0.001 * s)) for s in range(5)]
    c = checks(_long(rows))
    tree = c[c["check"].str.endswith("≥ DP-SGD logistic")].set_index("learner")
    assert set(tree.index) == {"dp_gam", "boosting", "lumberjack"}  # no best over learners
    assert tree.loc["dp_gam", "met"] and tree.loc["dp_gam", "significant"]
    assert tree.loc["dp_gam", "p_value"] == pytest.approx(2.0 / 2**20, rel=1e-9)
    assert not tree.loc["boosting", "significant"]
    assert tree.loc["lumberjack", "test"] == "welch" and not tree.loc["lumberjack", "met"]
    paper = c[c["check"] == "boosting ≥ paper"]
    assert len(paper) == 1 and paper["test"].iloc[0] == "wilcoxon (one-sample)"
    brier = c[c["check"] == "Brier ≤ base rate"]
    assert len(brier) == 4 and brier["met"].all()
    lines = failures(c)
    assert any("lumberjack ≥ DP-SGD logistic** fails on brfss" in line for line in lines)
    assert all("p = " in line for line in lines)
