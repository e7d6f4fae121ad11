"""The CI smoke run of the ablations: ``python -m fedpriv.experiments.ablate all --quick`` into tmp.

It runs with ``--processes 1`` (every cell in the command's own process): a
pool of spawned workers would cost two more interpreter start-ups and imports
on a machine whose two cores the test suite's workers already use.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ("participation", "remark1", "clients", "shift")


def check_outputs(out: Path) -> None:
    """What every quick (or full) ablation run must have written into ``out``."""
    report = (out / "report.md").read_text()
    for section in (
        "## Participation × label skew",
        "## Full-participation invariance",
        "## Client count and size imbalance",
        "## Covariate shift",
        "not a valid guarantee",
        "test_partition_invariance.py",
        "Why pooled AUC inflates",
        "## Timing",
    ):
        assert section in report
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == sorted(f"fig_{s}.png" for s in STUDIES)
    assert all(0 < p.stat().st_size < 300_000 for p in pngs)

    rows = pd.read_csv(out / "results.csv.gz")
    assert set(rows["study"]) == set(STUDIES)
    assert {"learner", "participation", "alpha", "accounting", "seed", "metric"} <= set(rows)
    auc = rows[rows["metric"].isin(["auc", "auc_macro_within"])]["value"]
    assert len(auc) > 0 and auc.between(0.4, 1.0, inclusive="neither").all()
    spent = rows[rows["metric"] == "epsilon_spent"]
    assert (spent["value"] <= spent["epsilon"] + 1e-9).all()
    certified = rows[rows["metric"] == "certified"]
    paper_partial = (certified["accounting"] == "paper") & (certified["participation"] < 1)
    assert (certified.loc[paper_partial, "value"] == 0).all()
    assert (certified.loc[~paper_partial, "value"] == 1).all()

    part = pd.read_csv(out / "participation.csv")
    assert part["auc_mean"].between(0.4, 1.0, inclusive="neither").all()
    for (_, _, rho), g in part.groupby(["learner", "alpha", "participation"]):
        z = g.set_index("accounting")["z"]
        assert z["paper"] <= z["tight"] <= z["valid"]
        if rho < 1:
            assert z["paper"] < z["tight"] < z["valid"]
            eps = g.set_index("accounting")["tight_epsilon"]
            assert eps["paper"] > 2.0 >= eps["tight"] - 1e-6  # the paper's z overspends
        else:
            assert np.isclose(z["paper"], z["valid"])

    r1 = pd.read_csv(out / "remark1.csv")
    assert set(r1["learner"]) == {"boosting", "logistic", "mlp"}
    assert r1["mean_diff"].abs().lt(0.2).all()
    shift = pd.read_csv(out / "shift.csv")
    assert shift["auc_macro_within_mean"].between(0.4, 1.0, inclusive="neither").all()
    data = pd.read_csv(out / "shift_data.csv")
    assert data["client_accuracy"].iloc[-1] > data["client_accuracy"].iloc[0]
    assert (pd.read_csv(out / "clients.csv")["n"] >= 2).all()


def test_quick_ablations_write_a_sane_report(tmp_path):
    out = tmp_path / "ablations-quick"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedpriv.experiments.ablate",
            "all",
            "--quick",
            "--processes",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_outputs(out)
    for study in STUDIES:
        assert json.loads((out / f"timing_{study}.json").read_text())["processes"] == 1
