"""The matched-accounting benchmark: one command, one report.

Reproduces and extends the benchmark paper (``../shared/papers/
dp_federated_boosting_vs_dpsgd_benchmark.txt``) with fedpriv's in-process
learners, every one accounted by the same ledger and calibrated per (ε, q, T):

* §4.2 protocol: per (dataset, ε) symmetric tuning on validation AUC (or the
  paper's settings), then test metrics over 20 seeds, paired tests; forest rows;
* Table 8 ablations, Figure 3 sweeps, the Appendix A.4 T* analysis;
* §5.1/§5.5 off-path vs on-path membership inference;
* accounted tuning (Papernot & Steinke 2022): private random search over the
  grid, its selection inside each row's ε, next to the validation-mode AUC;
* Tables 11/12 communication and synchronisation time.

Each stage shows a progress bar; finished cells are cached under
``OUT/cache`` by a hash of their config, so an interrupted run resumes. Cells
run in a pool of ``processes`` (≤ 2) spawned workers. Outputs in ``OUT``:
``results.csv.gz`` (long format, gzip-compressed: stage, dataset, learner, variant, config, ε,
seed, metric, value), one CSV per analysis table, ``report.md`` and PNGs.

Usage::

    python -m fedpriv.experiments.benchmark --config experiments/configs/matched.toml
        [--quick] [--out DIR]
        [--processes {1,2}]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd
from fedpriv.experiments.bench import analysis, figures, private_tuning, report, stages, targets
from fedpriv.experiments.bench.cells import CellCache, make_pool
from fedpriv.experiments.bench.config import load

from fedpriv import logs

log = logs.get_logger(__name__)


def run(config: Path, *, quick: bool, out: Path, processes: int | None = None) -> Path:
    """Run every configured stage into ``out``; returns the report's path.

    ``processes`` overrides the config's pool size (1: every cell in this process).
    """
    t0 = time.perf_counter()
    cfg = load(config, quick=quick)
    if processes is not None:
        cfg = dataclasses.replace(cfg, processes=processes)
    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("absl").setLevel(logging.ERROR)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # inherited by the spawned workers
    pool = make_pool(cfg.processes)
    ctx = stages.Context(cfg=cfg, cache=CellCache(out / "cache"), pool=pool)
    rows: list[dict] = []
    chosen: dict = {}
    try:
        if "main" in cfg.stages:
            main_rows, chosen = stages.run_main(ctx)
            rows += main_rows
        if "ablations" in cfg.stages and cfg.ablations.datasets and cfg.ablations.seeds:
            rows += stages.run_ablations(ctx, chosen)
        if "sweep" in cfg.stages:
            rows += stages.run_sweep(ctx)
        if "mia" in cfg.stages and cfg.mia.seeds:
            rows += stages.run_mia(ctx)
        if "multiclass" in cfg.stages:
            rows += stages.run_multiclass(ctx, chosen)
        if "private_tuning" in cfg.stages:
            rows += private_tuning.run_stage(ctx)
    finally:
        if pool is not None:
            pool.shutdown()
    df = pd.DataFrame(rows, columns=list(stages.ROW_KEYS))
    df.to_csv(out / "results.csv.gz", index=False)  # the raw rows, compressed
    tables, figs = _analyse(df, cfg, out, ctx)
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    meta = {
        "config": f"`{config}`" + (" (`--quick`)" if quick else ""),
        "datasets": ", ".join(cfg.datasets),
        "ε grid / δ": f"{', '.join(f'{e:g}' for e in cfg.epsilons)} / {cfg.delta:g}",
        "seeds (tuning seeds)": f"{cfg.seeds} ({cfg.tune_seeds})",
        "tuning": cfg.tuning,
        "processes": str(cfg.processes),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "wall time (this invocation)": f"{time.perf_counter() - t0:.1f} s",
    }
    path = report.write(out, cfg, tables, figs, meta)
    log.info("report: %s (%s)", path, meta["wall time (this invocation)"])
    return path


def _analyse(df: pd.DataFrame, cfg, out: Path, ctx) -> tuple[dict, dict]:
    tables: dict[str, pd.DataFrame] = {}
    figs: dict[str, str] = {}
    if (df["stage"] == "main").any():
        tables["summary"] = analysis.main_summary(df)
        tables["pairwise"] = analysis.pairwise(df)
        tables["communication"] = analysis.communication(df)
        figs["fig2"] = figures.privacy_utility(tables["summary"], out)
    if (df["stage"] == "ablations").any():
        tables["ablations"] = analysis.ablation_summary(df)
    if (df["stage"] == "sweep").any():
        tables["sweep"] = analysis.sweep_summary(df)
        figs["fig3"] = figures.iteration_sweep(tables["sweep"], cfg.sweep.epsilon, out)
        if "tstar" in cfg.stages:
            t0 = time.perf_counter()
            ts = analysis.tstar_analysis(tables["sweep"], cfg)
            tables.update({f"tstar_{k}": v for k, v in ts.items()})
            figs["figA1"] = figures.tstar_figure(ts["points"], ts["grid"], out)
            ctx.timing.append(
                {
                    "stage": "tstar",
                    "cells": 0,
                    "cell_seconds": 0.0,
                    "wall_seconds": time.perf_counter() - t0,
                }
            )
    if (df["stage"] == "multiclass").any():
        tables["multiclass"] = analysis.main_summary(df, "multiclass", analysis.MULTICLASS_METRICS)
    if "summary" in tables:
        tables["targets"] = targets.checks(tables["summary"], tables.get("multiclass"))
    if (df["variant"] == "private").any():
        tables["private_tuning"] = private_tuning.summary(df, cfg.tuning)
    if (df["stage"] == "mia").any():
        tables["mia"] = analysis.mia_summary(df)
        figs["fig4"] = figures.mia_figure(tables["mia"], out)
    tables["timing"] = pd.DataFrame(ctx.timing)
    return tables, figs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=Path("experiments/configs/matched.toml"))
    ap.add_argument("--quick", action="store_true", help="the [quick] subset (CI smoke run)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default experiments/reports/<name>[-quick])",
    )
    ap.add_argument(
        "--processes", type=int, choices=(1, 2), default=None, help="override the config's pool"
    )
    args = ap.parse_args(argv)
    logs.configure(tag="benchmark")
    out = args.out
    if out is None:
        name = load(args.config, quick=args.quick).name
        out = Path("experiments/reports") / (f"{name}-quick" if args.quick else name)
    run(args.config, quick=args.quick, out=out, processes=args.processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
