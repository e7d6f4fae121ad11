"""The study's stated targets, checked from the summary tables, and the multiclass rows.

Three targets, each per cell of the main stage (means over seeds, test split):

* **boosting vs the paper**: DP boosting's AUC ≥ the paper's Table 6 mean in
  every BRFSS and Diabetes 130-US cell;
* **trees vs DP-SGD**: the best tree learner (:data:`TREE_LEARNERS` that ran)
  ≥ DP-SGD logistic at every ε on BRFSS, and at ε ≤ 1 on 130-US;
* **calibration**: every learner's Brier score ≤ that of the constant
  predictor of the training rows' base rate
  (:func:`fedpriv.evaluation.metrics.base_rate_brier`), in every cell, the
  multiclass stage's included.

Every check is a row (met or not, with its margin), so the report names each
shortfall instead of summarising it away.
"""

from __future__ import annotations

import pandas as pd

TREE_LEARNERS = ("boosting", "dp_gam", "lumberjack", "random_forest", "bdpe")
PAPER_DATASETS = ("brfss", "diabetes130")


def _row(check: str, r: pd.Series, ours: float, ref: float, against: str) -> dict:
    return {
        "check": check,
        "dataset": r["dataset"],
        "epsilon": float(r["epsilon"]),
        "learner": r["learner"],
        "ours": float(ours),
        "reference": float(ref),
        "against": against,
        "margin": float(ours - ref),
    }


def checks(summary: pd.DataFrame, multiclass: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (target, cell): ours, the reference, the margin and whether it is met.

    ``multiclass`` (the multiclass stage's summary) adds its cells to the Brier check.
    """
    rows = []
    boost = summary[(summary["learner"] == "boosting") & summary["dataset"].isin(PAPER_DATASETS)]
    for _, r in boost.dropna(subset=["paper_auc"]).iterrows():
        rows.append(_row("boosting ≥ paper", r, r["auc_mean"], r["paper_auc"], "paper mean AUC"))
    for (d, e), g in summary.groupby(["dataset", "epsilon"], sort=False):
        wanted = d == "brfss" or (d == "diabetes130" and e <= 1.0)
        trees = g[g["learner"].isin(TREE_LEARNERS)]
        logistic = g[g["learner"] == "logistic"]
        if wanted and not trees.empty and not logistic.empty:
            best = trees.loc[trees["auc_mean"].idxmax()]
            rows.append(
                _row(
                    "best tree ≥ DP-SGD logistic",
                    best,
                    best["auc_mean"],
                    logistic["auc_mean"].iloc[0],
                    "logistic mean AUC",
                )
            )
    cells = summary if multiclass is None else pd.concat([summary, multiclass])
    for _, r in cells.iterrows():
        # Lower is better: the margin is base − ours, so ≥ 0 means met.
        row = _row("Brier ≤ base rate", r, r["brier_base_mean"], r["brier_mean"], "")
        row.update(ours=float(r["brier_mean"]), reference=float(r["brier_base_mean"]))
        row["against"] = "base-rate Brier"
        rows.append(row)
    out = pd.DataFrame(rows)
    if not out.empty:
        out["met"] = out["margin"] >= 0.0
    return out


def _fmt(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def section(tables: dict[str, pd.DataFrame], table) -> list[str]:
    """The report's "Targets" and "Multiclass" sections (``table``: the report's formatter)."""
    parts: list[str] = []
    c = tables.get("targets")
    if c is not None and not c.empty:
        parts += ["## Targets: what is met and where each result still falls short\n"]
        for name, g in c.groupby("check", sort=False):
            missed = g[~g["met"]]
            digits = 4 if name.startswith("Brier") else 3
            parts.append(
                f"**{name}**: met in {int(g['met'].sum())} of {len(g)} cells"
                + ("." if missed.empty else "; falls short in:")
                + "\n"
            )
            rows = [
                [
                    r["dataset"],
                    f"{r['epsilon']:g}",
                    r["learner"],
                    _fmt(r["ours"], digits),
                    _fmt(r["reference"], digits),
                    f"{r['margin']:+.{digits}f}",
                ]
                for _, r in missed.iterrows()
            ]
            if rows:
                parts.append(
                    table(["dataset", "ε", "learner", "ours", g["against"].iloc[0], "margin"], rows)
                )
    m = tables.get("multiclass")
    if m is not None and not m.empty:
        rows = [
            [
                r["dataset"],
                f"{r['epsilon']:g}",
                r["learner"],
                r["config"],
                f"{r['auc_mean']:.3f} ± {r['auc_sd']:.3f}",
                f"{r['accuracy_mean']:.3f}",
                f"{r['brier_mean']:.4f}",
                f"{r['brier_base_mean']:.4f}",
                f"{r['epsilon_spent_max']:.3f}",
            ]
            for _, r in m.iterrows()
        ]
        parts += [
            "## Multiclass: BRFSS no diabetes / prediabetes / diabetes\n",
            "Each tuned learner at its BRFSS (binary) selection for the same ε, forests at "
            "their fixed setting; macro one-vs-rest AUC, accuracy, and Brier's multiclass "
            "score (Σ over classes) against the constant base-rate predictor's.\n",
            table(
                [
                    "dataset",
                    "ε",
                    "learner",
                    "configuration",
                    "macro AUC",
                    "accuracy",
                    "Brier",
                    "base-rate Brier",
                    "ε spent (max)",
                ],
                rows,
            ),
        ]
    return parts
