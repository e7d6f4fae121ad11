"""The bdpe_α study's tables (``experiments/bdpe_study.py``) and its report.

The wins table follows the paper's Table 4: for each bdpe_α strategy (α = 0.1,
α = 1, O.C.) and ensemble size T, among the runs (domain × ε × depth × β_tree)
where a paired t-test over the folds' test errors against the forest gives
p < 0.01, the share where bdpe_α has the lower error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from fedpriv.experiments.audit.report import markdown_table
from scipy import stats

SIGNIFICANCE = 0.01
#: The paper's claims the report is read against (its §7 and Table 4).
PAPER = (
    "O.C. and α = 1 at T = 20 beat RF-E and RF-L in more than 80 % of the significant "
    "comparisons (p < 0.01), fewer than 4 % of the differences not significant; bdpe_α is "
    "especially good against the forests at high privacy (ε = 0.01); O.C. gives the best "
    "private models at high privacy; α = 1 does better than α = 0.1."
)


def load(path: Path) -> pd.DataFrame:
    return pd.DataFrame([json.loads(x) for x in path.read_text().splitlines() if x.strip()])


def comparisons(df: pd.DataFrame, metric: str = "error") -> pd.DataFrame:
    """One row per (bdpe_α run, forest): mean ``metric`` (``"error"``: lower wins, as the
    paper; ``"auc"``: higher wins), the paired t-test's p over folds, the winner."""
    bd = df[df.learner.str.startswith("bdpe")]
    sign = 1.0 if metric == "error" else -1.0
    rows = []
    for forest in ("RF-L", "RF-E"):
        rf = df[df.learner == forest].set_index(["domain", "epsilon", "fold"])[metric]
        for (dom, eps, lname), g in bd.groupby(["domain", "epsilon", "learner"]):
            g = g.sort_values("fold")
            other = rf.reindex([(dom, eps, f) for f in g.fold]).to_numpy()
            paired = np.isfinite(other)  # folds both ran (an interrupted study resumes later)
            if paired.sum() < 2:
                continue
            mine, other = g[metric].to_numpy()[paired], other[paired]
            diff = mine - other
            p = 1.0 if np.all(diff == diff[0]) else stats.ttest_rel(mine, other).pvalue
            p = 1.0 if not np.isfinite(p) else float(p)
            first = g.iloc[0]
            rows.append({
                "metric": metric, "forest": forest, "domain": dom, "epsilon": eps,
                "learner": lname, "T": int(first["T"]), "d": int(first["d"]),
                "alpha": first["alpha"], "beta": float(first["beta"]), "bdpe": mine.mean(),
                "forest_value": other.mean(), "p": p, "significant": p < SIGNIFICANCE,
                "win": sign * (mine.mean() - other.mean()) < 0,
            })  # fmt: skip
    return pd.DataFrame(rows)


def wins_table(cmp: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """% wins among significant comparisons (and how many were significant), per ``by``."""

    def summary(g: pd.DataFrame) -> pd.Series:
        sig = g[g.significant]
        share = 100.0 * sig.win.mean() if len(sig) else float("nan")
        return pd.Series({
            "% wins (p < 0.01)": round(share, 1), "significant": len(sig), "runs": len(g),
            "% not significant": round(100.0 * (1 - len(sig) / len(g)), 1),
        })  # fmt: skip

    out = cmp.groupby(by).apply(summary, include_groups=False).reset_index()
    return out.astype({"significant": int, "runs": int})


def _share(cmp: pd.DataFrame) -> str:
    sig = cmp[cmp.significant]
    return f"{100 * sig.win.mean():.0f} % of {len(sig)}" if len(sig) else "none significant"


def differences(cmp: pd.DataFrame, by_auc: pd.DataFrame, T: int) -> list[str]:
    """The report's reading of the tables against the paper's claims (figures computed)."""
    top = cmp[(cmp["T"] == T) & cmp.alpha.isin(["1", "oc"])]
    low, high = top[top.epsilon <= 0.1], top[top.epsilon >= 10]
    auc_top = by_auc[(by_auc["T"] == T) & by_auc.alpha.isin(["1", "oc"])]
    not_sig = 100 * (1 - top.significant.mean())
    oc = cmp[(cmp["T"] == T) & (cmp.alpha == "oc")]
    one = cmp[(cmp["T"] == T) & (cmp.alpha == "1")]
    tenth = cmp[(cmp["T"] == T) & (cmp.alpha == "0.1")]
    return [
        f"* **The > 80 % claim is not reproduced on test error.** At T = {T} with α = 1 or "
        f"O.C., bdpe_α wins {_share(top)} significant comparisons, and {not_sig:.0f} % of "
        "the comparisons are not significant (the paper: under 4 %). Ten folds of at most "
        "6,000 rows leave most differences within the folds' spread.",
        f"* **It depends on ε, the other way round from the paper.** At ε ≥ 10 bdpe_α wins "
        f"{_share(high)}; at ε ≤ 0.1 it wins {_share(low)}. The paper finds bdpe_α "
        "especially good at ε = 0.01. Here, on the four larger domains, the forests at ε ≤ 1 "
        "and bdpe_α from ε = 0.1 to 1 label every record with the majority class (their "
        "error is the minority rate; the test error tables). At ε = 0.01 bdpe_α's leaves are "
        "noise and it has no intercept, so the sign of H is a coin flip and its error rises "
        "towards ½. On test error, only where the trees beat the majority label (ε ≥ 10) "
        "can either side win.",
        f"* **On ranking (AUC) it leads.** At T = {T} with α = 1 or O.C., bdpe_α wins "
        f"{_share(auc_top[auc_top.forest == 'RF-E'])} significant AUC comparisons against "
        "RF-E, whose one-label leaves rank little, and "
        f"{_share(auc_top[auc_top.forest == 'RF-L'])} against RF-L.",
        f"* **Objective calibration is the best α strategy, as in the paper.** On test error "
        f"at T = {T}: O.C. {_share(oc)}, α = 1 {_share(one)}, α = 0.1 {_share(tenth)}. The "
        "paper's α = 1 > α = 0.1 does not hold on error here: a fixed α = 1 pays the "
        "Matsushita sensitivity 2√m at every depth.",
        "* **Why the protocol differs.** The grid is reduced to fit the machine (T ∈ {5, "
        "20}, depth ∈ {2, 4, 6}, β_tree = 0.5 only: the paper finds β_tree matters little), "
        "and corpora are subsampled to 6,000 rows. The forests are fedpriv's: disjoint "
        "record shares and a depth chosen from the public noise level, stronger at small ε "
        "than forests of fixed depth. Three formulas are reconstructions (the source text "
        "lost them): the sensitivity Δ_α(m) = 2α√m + 2(1 − α) (checked by brute force), "
        "O.C.'s rule for α, and β_t at the centre of the paper's interval (π = 0). The "
        "splits use the monotone-score exponential mechanism, exp(εs/Δ), not the paper's "
        "exp(εs/(2Δ)): the same ε, sharper selection.",
    ]


def _md(df: pd.DataFrame) -> str:
    return markdown_table(df.round(3))


def write_report(cache: Path, out: Path, grid) -> Path:
    df = load(cache)  # the fits themselves stay in results.jsonl (one JSON object a line)
    cmp = comparisons(df, "error")
    by_auc = comparisons(df, "auc")
    pd.concat([cmp, by_auc]).to_csv(out / "comparisons.csv", index=False)
    auc_main = wins_table(by_auc, ["forest", "T", "alpha"])
    main = wins_table(cmp, ["forest", "T", "alpha"])
    per_eps = wins_table(cmp[cmp["T"] == max(grid.trees)], ["forest", "alpha", "epsilon"])
    per_dom = wins_table(cmp[cmp["T"] == max(grid.trees)], ["forest", "alpha", "domain"])
    learner_mean = (
        df.groupby(["domain", "epsilon", "learner"])[["auc", "error"]].mean().reset_index()
    )
    forests = learner_mean[learner_mean.learner.str.startswith("RF")]
    bd = learner_mean[learner_mean.learner.str.startswith("bdpe")]
    best = bd.loc[bd.groupby(["domain", "epsilon"]).auc.idxmax()]
    T, d, b = max(grid.trees), grid.depths[len(grid.depths) // 2], grid.beta_tree[0]
    fixed = f"bdpe T={T} d={d} α=oc β={b}"
    table = (
        pd.concat([
            forests.pivot_table(index=["domain", "epsilon"], columns="learner", values="auc"),
            bd[bd.learner == fixed].set_index(["domain", "epsilon"]).auc.rename(fixed),
            best.set_index(["domain", "epsilon"]).auc.rename("bdpe best of grid"),
        ], axis=1).reset_index()
    )  # fmt: skip
    errors = (
        pd.concat([
            forests.pivot_table(index=["domain", "epsilon"], columns="learner", values="error"),
            bd[bd.learner == fixed].set_index(["domain", "epsilon"]).error.rename(fixed),
        ], axis=1).reset_index()
    )  # fmt: skip
    over = df[df.epsilon_spent > df.epsilon * (1 + 1e-9)]
    lines = [
        "# bdpe_α against DP random forests (the paper's protocol, reduced)",
        "",
        "Generated by `python -m fedpriv.experiments.bdpe_study` from `results.jsonl` "
        f"({len(df):,} fits, {df.seconds.sum() / 3600:.2f} CPU-hours).",
        "",
        "## Protocol",
        "",
        f"* Domains: {', '.join(grid.domains)}; corpora above {grid.max_rows:,} rows are "
        "subsampled (stratified, public seed) to that size; synthetic: the benchmark "
        "paper's task, 4,800 rows.",
        f"* {grid.folds}-fold stratified cross-validation; every fit federated over "
        f"{grid.num_clients} clients (natural hospitals where the corpus has them) through "
        "the secure-aggregation shim, a fresh secret key per fit.",
        f"* bdpe_α: T ∈ {list(grid.trees)}, depth ∈ {list(grid.depths)}, α ∈ "
        f"{list(grid.alphas)} (oc: objective calibration), β_tree ∈ {list(grid.beta_tree)}, "
        f"v_q = 10; ε ∈ {list(grid.epsilons)} (pure-ε releases calibrated to the run's "
        "(ε, δ)), the whole budget on the trees (no calibration round: error and AUC read "
        "the margin H).",
        f"* Forests: {grid.forest_trees} complete random trees of automatic depth on disjoint "
        "record shares; RF-L: Laplace leaf counts, RF-E: exponential-mechanism leaf labels.",
        f"* ε spent above the target: {len(over)} fits.",
        "",
        "## The paper's claims",
        "",
        PAPER,
        "",
        "## Where we differ, and why",
        "",
        *differences(cmp, by_auc, max(grid.trees)),
        "",
        "## % of significant wins of bdpe_α (paired t-test over folds, p < 0.01)",
        "",
        "Test error, as the paper (the label is the sign of the margin H).",
        "",
        _md(main),
        "",
        "### The same on test AUC (higher wins)",
        "",
        _md(auc_main),
        "",
        f"### By ε (T = {max(grid.trees)}, test error)",
        "",
        _md(per_eps),
        "",
        f"### By domain (T = {max(grid.trees)}, test error)",
        "",
        _md(per_dom),
        "",
        "## Test AUC (mean over folds)",
        "",
        "`bdpe best of grid` picks the best setting per cell on the test folds, as the "
        "paper's Table 1 (an optimistic figure); the fixed setting is chosen in advance.",
        "",
        _md(table),
        "",
        "## Test error (mean over folds)",
        "",
        _md(errors),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
