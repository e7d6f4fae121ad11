"""The covariate-shift section of the ablation report (benchmark paper §5.6, Figure 5b)."""

from __future__ import annotations

import math

import pandas as pd
from fedpriv.experiments.ablation.report import _tests_table, settings
from fedpriv.experiments.bench import paper
from fedpriv.experiments.bench.report import _num, _pm, _table


def section(cfg, table: pd.DataFrame, tests: pd.DataFrame, diag: pd.DataFrame, fig: str) -> str:
    rows = [
        [
            r["learner"],
            f"{r['covariate_shift']:g}",
            _pm(r["auc_mean"], r["auc_sd"]),
            _pm(r["auc_macro_within_mean"], r["auc_macro_within_sd"]),
            _num(r["auc_mean"] - r["auc_macro_within_mean"]),
            _num(r["auc_within_pairs_mean"]),
            _num(r["auc_cross_pairs_mean"]),
            _num(r["within_pair_fraction_mean"], 3),
            _num(r["paper_pooled"]),
            _num(r["paper_macro"]),
        ]
        for _, r in table.iterrows()
    ]
    drows = [
        [
            f"{r['covariate_shift']:g}",
            f"{r['client_accuracy']:.3f} (chance {r['chance']:.2f})",
            f"{r['base_rate_min']:.3f}–{r['base_rate_max']:.3f} (SD {r['base_rate_sd']:.3f})",
            _num(r["membership_auc"]),
            f"{_num(r['weak_auc'])} / {_num(r['weak_auc_macro_within'])}",
            f"{_num(r['weak_auc_within_pairs'])} / {_num(r['weak_auc_cross_pairs'])}",
            f"{_num(r['oracle_auc'])} / {_num(r['oracle_auc_macro_within'])}",
        ]
        for _, r in diag.iterrows()
    ]
    return "\n".join(
        [
            "## Covariate shift (paper §5.6, Figure 5b)\n",
            settings(cfg),
            f"Each of the generator's K = {cfg.axes.n_clients[0]} clients draws its latent "
            "features from N(γ·v_k, I) along its own unit direction v_k, under one shared "
            "concept P(y | x); each client's test rows come from its own shifted distribution. "
            "Pooled AUC scores all test rows together; within-client macro AUC is the mean of "
            "the per-client test AUCs. Pooled AUC = w·(within-client pairs) + (1 − w)·"
            "(cross-client pairs) exactly, w = share of (positive, negative) pairs that share a "
            f"client. ρ = {cfg.axes.participation[0]:g}.\n",
            _table(
                [
                    "learner",
                    "γ",
                    "pooled AUC",
                    "within-client macro AUC",
                    "pooled − macro",
                    "within pairs",
                    "cross pairs",
                    "w",
                    "paper pooled",
                    "paper macro",
                ],
                rows,
            ),
            f"\n![shift]({fig})\n",
            "### Paired tests, largest γ vs γ = 0\n",
            _tests_table(tests, ["learner", "metric"], ["learner", "metric"]),
            "### Why pooled AUC inflates under shift, checked on our data\n",
            "The argument: under shift (i) client membership becomes predictable from x and "
            "(ii) the clients' base rates differ (the concept is shared, so only because P(x) "
            "differs). Then (iii) in a cross-client (positive, negative) pair the positive "
            "tends to sit in a higher-base-rate client, whose region of x a model also scores "
            "higher, so between-client separation ranks those pairs correctly without any "
            "within-client discrimination; pooled AUC, a mean over all pairs, mostly cross-"
            "client ones (1 − w ≈ 1 − 1/K), absorbs that ranking power. A deployed model at one "
            "hospital only ever ranks that hospital's patients, so the within-client figure is "
            "the informative one. Measured on the generated data (no private learner; "
            "`experiments/ablation/shift.py`):\n",
            _table(
                [
                    "γ",
                    "(i) client predicted from x: accuracy",
                    "(ii) client base rates (train + val)",
                    "(iii) membership-only pooled AUC",
                    "weak scorer: pooled / macro",
                    "weak: within / cross pairs",
                    "Bayes p*(x): pooled / macro",
                ],
                drows,
            ),
            "Weak scorer: a non-private logistic regression of y on x (AUC ≈ the private "
            "learners'); Bayes p*(x) = P(y | x), the control. Rows beyond the study's largest γ "
            "are data-only (`diagnostic_shifts`).\n",
            shift_findings(table, diag),
        ]
    )


def _holds(ok: bool) -> str:
    return "holds" if ok else "does **not** hold"


def shift_findings(table: pd.DataFrame, diag: pd.DataFrame) -> str:
    g_max = table["covariate_shift"].max()
    d0 = diag.iloc[0]
    d1 = diag[diag["covariate_shift"] == g_max].iloc[0]
    dl = diag.iloc[-1]
    gap = lambda r, n: r[f"{n}_auc"] - r[f"{n}_auc_macro_within"]  # noqa: E731
    corr = float(diag["membership_auc"].corr(gap(diag, "weak"))) if len(diag) > 2 else math.nan
    lines = [
        "**Findings** (computed):",
        "",
        f"- (i) {_holds(d1['client_accuracy'] > 1.5 * d1['chance'])}: client accuracy "
        f"{d0['client_accuracy']:.3f} → {d1['client_accuracy']:.3f} (chance "
        f"{d0['chance']:.2f}) as γ goes {d0['covariate_shift']:g} → {g_max:g}.",
        f"- (ii) {_holds(d1['base_rate_sd'] > 2 * d0['base_rate_sd'])}: base-rate SD "
        f"{d0['base_rate_sd']:.3f} → {d1['base_rate_sd']:.3f}; (iii) membership alone ranks "
        f"pooled pairs with AUC {d0['membership_auc']:.3f} → {d1['membership_auc']:.3f}.",
        f"- Weak scorer: pooled − macro {gap(d0, 'weak'):+.3f} → {gap(d1, 'weak'):+.3f} at "
        f"γ = {g_max:g}, {gap(dl, 'weak'):+.3f} at γ = {dl['covariate_shift']:g} (membership AUC "
        f"{dl['membership_auc']:.3f}); correlation of the gap with membership AUC over γ: "
        f"{corr:.2f}. Bayes control: {gap(d0, 'oracle'):+.3f} → {gap(dl, 'oracle'):+.3f}.",
    ]
    worst = 0.0
    for m, g in table.groupby("learner", sort=True):
        a, b = g.iloc[0], g.iloc[-1]
        worst = max(worst, b["auc_mean"] - b["auc_macro_within_mean"])
        lines.append(
            f"- {m}: pooled {a['auc_mean']:.3f} → {b['auc_mean']:.3f}, macro within "
            f"{a['auc_macro_within_mean']:.3f} → {b['auc_macro_within_mean']:.3f}; cross − within "
            f"pairs {a['auc_cross_pairs_mean'] - a['auc_within_pairs_mean']:+.3f} → "
            f"{b['auc_cross_pairs_mean'] - b['auc_within_pairs_mean']:+.3f}"
            + (
                " (paper boosting: pooled .692 → .836, macro .691 → .707)."
                if m == "boosting"
                else "."
            )
        )
    paper_gap = paper.SHIFT_BOOSTING_POOLED[1.2] - paper.SHIFT_BOOSTING_MACRO[-1]
    verdict = "is" if worst >= paper_gap / 2 else "is **not**"
    lines.append(
        f"- The paper's inflation (pooled − macro = {paper_gap:.3f} for boosting at γ = 1.2) "
        f"{verdict} reproduced at γ ≤ {g_max:g}: our largest learner gap is {worst:+.3f}. "
        + (
            "The weak scorer's gap is positive and tracks between-client separation (membership "
            "AUC), as the explanation predicts; its size depends on how far the shift moves the "
            "clients' base rates, which the table above measures for our generator."
            if corr > 0.8 and gap(dl, "weak") > 0
            else "The weak scorer's gap does not track between-client separation here, so the "
            "data do not support the explanation's quantitative form."
        )
    )
    return "\n".join(lines) + "\n"
