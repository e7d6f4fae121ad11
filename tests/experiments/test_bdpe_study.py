"""Smoke run of ``python -m fedpriv.experiments.bdpe_study --quick``: the paper's protocol, tiny."""

import pandas as pd
from fedpriv.experiments.bdpe_report import load
from fedpriv.experiments.bdpe_study import main


def test_quick_study_writes_the_wins_table_and_stays_in_budget(tmp_path):
    report = main(["--quick", "--out", str(tmp_path)]).read_text()
    for section in (
        "## The paper's claims",
        "## % of significant wins of bdpe_α (paired t-test over folds, p < 0.01)",
        "## Test AUC (mean over folds)",
    ):
        assert section in report
    rows = load(tmp_path / "results.jsonl")
    # heart, 3 folds, one ε: two bdpe_α settings and both forests on every fold.
    assert len(rows) == 3 * 4 and set(rows.fold) == {0, 1, 2}
    assert set(rows.learner) >= {"RF-L", "RF-E"}
    assert (rows.epsilon_spent <= rows.epsilon + 1e-9).all()
    # Fresh OS-entropy keys (as the study runs): only the mean is asserted (≈ 0.78 seen).
    assert rows.auc.between(0.0, 1.0).all() and rows.auc.mean() > 0.6
    cmp = pd.read_csv(tmp_path / "comparisons.csv")
    # 2 settings × 2 forests, on test error and on AUC
    assert len(cmp) == 2 * 2 * 2 and cmp.p.between(0, 1).all()
    assert set(cmp.metric) == {"error", "auc"}
