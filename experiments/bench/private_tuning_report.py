"""The ``private_tuning`` stage's analysis: its summary table and report section.

:func:`summary` compares, per (learner, dataset, ε), the validation-mode test
AUC (selection not accounted) with the private-tuning one; :func:`report_section`
renders it for the benchmark report. Post-processing of the stage's rows,
kept apart from :mod:`fedpriv.experiments.bench.private_tuning` (the runs),
which re-exports both names.
"""

from __future__ import annotations

import math


def summary(df, tuning: str):
    """Per (learner, dataset, ε): validation-mode vs private-tuning test AUC, E[K], ε_b, ε spent.

    The validation-mode column is the main stage's ``selected`` rows when the
    main stage ran with ``tuning = "validation"`` (its selection unaccounted).
    """
    import pandas as pd
    from fedpriv.experiments.bench.stats import mean_sd

    def wide(sub):
        keys = ["dataset", "learner", "epsilon", "seed"]
        return sub.set_index([*keys, "metric"])["value"].unstack("metric").reset_index()

    private = df[(df["variant"] == "private") & (df["stage"] == "private_tuning")]
    if private.empty:
        private = df[df["variant"] == "private"]
    ref = (
        df[(df["stage"] == "main") & (df["variant"] == "selected")]
        if tuning == "validation"
        else df.iloc[:0]
    )
    ref_w = wide(ref) if not ref.empty else None
    rows = []
    for (m, d, e), g in wide(private).groupby(["learner", "dataset", "epsilon"], sort=False):
        row = {"learner": m, "dataset": d, "epsilon": e, "n": len(g)}
        row["private_auc_mean"], row["private_auc_sd"] = mean_sd(g["auc"].to_numpy())
        row["validation_auc_mean"], row["validation_auc_sd"] = math.nan, math.nan
        if ref_w is not None:
            r = ref_w[(ref_w["learner"] == m) & (ref_w["dataset"] == d) & (ref_w["epsilon"] == e)]
            if len(r):
                row["validation_auc_mean"], row["validation_auc_sd"] = mean_sd(r["auc"].to_numpy())
        row["expected_runs"] = float(g["expected_runs"].iloc[0])
        row["base_epsilon"] = float(g["base_epsilon"].iloc[0])
        row["epsilon_spent_max"] = float(g["epsilon_spent"].max())
        rows.append(row)
    return pd.DataFrame(rows)


def report_section(table, cfg) -> list[str]:
    """The report's comparison of validation-mode and private tuning (empty without rows)."""
    if table is None or table.empty:
        return []

    from fedpriv.experiments.bench.private_tuning import distribution

    def pm(mean, sd):
        return "—" if not math.isfinite(mean) else f"{mean:.3f} ± {sd:.3f}"

    rows = [
        "| "
        + " | ".join(
            [
                r["learner"],
                r["dataset"],
                f"{r['epsilon']:g}",
                pm(r["validation_auc_mean"], r["validation_auc_sd"]),
                pm(r["private_auc_mean"], r["private_auc_sd"]),
                f"{r['epsilon_spent_max']:.3f}",
                f"{r['expected_runs']:.2f}",
                f"{r['base_epsilon']:.3f}",
                str(int(r["n"])),
            ]
        )
        + " |"
        for _, r in table.iterrows()
    ]
    pt = cfg.private_tuning
    law = distribution(pt).describe()
    header = [
        "learner",
        "dataset",
        "ε",
        "validation-mode test AUC (selection NOT accounted)",
        "private-tuning test AUC",
        "ε spent (RDP, selection included)",
        "E[K]",
        "per-run ε",
        "seeds",
    ]
    return [
        "## Accounted tuning: private random search vs validation-mode grid search\n",
        f"Private tuning (Papernot & Steinke 2022, K ~ {law}): each of K runs draws a grid "
        "point, trains on the training rows at the per-run ε and releases its validation "
        f"AUC from a {pt.val_bins}-bin score histogram with Gaussian noise (multiplier "
        f"{pt.val_noise:g}); the best run's test AUC is reported. The whole selection is "
        "one TunedSelectionDpEvent in each row's ledger: the ε column is its RDP figure "
        "(no PLD rule exists for the selection), at most the row's ε. Validation-mode rows "
        "refit the selected point on train + val and do not account the selection.\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *rows,
        "",
    ]
