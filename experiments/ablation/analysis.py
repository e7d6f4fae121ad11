"""Long-format rows of the ablation cells, and the tables computed from them.

Every row is ``study, learner, participation, alpha, accounting, n_clients,
partition, covariate_shift, epsilon, seed, metric, value``. Conditions are
paired by run seed (data and partitions are frozen across seeds), so every
comparison below is a paired one (:func:`fedpriv.experiments.bench.stats.paired_tests`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from fedpriv.experiments.ablation.cells import AblationCell
from fedpriv.experiments.bench import paper
from fedpriv.experiments.bench.stats import mean_sd, paired_tests
from scipy import stats as sps

CONDITION = ("participation", "alpha", "accounting", "n_clients", "partition", "covariate_shift")
ROW_KEYS = ("study", "learner", *CONDITION, "epsilon", "seed", "metric", "value")


def rows_of(study: str, cell: AblationCell, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Long-format rows of one cell's numeric results."""
    base = {
        "study": study,
        "learner": cell.learner,
        **cell.condition,
        "epsilon": cell.epsilon,
        "seed": cell.seed,
    }
    return [
        {**base, "metric": k, "value": float(v)}
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell, metrics as columns (α NaN is kept as its own key)."""
    keys = ["learner", *CONDITION, "seed"]
    w = df.assign(alpha=df["alpha"].fillna(-1.0))
    w = w.pivot_table(index=keys, columns="metric", values="value", aggfunc="first")
    w = w.reset_index()
    w.columns.name = None
    w["alpha"] = w["alpha"].replace(-1.0, np.nan)
    return w


def summary(df: pd.DataFrame, metrics: tuple[str, ...] = ("auc",)) -> pd.DataFrame:
    """Mean and SD of ``metrics`` per (learner, condition), with n and mean z."""
    w = wide(df).assign(alpha=lambda d: d["alpha"].fillna(-1.0))
    rows = []
    for key, g in w.groupby(["learner", *CONDITION], sort=True):
        row = dict(zip(["learner", *CONDITION], key, strict=True))
        row["n"] = len(g)
        for m in metrics:
            if m in g:
                row[f"{m}_mean"], row[f"{m}_sd"] = mean_sd(g[m].dropna().to_numpy())
        row["z"] = float(g["noise_multiplier"].mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    out["alpha"] = out["alpha"].replace(-1.0, np.nan)
    return out


def _paired(w: pd.DataFrame, a: pd.Series, b: pd.Series, metric: str = "auc") -> dict:
    """Paired tests of ``metric`` between the cells selected by masks ``a`` and ``b``."""
    x = w[a].set_index("seed")[metric]
    y = w[b].set_index("seed")[metric]
    common = x.index.intersection(y.index).sort_values()
    x, y = x.loc[common].to_numpy(), y.loc[common].to_numpy()
    out = paired_tests(x, y)
    n = x.size
    sd = float(np.std(x - y, ddof=1)) if n > 1 else math.nan
    half = float(sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n > 1 else math.nan
    out.update(a_mean=float(x.mean()), b_mean=float(y.mean()), ci_low=out["mean_diff"] - half)
    out["ci_high"] = out["mean_diff"] + half
    return out


# -- tight ε of a noise multiplier -------------------------------------------------
def tight_epsilon(learner: str, params: dict, z: float, rho: float, delta: float) -> float:
    """ε that the *valid* (``tight``) accounting certifies for multiplier ``z`` at ρ.

    For ``paper``-calibrated fits this is what the run really spends (benchmark
    paper §5.6 claims the target; :mod:`fedpriv.privacy.participation`).
    """
    from fedpriv.privacy.accounting import account
    from fedpriv.privacy.participation import plan_event
    from fedpriv.privacy.pld import flatten

    steps = int(params["rounds"])
    event = plan_event(
        z,
        sampling_probability=float(params["sampling_rate"]),
        participation=rho,
        steps=steps,
        accounting="tight",
    )
    return float(account(flatten(event), delta).epsilon)


# -- participation × label skew (Table 10) -------------------------------------------
def participation_table(df: pd.DataFrame, cfg) -> pd.DataFrame:
    """Per (learner, α, ρ, accounting): AUC mean ± SD, z and the tight ε of that z.

    ρ = 1 cells are shared by all three accountings (the same event) and are
    repeated under each; the paper's Table 10 value sits beside ``paper``.
    """
    s = summary(df)
    rows = []
    for _, r in s.iterrows():
        accs = cfg.axes.accounting if r["participation"] == 1.0 else (r["accounting"],)
        for acc in accs:
            ref = paper.table10(r["learner"], r["alpha"], r["participation"])
            eps = tight_epsilon(
                r["learner"], cfg.params(r["learner"]), r["z"], r["participation"], cfg.delta
            )
            rows.append(
                {
                    "learner": r["learner"],
                    "alpha": r["alpha"],
                    "participation": r["participation"],
                    "accounting": acc,
                    "n": r["n"],
                    "auc_mean": r["auc_mean"],
                    "auc_sd": r["auc_sd"],
                    "z": r["z"],
                    "tight_epsilon": eps,
                    "paper_auc": ref[0] if ref and acc == "paper" else math.nan,
                    "paper_sd": ref[1] if ref and acc == "paper" else math.nan,
                }
            )
    return pd.DataFrame(rows).sort_values(["learner", "alpha", "participation", "accounting"])


def participation_drops(df: pd.DataFrame) -> pd.DataFrame:
    """Paired AUC(ρ = 1) − AUC(ρ = min) per (learner, α, accounting)."""
    w = wide(df)
    lo = w["participation"].min()
    rows = []
    for (m, a), g in w.groupby(["learner", "alpha"]):
        full = (g["participation"] == 1.0) & (g["accounting"] == "valid")
        for acc in sorted(g.loc[g["participation"] == lo, "accounting"].unique()):
            part = (g["participation"] == lo) & (g["accounting"] == acc)
            t = _paired(g, full, part)
            rows.append({"learner": m, "alpha": a, "accounting": acc, "rho_low": lo, **t})
    return pd.DataFrame(rows)


# -- Remark 1 ----------------------------------------------------------------------
def remark1_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per learner at ρ = 1: paired AUC(α_min) − AUC(α_max), 95 % CI, tests, vs 0.011."""
    w = wide(df)
    w = w[w["participation"] == 1.0]
    a_lo, a_hi = w["alpha"].min(), w["alpha"].max()
    rows = []
    for m, g in w.groupby("learner"):
        t = _paired(g, g["alpha"] == a_lo, g["alpha"] == a_hi)
        bound = paper.REMARK1_MAX_DIFF
        rows.append(
            {
                "learner": m,
                "alpha_a": a_lo,
                "alpha_b": a_hi,
                **t,
                "within_bound": abs(t["mean_diff"]) <= bound,
                "ci_within_bound": -bound <= t["ci_low"] and t["ci_high"] <= bound,
                "ci_contains_zero": t["ci_low"] <= 0.0 <= t["ci_high"],
            }
        )
    return pd.DataFrame(rows)


# -- clients and imbalance ----------------------------------------------------------
def clients_tests(df: pd.DataFrame) -> pd.DataFrame:
    """Paired tests: K_max vs K_min per (learner, partition); Zipf vs IID per (learner, K)."""
    w = wide(df)
    k_lo, k_hi = w["n_clients"].min(), w["n_clients"].max()
    rows = []
    for (m, p), g in w.groupby(["learner", "partition"]):
        if k_lo != k_hi:
            t = _paired(g, g["n_clients"] == k_hi, g["n_clients"] == k_lo)
            rows.append({"learner": m, "comparison": f"{p}: K={k_hi} − K={k_lo}", **t})
    if {"zipf", "iid"} <= set(w["partition"]):
        for (m, k), g in w.groupby(["learner", "n_clients"]):
            t = _paired(g, g["partition"] == "zipf", g["partition"] == "iid")
            rows.append({"learner": m, "comparison": f"K={k}: zipf − iid", **t})
    return pd.DataFrame(rows)


# -- covariate shift ----------------------------------------------------------------
SHIFT_METRICS = ("auc", "auc_macro_within", "auc_within_pairs", "auc_cross_pairs")


def shift_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (learner, γ): pooled AUC, within-client macro AUC, the pair split, paper values."""
    s = summary(df, (*SHIFT_METRICS, "within_pair_fraction"))
    s["paper_pooled"] = [
        paper.SHIFT_BOOSTING_POOLED.get(g, math.nan) if m == "boosting" else math.nan
        for m, g in zip(s["learner"], s["covariate_shift"], strict=True)
    ]
    macro = dict(zip(paper.SHIFT_GAMMAS, paper.SHIFT_BOOSTING_MACRO, strict=True))
    s["paper_macro"] = [
        macro.get(g, math.nan) if m == "boosting" else math.nan
        for m, g in zip(s["learner"], s["covariate_shift"], strict=True)
    ]
    return s.sort_values(["learner", "covariate_shift"])


def shift_tests(df: pd.DataFrame) -> pd.DataFrame:
    """Paired γ_max − γ_0 per learner, for pooled and within-client macro AUC."""
    w = wide(df)
    g0, g1 = w["covariate_shift"].min(), w["covariate_shift"].max()
    rows = []
    for m, g in w.groupby("learner"):
        for metric in ("auc", "auc_macro_within"):
            t = _paired(g, g["covariate_shift"] == g1, g["covariate_shift"] == g0, metric)
            rows.append({"learner": m, "metric": metric, "gamma_a": g1, "gamma_b": g0, **t})
    return pd.DataFrame(rows)
