"""Summary statistics and paired significance tests (benchmark paper §4.3).

Runs are paired by seed: learner A's seed s and learner B's seed s share the
data split and client partition, so differences are taken seed by seed. The
paper reports the paired t-test, the Wilcoxon signed-rank test (its primary
test at 20 seeds) and Cohen's d; here d is the paired d_z = mean(diff) /
SD(diff), positive when the first learner scores higher.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample SD (ddof = 1; SD 0 for a single value)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def cohens_d_paired(a: Sequence[float], b: Sequence[float]) -> float:
    """d_z = mean(a − b) / SD(a − b), ddof = 1 (0 if all differences vanish, ±inf if constant)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size < 2:
        return math.nan
    sd = d.std(ddof=1)
    if sd == 0.0:
        return 0.0 if d.mean() == 0.0 else math.copysign(math.inf, d.mean())
    return float(d.mean() / sd)


def paired_tests(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Paired comparison of ``a`` and ``b`` (same seeds, same order).

    Returns
    -------
    dict
        ``n``, ``mean_diff`` (a − b), ``t_p`` (two-sided paired t-test),
        ``wilcoxon_p`` (two-sided signed-rank; NaN when every difference is 0
        or fewer than 2 pairs) and ``cohens_d`` (paired d_z).
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths; got {x.size} and {y.size}")
    out = {"n": float(x.size), "mean_diff": float(np.mean(x - y)) if x.size else math.nan}
    diff = x - y
    if x.size < 2 or np.all(diff == 0.0):
        out.update(t_p=math.nan, wilcoxon_p=math.nan, cohens_d=cohens_d_paired(x, y))
        return out
    out["t_p"] = float(stats.ttest_rel(x, y).pvalue)
    out["wilcoxon_p"] = float(stats.wilcoxon(x, y).pvalue)
    out["cohens_d"] = cohens_d_paired(x, y)
    return out


def sd_units(ours: float, our_sd: float, paper: float, paper_sd: float | None) -> float:
    """(ours − paper) in SDs: the pooled √((s₁² + s₂²)/2) when the paper gives an SD, else ours."""
    sd = our_sd if paper_sd is None else math.sqrt((our_sd**2 + paper_sd**2) / 2.0)
    if not sd > 0.0:
        return math.nan
    return (ours - paper) / sd


def format_p(p: float) -> str:
    """p-values as the paper prints them (``<0.001``)."""
    if math.isnan(p):
        return "–"
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def target_test(
    ours: dict[int, float], reference: dict[int, float] | float
) -> tuple[str, int, float]:
    """Two-sided p-value of one learner's target against its reference, over seeds.

    ``ours`` and ``reference`` map evaluation seed → score. Same seeds on both sides:
    the Wilcoxon signed-rank test on the per-seed differences (paired by seed, paper
    §4.3); different seed sets (a forest's 5 seeds against a tuned learner's 20):
    Welch's t-test, unpaired; a number (the paper's published mean): the one-sample
    signed-rank test of ``ours`` − it.

    Returns
    -------
    tuple
        (test name, pairs or ``ours``' size, p); p is NaN with fewer than 2 values or
        when every difference is 0.
    """
    a = np.array([ours[s] for s in sorted(ours)], dtype=np.float64)
    if isinstance(reference, dict) and set(reference) == set(ours):
        diff = a - np.array([reference[s] for s in sorted(ours)], dtype=np.float64)
        name = "wilcoxon"
    elif isinstance(reference, dict):
        b = np.array(list(reference.values()), dtype=np.float64)
        if a.size < 2 or b.size < 2:
            return "welch", int(a.size), math.nan
        return "welch", int(a.size), float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    else:
        diff, name = a - float(reference), "wilcoxon (one-sample)"
    if diff.size < 2 or np.all(diff == 0.0):
        return name, int(diff.size), math.nan
    return name, int(diff.size), float(stats.wilcoxon(diff).pvalue)
