"""PNG figures of the report (matplotlib Agg, small DPI so each stays well under 300 KB)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

DPI = 90


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path.name


def sd_line(ax, g: pd.DataFrame, x: str, metric: str, *, label: str, ls: str = "-") -> None:
    """``g[metric_mean]`` against ``g[x]`` with ±SD bars, the style of every figure here."""
    ax.errorbar(
        g[x],
        g[f"{metric}_mean"],
        yerr=g[f"{metric}_sd"],
        ls=ls,
        marker="o",
        ms=3,
        capsize=2,
        label=label,
    )


def privacy_utility(summary: pd.DataFrame, out: Path) -> str:
    """Figure 2: test AUC vs ε per dataset, ±SD bars, one line per learner."""
    datasets = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
    for ax, d in zip(axes[0], datasets, strict=True):
        for m, g in summary[summary["dataset"] == d].groupby("learner", sort=False):
            g = g.sort_values("epsilon")
            sd_line(ax, g, "epsilon", "auc", label=m)
        ax.set_xscale("log", base=2)
        ax.set_title(d)
        ax.set_xlabel("ε")
        ax.set_ylabel("test AUC")
    axes[0][0].legend(fontsize=7)
    return _save(fig, out / "fig2_privacy_utility.png")


def iteration_sweep(sweep: pd.DataFrame, epsilon: float, out: Path) -> str:
    """Figure 3: boosting AUC vs T and DP-SGD AUC vs steps at one ε."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    s = sweep[sweep["epsilon"] == epsilon]
    for ax, learners, xlabel in (
        (axes[0], ("boosting",), "boosting rounds T"),
        (axes[1], ("mlp", "logistic"), "DP-SGD steps"),
    ):
        for m in learners:
            g = s[s["learner"] == m].sort_values("iterations")
            sd_line(ax, g, "iterations", "auc", label=m)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test AUC")
        ax.legend(fontsize=7)
    fig.suptitle(f"ε = {epsilon:g}")
    return _save(fig, out / "fig3_iterations.png")


def tstar_figure(points: pd.DataFrame, grid: pd.DataFrame, out: Path) -> str:
    """Figure A1: fitted L(T) against the measurements; T* vs ε over δ and over q."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
    for e, g in points.groupby("epsilon"):
        g = g.sort_values("iterations")
        line = axes[0].plot(g["iterations"], g["fitted_loss"], label=f"ε={e:g}")[0]
        axes[0].plot(g["iterations"], g["measured_loss"], "o", ms=3, color=line.get_color())
    axes[0].set_xlabel("T")
    axes[0].set_ylabel("loss (points measured, lines fitted)")
    axes[0].legend(fontsize=6)
    q0 = grid["q"].mode().iloc[0]
    d0 = grid["delta"].mode().iloc[0]
    for (d, q), g in grid.groupby(["delta", "q"]):
        g = g.sort_values("epsilon")
        if q == q0:
            axes[1].plot(g["epsilon"], g["tstar"], marker="o", ms=3, label=f"δ={d:g}")
        if d == d0:
            axes[2].plot(g["epsilon"], g["tstar"], marker="o", ms=3, label=f"q={q:g}")
    for ax, title in ((axes[1], f"q = {q0:g}"), (axes[2], f"δ = {d0:g}")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ε")
        ax.set_ylabel("T*")
        ax.set_title(title)
        ax.legend(fontsize=6)
    return _save(fig, out / "figA1_tstar.png")


def mia_figure(mia: pd.DataFrame, out: Path) -> str:
    """Figure 4: attack AUC and advantage vs ε, off-path and on-path."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, k, ylabel in (
        (axes[0], "attack_auc", "attack AUC"),
        (axes[1], "attack_advantage", "max(TPR − FPR)"),
    ):
        for m, g in mia.groupby("model", sort=False):
            g = g.sort_values("epsilon")
            sd_line(ax, g, "epsilon", k, label=m)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ε")
        ax.set_ylabel(ylabel)
    axes[0].legend(fontsize=7)
    return _save(fig, out / "fig4_mia.png")
