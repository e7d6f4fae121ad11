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


_RATIO, _SECS = "{:.4f}".format, "{:.2f}".format
#: Each section: (table name, title, note, header, (column, format) per cell, sort order).
_SECTIONS = (
    ("budget", "Budget spent: ε spent / ε per learner",
     "Over every test fit of each stage (all datasets and ε): a learner spends the "
     "budget it was given, never more (target for the tuned learners: min ≥ 0.99). "
     "The forests run at fixed settings and are listed as measured. Stages taken from "
     "an earlier run (see Provenance) keep that run's calibration.",
     ["stage", "learner", "fits", "min", "mean", "max", "spend from"],
     [("stage", str), ("learner", str), ("fits", str), ("spent_ratio_min", _RATIO),
      ("spent_ratio_mean", _RATIO), ("spent_ratio_max", _RATIO), ("source", str)], None),
    ("fit_time", "Fit time per learner (main stage)",
     "Wall seconds of one fit in a pool worker (2 processes on 2 CPUs shared with other "
     "jobs, so indicative only), every learner's fits from the one run that computed the "
     "main stage (see Provenance). dp_ebm is interpret's pooled, single-threaded fit on "
     "every training row; dp_gam the federated in-process fit over the frozen clients.",
     ["dataset", "learner", "kind", "fits", "mean s", "median s", "total s"],
     [("dataset", str), ("learner", str), ("kind", lambda k: k.replace("_", " ")),
      ("fits", str), ("mean_s", _SECS), ("median_s", _SECS), ("total_s", "{:.0f}".format)],
     ["kind", "dataset", "learner"]),
)  # fmt: skip


def section(tables: dict[str, pd.DataFrame], table) -> list[str]:
    """Budget, fit-time and provenance sections (``table``: the report's formatter)."""
    parts: list[str] = []
    for name, title, note, header, spec, order in _SECTIONS:
        frame = tables.get(name)
        if frame is None or frame.empty:
            continue
        frame = frame if order is None else frame.sort_values(order)
        rows = [[fmt(r[c]) for c, fmt in spec] for _, r in frame.iterrows()]
        parts += [f"## {title}\n", note + "\n", table(header, rows)]
    p = tables.get("provenance")
    if p is not None and not p.empty:
        parts += [
            "## Provenance: which stage came from which run\n",
            table(["stage", "rows from"], [[r["stage"], r["source"]] for _, r in p.iterrows()]),
        ]
    return parts
