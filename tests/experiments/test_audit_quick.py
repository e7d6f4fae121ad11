"""Smoke run of ``python -m fedpriv.experiments.audit_learners --quick`` on its cheapest learner."""

import pandas as pd
from fedpriv.experiments.audit_learners import main


def test_quick_audit_writes_the_report_and_its_tables(tmp_path):
    path = main(["--quick", "--learners", "forest-all", "--out", str(tmp_path)])
    report = path.read_text()
    for section in (
        "## ε̂ per learner",
        "ε̂ §1 attacker, debug mode",
        "## Are the CI refutations reliable?",
        "## Cost of the secure sampler",
        "as expected",
    ):
        assert section in report
    rows = pd.read_csv(tmp_path / "audit.csv")
    columns = ["honest", "twin", "section1_secret", "section1_debug", "debug_plain"]
    assert list(rows["column"]) == columns
    eps = rows.set_index("column")["epsilon_hat"]
    assert eps["honest"] <= 2.0 < eps["twin"]  # exact counts: perfect separation, ε̂ ≈ 3.3
    assert (rows["n_trials"] == 200).all()
    cost = pd.read_csv(tmp_path / "sampler_cost.csv")
    assert list(cost["coordinates"]) == [64, 4800, 100_000]
    assert (cost["secure / old"] > 0).all()
