"""One PNG per ablation study (matplotlib Agg at the issue-8 DPI, each well under 300 KB)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from fedpriv.experiments.bench.figures import _save, plt, sd_line

_STYLE = {"boosting": "-", "logistic": "--", "mlp": ":"}


def participation(table: pd.DataFrame, accs: tuple[str, ...], out: Path) -> str:
    """AUC vs ρ, one panel per accounting, one line per (learner, α), ±SD bars (paper Fig. 5a).

    The ``paper`` panel also marks the paper's Table 10 boosting means (grey ×).
    """
    fig, axes = plt.subplots(1, len(accs), figsize=(4.3 * len(accs), 3.6), squeeze=False)
    for ax, acc in zip(axes[0], accs, strict=True):
        sub = table[table["accounting"] == acc]
        for (m, a), g in sub.groupby(["learner", "alpha"], sort=True):
            g = g.sort_values("participation")
            sd_line(ax, g, "participation", "auc", label=f"{m}, α={a:g}", ls=_STYLE.get(m, "-"))
        if acc == "paper":
            ref = sub.dropna(subset=["paper_auc"])
            ref = ref[ref["learner"] == "boosting"]
            ax.plot(
                ref["participation"], ref["paper_auc"], "x", color="0.4", label="paper Table 10"
            )
        title = f"{acc} accounting" + (" (NOT a valid guarantee)" if acc == "paper" else "")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("client participation ρ")
        ax.set_ylabel("test AUC")
        ax.set_xticks(sorted(sub["participation"].unique()))
    axes[0][-1].legend(fontsize=6, ncol=1)
    return _save(fig, out / "fig_participation.png")


def remark1(table: pd.DataFrame, bound: float, out: Path) -> str:
    """Paired AUC(α_min) − AUC(α_max) at ρ = 1 per learner with 95 % CIs and the ±bound band."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = range(len(table))
    mean = table["mean_diff"].to_numpy()
    err = [mean - table["ci_low"].to_numpy(), table["ci_high"].to_numpy() - mean]
    ax.errorbar(x, mean, yerr=err, fmt="o", capsize=4)
    ax.axhspan(-bound, bound, color="0.85", label=f"±{bound:g} (paper Remark 1)")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(list(x), table["learner"])
    a, b = table["alpha_a"].iloc[0], table["alpha_b"].iloc[0]
    ax.set_ylabel(f"AUC(α={a:g}) − AUC(α={b:g})")
    ax.set_title("ρ = 1: paired difference, 95 % CI", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out / "fig_remark1.png")


def clients(table: pd.DataFrame, out: Path) -> str:
    """AUC vs K, one line per (learner, partition), ±SD bars."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for (m, p), g in table.groupby(["learner", "partition"], sort=True):
        g = g.sort_values("n_clients")
        label = f"{m}, {p}" + (f" α={g['alpha'].iloc[0]:g}" if p == "dirichlet" else "")
        sd_line(ax, g, "n_clients", "auc", label=label, ls=_STYLE.get(m, "-"))
    rho = table["participation"].iloc[0]
    ax.set_xscale("log", base=2)
    ax.set_xticks(
        sorted(table["n_clients"].unique()), [str(k) for k in sorted(table["n_clients"].unique())]
    )
    ax.set_xlabel("clients K")
    ax.set_ylabel("test AUC")
    ax.set_title(f"ρ = {rho:g}", fontsize=9)
    ax.legend(fontsize=6)
    return _save(fig, out / "fig_clients.png")


def shift(table: pd.DataFrame, diag: pd.DataFrame, out: Path) -> str:
    """Pooled and within-client macro AUC vs γ per learner (±SD), and the data check."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, metric, title in (
        (axes[0], "auc", "pooled test AUC"),
        (axes[1], "auc_macro_within", "within-client macro AUC"),
    ):
        for m, g in table.groupby("learner", sort=True):
            g = g.sort_values("covariate_shift")
            sd_line(ax, g, "covariate_shift", metric, label=m, ls=_STYLE.get(m, "-"))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("covariate shift γ")
        ax.set_ylabel("AUC")
    lo = min(axes[0].get_ylim()[0], axes[1].get_ylim()[0])
    hi = max(axes[0].get_ylim()[1], axes[1].get_ylim()[1])
    for ax in axes[:2]:
        ax.set_ylim(lo, hi)
    axes[0].legend(fontsize=7)
    ax = axes[2]
    ax.plot(
        diag["covariate_shift"], diag["membership_auc"] - 0.5, "k-.", label="membership AUC − 0.5"
    )
    for name, style in (("weak", "o-"), ("oracle", "s--")):
        gap = diag[f"{name}_auc"] - diag[f"{name}_auc_macro_within"]
        ax.plot(diag["covariate_shift"], gap, style, ms=3, label=f"{name}: pooled − macro")
    ax.axvspan(0, table["covariate_shift"].max(), color="0.92")
    ax.set_title("data check (no DP; shaded: the study's γ)", fontsize=9)
    ax.set_xlabel("covariate shift γ")
    ax.legend(fontsize=7)
    return _save(fig, out / "fig_shift.png")
