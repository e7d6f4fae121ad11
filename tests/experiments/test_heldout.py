"""fedpriv.experiments.heldout: the per-cell figures and checks against independent references."""

import math

import numpy as np
import pytest
from fedpriv.experiments import heldout
from sklearn.metrics import brier_score_loss, roc_auc_score


def test_scores_match_scikit_learn_for_two_classes():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    p = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 400), 0, 1)
    P = np.column_stack([1 - p, p])
    rates = np.array([0.6, 0.4])
    auc, brier, base, sd = heldout._scores(P, y, rates)
    assert auc == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert brier == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert base == pytest.approx(brier_score_loss(y, np.full(400, 0.4)), abs=1e-12)
    assert sd == pytest.approx(p.std(), abs=1e-12)


def _cell(**kw):
    base = dict(table="t", method="m", epsilon=2.0, seed=0, auc=0.7, brier=0.2, base_brier=0.25,
                sd=0.1, reference_sd=0.2, spent=1.995, pld=1.995, rdp=2.2, status="completed",
                seconds=1.0)  # fmt: skip
    return heldout.Cell(**{**base, **kw})


@pytest.mark.parametrize(
    "change, failing",
    [
        ({}, []),
        ({"sd": 0.005}, ["spread"]),
        ({"sd": 0.005, "reference_sd": 0.005}, []),  # no spread to keep: not required
        ({"brier": 0.2501, "base_brier": 0.25}, ["brier"]),
        ({"spent": 0.98 * 2.0}, ["spent"]),
    ],
)
def test_a_cell_fails_exactly_the_checks_it_breaks(change, failing):
    cell = _cell(**change)
    assert [k for k, ok in cell.checks.items() if not ok] == failing
    row = heldout.render([cell], {}).splitlines()[-3]
    assert row.endswith(f"| {', '.join(failing) or '–'} |")


def test_one_real_cell_spends_its_budget_and_beats_the_base_rate():
    data, k, max_records = heldout._load("heart", None, 0)
    cell = heldout.fit_cell("heart", data, k, max_records, "dp_gam", 2.0, 0, 0.2)
    assert 0.99 * 2.0 <= cell.spent <= 2.0
    assert cell.brier < cell.base_brier and cell.sd > heldout.MIN_SD
    assert not math.isnan(cell.auc) and cell.auc > 0.6
