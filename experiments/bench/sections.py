"""Report tables beside the paper's: the budget each learner spent, fit times, provenance.

* :func:`budget` — spent ε / ε per learner over every main-stage fit (a learner must
  spend the budget it was given; calibration never overshoots);
* :func:`fit_time` — seconds per fit per dataset and learner, measured in this run
  (DP-EBM's pooled fit beside fedpriv's federated ``dp_gam``);
* :func:`section` — their report section, with the stages' provenance (which stage
  came from which run, ``--reuse``).
"""

from __future__ import annotations

import pandas as pd
from fedpriv.experiments.bench.analysis import wide

#: Where each learner's recorded spend comes from.
SPEND_SOURCE = {
    "dp_ebm": "interpret's GDP calibration (ε given whole)",
    "bdpe": "pure ε-DP releases (δ = 0)",
}


def budget(df: pd.DataFrame) -> pd.DataFrame:
    """Per stage and learner: spent ε / ε over the stage's test fits (min, mean, max)."""
    rows = []
    for stage in ("main", "multiclass", "ablations", "sweep"):
        if not (df["stage"] == stage).any():
            continue
        w = wide(df, stage)
        ratio = w["epsilon_spent"] / w["epsilon"]
        for m, r in ratio.groupby(w["learner"], sort=False):
            rows.append(
                {
                    "stage": stage,
                    "learner": m,
                    "fits": int(r.size),
                    "spent_ratio_min": float(r.min()),
                    "spent_ratio_mean": float(r.mean()),
                    "spent_ratio_max": float(r.max()),
                    "source": SPEND_SOURCE.get(m, "the run's privacy ledger (PLD)"),
                }
            )
    return pd.DataFrame(rows)


def fit_time(df: pd.DataFrame) -> pd.DataFrame:
    """Seconds per fit, per dataset and learner: the test fits and the tuning fits."""
    rows = []
    for stage, col in (("main", "test_fit"), ("tune", "tune_fit")):
        if not (df["stage"] == stage).any():
            continue
        w = wide(df, stage)
        for (d, m), g in w.groupby(["dataset", "learner"], sort=False):
            rows.append(
                {
                    "dataset": d,
                    "learner": m,
                    "kind": col,
                    "fits": len(g),
                    "mean_s": float(g["seconds"].mean()),
                    "median_s": float(g["seconds"].median()),
                    "total_s": float(g["seconds"].sum()),
                }
            )
    return pd.DataFrame(rows)


def section(tables: dict[str, pd.DataFrame], table) -> list[str]:
    """Budget, fit-time and provenance sections (``table``: the report's formatter)."""
    parts: list[str] = []
    b = tables.get("budget")
    if b is not None and not b.empty:
        rows = [
            [
                r["stage"],
                r["learner"],
                str(r["fits"]),
                f"{r['spent_ratio_min']:.4f}",
                f"{r['spent_ratio_mean']:.4f}",
                f"{r['spent_ratio_max']:.4f}",
                r["source"],
            ]
            for _, r in b.iterrows()
        ]
        parts += [
            "## Budget spent: ε spent / ε per learner\n",
            "Over every test fit of each stage (all datasets and ε): a learner spends the "
            "budget it was given, never more (target for the tuned learners: min ≥ 0.99). "
            "The forests run at fixed settings and are listed as measured. Stages taken from "
            "an earlier run (see Provenance) keep that run's calibration.\n",
            table(["stage", "learner", "fits", "min", "mean", "max", "spend from"], rows),
        ]
    f = tables.get("fit_time")
    if f is not None and not f.empty:
        rows = [
            [
                r["dataset"],
                r["learner"],
                r["kind"].replace("_", " "),
                str(r["fits"]),
                f"{r['mean_s']:.2f}",
                f"{r['median_s']:.2f}",
                f"{r['total_s']:.0f}",
            ]
            for _, r in f.sort_values(["kind", "dataset", "learner"]).iterrows()
        ]
        parts += [
            "## Fit time per learner (this run)\n",
            "Wall seconds of one fit in a pool worker (2 processes on 2 CPUs shared with other "
            "jobs, so indicative only). dp_ebm is interpret's pooled, single-threaded fit on "
            "every training row; dp_gam the federated in-process fit over the frozen clients.\n",
            table(["dataset", "learner", "kind", "fits", "mean s", "median s", "total s"], rows),
        ]
    p = tables.get("provenance")
    if p is not None and not p.empty:
        parts += [
            "## Provenance: which stage came from which run\n",
            table(["stage", "rows from"], [[r["stage"], r["source"]] for _, r in p.iterrows()]),
        ]
    return parts
