"""The study's stated targets, each checked per learner with its own significance test.

Three targets, each per cell of the main stage (test split), every learner on its own
(no target takes a best over learners):

* **boosting ≥ paper**: DP boosting's AUC ≥ the paper's Table 6 mean in every
  BRFSS and Diabetes 130-US cell (one-sample Wilcoxon signed-rank test of the
  per-seed AUCs against the published mean);
* **L ≥ DP-SGD logistic**, for each tree learner L (:data:`TREE_LEARNERS` that ran):
  L's AUC ≥ DP-SGD logistic regression's at every ε on BRFSS, and at ε ≤ 1 on
  130-US (Wilcoxon signed-rank, paired by seed, for the tuned learners; Welch's
  t-test for the forests, whose fixed setting has fewer seeds);
* **Brier ≤ base rate**: every learner's Brier score ≤ that of the constant
  predictor of the training rows' base rate
  (:func:`fedpriv.evaluation.metrics.base_rate_brier`), in every cell, the
  multiclass stage's included (Wilcoxon signed-rank, paired by seed).

A target is met when the mean margin is ≥ 0 and fails otherwise; its p-value
(two-sided, :func:`fedpriv.experiments.bench.stats.target_test`) says whether
the difference is significant at 0.05. Every check is a row, so the report names
each shortfall with its p-value instead of summarising it away.
"""

from __future__ import annotations

import pandas as pd
from fedpriv.experiments.bench.analysis import wide
from fedpriv.experiments.bench.stats import format_p, target_test

#: Tree learners, each checked against DP-SGD logistic regression on its own.
TREE_LEARNERS = ("boosting", "dp_gam", "dp_ebm", "lumberjack", "random_forest", "bdpe")
PAPER_DATASETS = ("brfss", "diabetes130")
ALPHA = 0.05


def _by_seed(g: pd.DataFrame, metric: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(g["seed"], g[metric], strict=True)}


def _row(check, d, e, learner, ours, ref, against, reference, *, lower_better=False) -> dict:
    """One target cell: means, margin (≥ 0: met) and the test of ours against ``reference``."""
    test, n, p = target_test(ours, reference)
    mean = sum(ours.values()) / len(ours)
    return {
        "check": check,
        "dataset": d,
        "epsilon": float(e),
        "learner": learner,
        "ours": mean,
        "reference": float(ref),
        "against": against,
        "margin": float(ref - mean) if lower_better else float(mean - ref),
        "test": test,
        "n": n,
        "p_value": p,
    }


def checks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, learner, cell) from the long results ``df`` (main and
    multiclass stages): ours, the reference, the margin, the test, its p-value and the
    verdict (``met``; ``significant`` when p < :data:`ALPHA`)."""
    rows = []
    main = wide(df, "main") if (df["stage"] == "main").any() else None
    if main is not None:
        rows += _paper_rows(main) + _tree_rows(main)
    for stage in ("main", "multiclass"):
        if not (df["stage"] == stage).any():
            continue
        for (d, e, m), g in wide(df, stage).groupby(["dataset", "epsilon", "learner"]):
            rows.append(
                _row(
                    "Brier ≤ base rate", d, e, m, _by_seed(g, "brier"),
                    g["brier_base"].mean(), "base-rate Brier", _by_seed(g, "brier_base"),
                    lower_better=True,
                )
            )  # fmt: skip
    out = pd.DataFrame(rows)
    if not out.empty:
        out["met"] = out["margin"] >= 0.0
        out["significant"] = out["p_value"] < ALPHA
    return out


def _paper_rows(main: pd.DataFrame) -> list[dict]:
    from fedpriv.experiments.bench import paper

    rows = []
    boost = main[(main["learner"] == "boosting") & main["dataset"].isin(PAPER_DATASETS)]
    for (d, e), g in boost.groupby(["dataset", "epsilon"]):
        ref = paper.table6(d, "boosting", e)
        if ref:
            ours = _by_seed(g, "auc")
            rows.append(_row("boosting ≥ paper", d, e, "boosting", ours, ref[0], "paper", ref[0]))
    return rows


def _tree_rows(main: pd.DataFrame) -> list[dict]:
    rows = []
    for (d, e), g in main.groupby(["dataset", "epsilon"]):
        if not (d == "brfss" or (d == "diabetes130" and e <= 1.0)):
            continue
        logistic = g[g["learner"] == "logistic"]
        if logistic.empty:
            continue
        ref = _by_seed(logistic, "auc")
        for learner in TREE_LEARNERS:
            mine = g[g["learner"] == learner]
            if not mine.empty:
                rows.append(
                    _row(
                        f"{learner} ≥ DP-SGD logistic", d, e, learner, _by_seed(mine, "auc"),
                        logistic["auc"].mean(), "DP-SGD logistic AUC", ref,
                    )
                )  # fmt: skip
    return rows


def verdict(r: pd.Series) -> str:
    """``met``/``fails``, and whether the difference is significant at :data:`ALPHA`."""
    sig = "significant" if r["significant"] else "not significant"
    return f"{'met' if r['met'] else 'FAILS'} ({sig}, {r['test']} p = {format_p(r['p_value'])})"


def failures(c: pd.DataFrame) -> list[str]:
    """One plain sentence per failing target cell, with its p-value."""
    lines = []
    for _, r in c[~c["met"]].iterrows():
        digits = 4 if r["check"].startswith("Brier") else 3
        lines.append(
            f"- **{r['check']}** fails on {r['dataset']} at ε = {r['epsilon']:g} "
            f"({r['learner']}: {r['ours']:.{digits}f} vs {r['against']} "
            f"{r['reference']:.{digits}f}, margin {r['margin']:+.{digits}f}; {r['test']} "
            f"p = {format_p(r['p_value'])}, n = {int(r['n'])})."
        )
    return lines


def section(tables: dict[str, pd.DataFrame], table) -> list[str]:
    """The report's "Targets" and "Multiclass" sections (``table``: the report's formatter)."""
    parts: list[str] = []
    c = tables.get("targets")
    if c is not None and not c.empty:
        parts += [
            "## Targets: each learner tested on its own\n",
            "Met: mean margin ≥ 0. p: two-sided; Wilcoxon signed-rank paired by seed "
            "(one-sample against the paper's published mean), Welch's t-test where the seeds "
            f"are not paired (a forest's fixed setting). Significant: p < {ALPHA:g}. With n "
            "paired seeds the smallest two-sided signed-rank p is 2 / 2^n ("
            + "; ".join(f"n = {k}: {2.0 / 2**k:.3g}" for k in sorted(c["n"].unique()))
            + ").\n",
        ]
        for name, g in c.groupby("check", sort=False):
            missed = g[~g["met"]]
            parts.append(
                f"**{name}**: met in {int(g['met'].sum())} of {len(g)} cells "
                f"({int((g['met'] & g['significant']).sum())} significantly)"
                + ("." if missed.empty else "; fails in:")
                + "\n"
            )
            digits = 4 if name.startswith("Brier") else 3
            rows = [
                [
                    r["dataset"],
                    f"{r['epsilon']:g}",
                    r["learner"],
                    f"{r['ours']:.{digits}f}",
                    f"{r['reference']:.{digits}f}",
                    f"{r['margin']:+.{digits}f}",
                    r["test"],
                    format_p(r["p_value"]),
                ]
                for _, r in missed.iterrows()
            ]
            head = ["dataset", "ε", "learner", "ours", g["against"].iloc[0], "margin", "test", "p"]
            if rows:
                parts.append(table(head, rows))
        lines = failures(c)
        parts += [
            "**Every failing target, plainly:**\n",
            "\n".join(lines) + "\n" if lines else "- none.\n",
        ]
    parts += _multiclass(tables, table)
    return parts


def _multiclass(tables, table) -> list[str]:
    m = tables.get("multiclass")
    if m is None or m.empty:
        return []
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
    return [
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
