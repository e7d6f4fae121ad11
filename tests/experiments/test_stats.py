"""Statistics helpers against scipy and hand-computed values."""

import math

import numpy as np
import pytest
from fedpriv.experiments.bench.stats import (
    cohens_d_paired,
    format_p,
    mean_sd,
    paired_tests,
    sd_units,
)
from scipy import stats as sps


def test_paired_tests_match_scipy():
    rng = np.random.default_rng(0)
    a = rng.normal(0.80, 0.01, 20)
    b = a - rng.normal(0.004, 0.003, 20)
    out = paired_tests(a, b)
    assert out["t_p"] == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert out["wilcoxon_p"] == pytest.approx(sps.wilcoxon(a, b).pvalue)
    assert out["mean_diff"] == pytest.approx(np.mean(a - b))
    assert out["n"] == 20


def test_cohens_d_by_hand():
    # differences 1, 2, 3: mean 2, sample SD 1 -> d_z = 2
    assert cohens_d_paired([2, 4, 6], [1, 2, 3]) == pytest.approx(2.0)
    assert cohens_d_paired([1, 2], [1, 2]) == 0.0
    assert cohens_d_paired([2, 3], [1, 2]) == math.inf


def test_degenerate_pairs_give_nan_tests():
    out = paired_tests([0.5, 0.6], [0.5, 0.6])
    assert math.isnan(out["t_p"]) and math.isnan(out["wilcoxon_p"])
    with pytest.raises(ValueError, match="equal lengths"):
        paired_tests([1, 2], [1])


def test_mean_sd_and_sd_units():
    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert mean_sd([4.0]) == (4.0, 0.0)
    assert sd_units(0.80, 0.01, 0.78, None) == pytest.approx(2.0)
    assert sd_units(0.80, 0.03, 0.78, 0.04) == pytest.approx(0.02 / math.sqrt(0.00125))
    assert format_p(1e-5) == "<0.001" and format_p(0.0423) == "0.042"
