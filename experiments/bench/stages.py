"""The study's stages as cell lists, and their results as long-format rows.

Stages (each one progress bar, each cell cached):

* ``main`` — paper §4.2: per (dataset, ε, learner) tuning on train → val
  (``tuning="validation"``) or the paper's settings (``"paper"``), then the
  selected configuration refitted on train + val and scored on test over
  ``seeds`` seeds (``"private"``: accounted tuning per seed instead,
  :mod:`fedpriv.experiments.bench.private_tuning`); plus the forest rows at a fixed
  setting and ``forests.seeds``.
* ``ablations`` — paper Table 8 at one ε.
* ``sweep`` — paper Figure 3: boosting vs T and DP-SGD vs steps; the boosting
  sweep at every ``sweep.fit_epsilons`` feeds the T* fit.
* ``mia`` — paper §5.1/§5.5: the off-path ensemble and the attack cells.

Every row is ``stage, dataset, learner, variant, config, epsilon, seed, metric, value``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fedpriv.experiments.bench import paper
from fedpriv.experiments.bench.cells import Cell, CellCache, execute, run_cells
from fedpriv.experiments.bench.config import StudyConfig
from fedpriv.experiments.bench.learners import label

#: First run seed of the tuning fits (kept apart from the evaluation seeds 0, 1, …).
TUNE_SEED0 = 10_000
ROW_KEYS = (
    "stage",
    "dataset",
    "learner",
    "variant",
    "config",
    "epsilon",
    "seed",
    "metric",
    "value",
)


@dataclass
class Context:
    """What every stage needs: the config, the cell cache, the pool, and the timing log."""

    cfg: StudyConfig
    cache: CellCache
    pool: Any
    timing: list[dict[str, Any]] = field(default_factory=list)

    def fit(
        self,
        dataset: str,
        learner: str,
        params: dict[str, Any],
        eps: float | None,
        seed: int,
        *,
        tune: bool = False,
    ) -> Cell:
        return Cell.make(
            "fit",
            dataset,
            learner,
            params,
            epsilon=eps,
            delta=self.cfg.delta,
            seed=seed,
            train_part="train" if tune else "train+val",
            eval_part="val" if tune else "test",
            n_clients=self.cfg.n_clients,
            secure_aggregation=self.cfg.secure_aggregation,
        )

    def run(self, stage: str, cells: list, *, runner=execute) -> dict[Any, dict[str, Any]]:
        t0 = time.perf_counter()
        out = run_cells(cells, self.cache, self.pool, desc=stage, runner=runner)
        self.timing.append(
            {
                "stage": stage,
                "cells": len(out),
                "wall_seconds": time.perf_counter() - t0,
                "cell_seconds": float(sum(r.get("seconds", 0.0) for r in out.values())),
            }
        )
        return out


def rows_of(stage: str, variant: str, cell: Cell, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Long-format rows of one cell's numeric results."""
    base = {
        "stage": stage,
        "dataset": cell.dataset,
        "learner": cell.learner,
        "variant": variant,
        "config": label(cell.learner, cell.param_dict),
        "epsilon": cell.epsilon,
        "seed": cell.seed,
    }
    return [
        {**base, "metric": k, "value": float(v)}
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]


# -- main: tuning and evaluation -------------------------------------------------------
def _select(ctx: Context) -> tuple[dict[tuple[str, float, str], dict[str, Any]], list[dict]]:
    """Selected params per (dataset, ε, learner), and the tuning rows."""
    cfg = ctx.cfg
    keys = [(d, e, m) for d in cfg.datasets for e in cfg.epsilons for m in cfg.learners]
    if cfg.tuning == "paper":
        return {k: paper.selected(k[0], k[2], k[1]) for k in keys}, []
    plan = {
        k: [
            [ctx.fit(k[0], k[2], p, k[1], TUNE_SEED0 + s, tune=True) for s in range(cfg.tune_seeds)]
            for p in cfg.grid(k[2]).configs()
        ]
        for k in keys
    }
    res = ctx.run("tune", [c for groups in plan.values() for g in groups for c in g])
    rows, chosen = [], {}
    for k, groups in plan.items():
        scores = [np.mean([res[c]["auc"] for c in g]) for g in groups]
        best = int(np.argmax(scores))
        chosen[k] = groups[best][0].param_dict
        for g in groups:
            for c in g:
                rows += rows_of("tune", "grid", c, res[c])
    return chosen, rows


def run_main(ctx: Context) -> tuple[list[dict], dict[tuple[str, float, str], dict[str, Any]]]:
    """Tuning, then the 20-seed test evaluation of every learner and the forest rows."""
    cfg = ctx.cfg
    if cfg.tuning == "private":  # tuned per seed, inside each row's ε
        from fedpriv.experiments.bench import private_tuning

        chosen, rows = (
            {},
            private_tuning.run_private(
                ctx,
                stage="main",
                datasets=cfg.datasets,
                epsilons=cfg.epsilons,
                learners=cfg.learners,
                seeds=cfg.seeds,
            ),
        )
    else:
        chosen, rows = _select(ctx)
    # Seed-major order: the pool finishes seed 0 of every row, then seed 1, ..., so a run
    # cut short holds the same seeds for every row (rerun with fewer seeds from the cache).
    fixed = cfg.forests.settings()
    plan: list[tuple[str, Cell]] = []
    for s in range(max(cfg.seeds, cfg.forests.seeds)):
        if s < cfg.seeds:
            plan += [("selected", ctx.fit(d, m, chosen[(d, e, m)], e, s)) for (d, e, m) in chosen]
        if s < cfg.forests.seeds:
            plan += [
                ("fixed", ctx.fit(d, f, fixed[f], e, s))
                for d in cfg.datasets
                for e in cfg.epsilons
                for f in cfg.forests.learners
            ]
    res = ctx.run("evaluate", [c for _, c in plan])
    for variant, c in plan:
        rows += rows_of("main", variant, c, res[c])
    return rows, chosen


def base_params(ctx: Context, chosen: dict, dataset: str, eps: float, learner: str) -> dict:
    """The main stage's selection when it exists, else the paper's setting."""
    return dict(chosen.get((dataset, eps, learner)) or paper.selected(dataset, learner, eps))


def run_ablations(ctx: Context, chosen: dict) -> list[dict]:
    """Paper Table 8: one knob changed from the selected configuration at ε_ablation."""
    a = ctx.cfg.ablations
    plan: list[tuple[str, Cell]] = []
    for d in a.datasets:
        boost = base_params(ctx, chosen, d, a.epsilon, "boosting")
        mlp = base_params(ctx, chosen, d, a.epsilon, "mlp")
        variants = {
            ("boosting", "boosting per-ε T"): boost,
            ("boosting", "boosting fixed T"): {**boost, "rounds": a.boosting_fixed_rounds},
            ("mlp", "mlp fair"): mlp,
            ("mlp", "mlp few steps"): {**mlp, "rounds": a.mlp_few_steps},
            ("mlp", "mlp wide"): {**mlp, "hidden": a.mlp_wide_hidden},
        }
        plan += [
            (name, ctx.fit(d, learner, params, a.epsilon, s))
            for (learner, name), params in variants.items()
            for s in range(a.seeds)
        ]
    res = ctx.run("ablations", [c for _, c in plan])
    return [r for v, c in plan for r in rows_of("ablations", v, c, res[c])]


def run_sweep(ctx: Context) -> list[dict]:
    """Figure 3 (boosting vs T, DP-SGD vs steps at ε_sweep) and the T* fit's round sweep."""
    sw = ctx.cfg.sweep
    d = sw.dataset
    boost = {k: v for k, v in paper.selected(d, "boosting", sw.epsilon).items() if k != "rounds"}
    plan: list[tuple[str, Cell]] = []
    for eps in dict.fromkeys((sw.epsilon, *sw.fit_epsilons)):
        seeds = sw.seeds if eps == sw.epsilon else sw.fit_seeds
        plan += [
            ("rounds", ctx.fit(d, "boosting", {**boost, "rounds": t}, eps, s))
            for t in sw.rounds
            for s in range(seeds)
        ]
    for learner in ("mlp", "logistic"):
        params = paper.selected(d, learner, sw.epsilon)
        plan += [
            ("steps", ctx.fit(d, learner, {**params, "rounds": t}, sw.epsilon, s))
            for t in sw.steps
            for s in range(sw.seeds)
        ]
    res = ctx.run("sweep", [c for _, c in plan])
    return [r for v, c in plan for r in rows_of("sweep", v, c, res[c])]


def run_multiclass(ctx: Context, chosen: dict) -> list[dict]:
    """The multiclass rows: every multiclass learner on ``multiclass.dataset`` at the main
    stage's selection on its binary ``source`` (the paper's setting if none), forests fixed."""
    cfg, mc = ctx.cfg, ctx.cfg.multiclass
    fixed = cfg.forests.settings()
    plan = []
    for eps in mc.epsilons:
        for learner in mc.learners:
            if learner in fixed:
                params = dict(fixed[learner])
            else:
                params = base_params(ctx, chosen, mc.source, eps, learner)
            plan += [ctx.fit(mc.dataset, learner, params, eps, s) for s in range(mc.seeds)]
    res = ctx.run("multiclass", plan)
    return [r for c in plan for r in rows_of("multiclass", "selected", c, res[c])]


def run_mia(ctx: Context) -> list[dict]:
    """Paper §5.5: the off-path model and every on-path learner, ``mia.seeds`` seeds."""
    cfg, m = ctx.cfg, ctx.cfg.mia
    common = {
        "delta": cfg.delta,
        "n_clients": cfg.n_clients,
        "secure_aggregation": cfg.secure_aggregation,
        "members": m.members,
    }
    fixed = cfg.forests.settings()
    plan: list[tuple[str, Cell]] = []
    for eps in m.epsilons:
        for s in range(m.seeds):
            plan.append(
                (
                    "offpath",
                    Cell.make(
                        "offpath",
                        "synthetic",
                        "boosting",
                        dict(m.offpath),
                        epsilon=eps,
                        seed=s,
                        **common,
                    ),
                )
            )
            for learner in m.learners:
                params = (
                    dict(fixed[learner])
                    if learner in fixed
                    else paper.selected("synthetic", learner, eps)
                )
                plan.append(
                    (
                        "onpath",
                        Cell.make(
                            "mia", "synthetic", learner, params, epsilon=eps, seed=s, **common
                        ),
                    )
                )
    res = ctx.run("mia", [c for _, c in plan])
    return [r for v, c in plan for r in rows_of("mia", v, c, res[c])]
