"""The CI smoke run: ``python -m fedpriv.experiments.benchmark --quick`` into a temporary directory.

It runs with ``--processes 1`` (every cell in the command's own process): a
pool of spawned workers would cost two more interpreter start-ups and imports
on a machine whose two cores the test suite's workers already use.
"""

import subprocess
import sys
from pathlib import Path

import pandas as pd
from fedpriv.experiments.bench import dp_ebm

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_a_sane_report(tmp_path):
    out = tmp_path / "quick"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedpriv.experiments.benchmark",
            "--config",
            "experiments/configs/matched.toml",
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
    report = (out / "report.md").read_text()
    for section in (
        "## Findings",
        "Table 6/7",
        "Table 8",
        "Figure 3",
        "Appendix A.4",
        "membership inference",
        "Tables 11/12",
        "not** include",
        "## Targets",
        "## Multiclass",
        "## Budget spent",
        "## Fit time per learner",
        "## Provenance",
    ):
        assert section in report
    assert "| processes | 1 |" in report
    for png in out.glob("*.png"):
        assert 0 < png.stat().st_size < 300_000
    assert len(list(out.glob("*.png"))) == 4

    rows = pd.read_csv(out / "results.csv.gz")
    assert set(rows.columns) >= {
        "stage",
        "dataset",
        "learner",
        "epsilon",
        "seed",
        "metric",
        "value",
    }
    fits = rows[rows["stage"].isin(["main", "ablations", "sweep", "tune"])]
    auc = fits[fits["metric"] == "auc"]["value"]
    assert len(auc) > 0 and auc.between(0.4, 1.0, inclusive="neither").all()
    spent = fits[fits["metric"] == "epsilon_spent"]
    assert (spent["value"] <= spent["epsilon"] + 1e-9).all()

    summary = pd.read_csv(out / "summary.csv")
    assert summary["auc_mean"].between(0.4, 1.0).all()
    assert summary.groupby(["dataset", "epsilon"])["best"].sum().eq(1).all()
    mia = pd.read_csv(out / "mia.csv")
    off = mia[mia["model"] == "offpath"]
    assert (off["attack_auc_mean"] > 0.55).all()  # the unprotected predictor leaks
    assert (mia[mia["model"] != "offpath"]["attack_auc_mean"] < 0.6).all()
    comm = pd.read_csv(out / "communication.csv")
    assert (comm["floats_per_client"] > 0).all()
    tfit = pd.read_csv(out / "tstar_fit.csv")
    assert tfit["tau"].iloc[0] > 0

    targets = pd.read_csv(out / "targets.csv")
    assert {"test", "p_value", "met", "significant"} <= set(targets.columns)
    assert not targets["check"].str.contains("best").any()  # each learner on its own
    budget = pd.read_csv(out / "budget.csv")
    tuned = budget[(budget["stage"] == "main") & budget["learner"].isin(["logistic", "mlp"])]
    assert len(tuned) == 2 and (tuned["spent_ratio_min"] >= 0.99).all()
    assert (budget["spent_ratio_max"] <= 1.0 + 1e-9).all()  # never overshoots
    if dp_ebm.available():
        assert "dp_ebm" in set(summary["learner"])
        assert "dp_ebm" in set(pd.read_csv(out / "fit_time.csv")["learner"])
