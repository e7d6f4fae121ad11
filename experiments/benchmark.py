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

``--stages main`` runs only the named stages; ``--reuse OLD/results.csv.gz`` then
takes every other configured stage's rows from an earlier run's results, so the
report still covers the whole study (its "Provenance" table says which stage
came from which run). Without ``main`` among the stages run, the appendix stages
build on the reused run's main-stage selection (:func:`reused_selection`).

Usage::

    python -m fedpriv.experiments.benchmark --config experiments/configs/matched.toml
        [--quick] [--out DIR]
        [--processes {1,2}] [--stages STAGE ...] [--reuse RESULTS]
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
from fedpriv.experiments.bench import (
    analysis,
    dp_ebm,
    figures,
    private_tuning,
    report,
    sections,
    stages,
    targets,
)
from fedpriv.experiments.bench.cells import CellCache, make_pool
from fedpriv.experiments.bench.config import load
from fedpriv.experiments.bench.learners import label

from fedpriv import logs

log = logs.get_logger(__name__)


#: The row stages each run stage writes (``main`` also writes its tuning fits).
ROW_STAGES = {"main": ("main", "tune"), "private_tuning": ("private_tuning",)}


def run(
    config: Path,
    *,
    quick: bool,
    out: Path,
    processes: int | None = None,
    stages_to_run: tuple[str, ...] | None = None,
    reuse: Path | None = None,
    reuse_label: str | None = None,
    timing_from: Path | None = None,
    run_label: str | None = None,
) -> Path:
    """Run every configured stage into ``out``; returns the report's path.

    ``processes`` overrides the config's pool size (1: every cell in this process).
    ``stages_to_run`` (default: all configured) are computed; with ``reuse``, the rows of
    every other configured stage are read from that earlier ``results.csv.gz``
    (``reuse_label`` names it in the report). ``timing_from``: the ``timing.csv`` of the
    invocation that computed this one's cells (from the cache here, at ~0 wall seconds):
    its rows of the stages run here replace theirs. ``run_label`` says in the report
    how this run's stages were computed (e.g. by earlier invocations, into the cache).
    """
    t0 = time.perf_counter()
    full = load(config, quick=quick)
    cfg = full
    if processes is not None:
        cfg = dataclasses.replace(cfg, processes=processes)
    cfg = runnable(cfg)
    if stages_to_run is not None:
        cfg = dataclasses.replace(cfg, stages=tuple(s for s in cfg.stages if s in stages_to_run))
    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("absl").setLevel(logging.ERROR)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # inherited by the spawned workers
    pool = make_pool(cfg.processes)
    ctx = stages.Context(cfg=cfg, cache=CellCache(out / "cache"), pool=pool)
    # Read once, before any output is written (``out`` may hold ``reuse`` itself).
    earlier = None if reuse is None else pd.read_csv(reuse)
    rows: list[dict] = []
    chosen: dict = {}
    try:
        if "main" in cfg.stages:
            main_rows, chosen = stages.run_main(ctx)
            rows += main_rows
        elif earlier is not None and "main" in full.stages:
            chosen = reused_selection(earlier, cfg)  # the appendix stages build on it
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
    provenance = [{"stage": s, "source": run_label or "this run"} for s in cfg.stages]
    if reuse is not None:
        df, kept = _reused(df, earlier, cfg.stages, full.stages)
        label = reuse_label or f"`{reuse}`"
        provenance += [{"stage": s, "source": f"{label} (earlier run)"} for s in kept]
        ctx.timing += _reused_timing(reuse, kept)
        cfg = dataclasses.replace(cfg, stages=full.stages)  # analyse the whole study
    if (out / "distributed.md").exists():
        provenance.append(
            {
                "stage": "distributed noise rows",
                "source": "`distributed.md` of `python -m fedpriv.experiments."
                "distributed_noise` (its own command, run after an earlier benchmark run)",
            }
        )
    if timing_from is not None:
        ctx.timing = _computed_timing(timing_from, ctx.timing)
    df.to_csv(out / "results.csv.gz", index=False)  # the raw rows, compressed
    tables, figs = _analyse(df, cfg, out, ctx)
    tables["provenance"] = pd.DataFrame(provenance)
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    meta = {
        "config": f"`{config}`" + (" (`--quick`)" if quick else ""),
        "datasets": ", ".join(cfg.datasets),
        "ε grid / δ": f"{', '.join(f'{e:g}' for e in cfg.epsilons)} / {cfg.delta:g}",
        "seeds (tuning seeds)": f"{cfg.seeds} ({cfg.tune_seeds})",
        "grid points per tuned learner": f"{cfg.grid_points or 'not fixed'} "
        f"({', '.join(cfg.learners)})",
        "tuning": cfg.tuning,
        "processes": str(cfg.processes),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "wall time (this invocation)": f"{time.perf_counter() - t0:.1f} s",
    }
    path = report.write(out, cfg, tables, figs, meta)
    if (out / "distributed.md").exists():
        # Their own command's section (distributed_noise.py), kept: attached again.
        from fedpriv.experiments.distributed_noise import attach

        attach(path, (out / "distributed.md").read_text(encoding="utf-8"))
    log.info("report: %s (%s)", path, meta["wall time (this invocation)"])
    return path


def runnable(cfg):
    """``cfg`` without the learners whose optional dependency is missing (reason logged)."""
    if "dp_ebm" in cfg.learners and not dp_ebm.available():
        log.warning("dp_ebm skipped: %s", dp_ebm.missing_reason())
        cfg = dataclasses.replace(cfg, learners=tuple(m for m in cfg.learners if m != "dp_ebm"))
    return cfg


def _reused(
    df: pd.DataFrame, earlier: pd.DataFrame, ran: tuple[str, ...], wanted: tuple[str, ...]
) -> tuple[pd.DataFrame, list[str]]:
    """``df`` plus the rows of every ``wanted`` stage not ``ran``, taken from ``earlier``."""
    kept = [s for s in wanted if s not in ran]
    row_stages = {r for s in kept for r in ROW_STAGES.get(s, (s,))}
    old = earlier[earlier["stage"].isin(row_stages)]
    log.info("reused %d rows of stages %s", len(old), kept)
    return pd.concat([df, old], ignore_index=True), kept


def reused_selection(earlier: pd.DataFrame, cfg) -> dict[tuple[str, float, str], dict]:
    """The main stage's selected params per (dataset, ε, learner) in an earlier run's rows.

    The rows keep each configuration's label; it is matched back to the one grid point
    of ``cfg`` that has it (a label that matches none, or two, raises: the grid changed).
    """
    sel = earlier[(earlier["stage"] == "main") & (earlier["variant"] == "selected")]
    chosen = {}
    for (d, e, m), g in sel.groupby(["dataset", "epsilon", "learner"]):
        labels = set(g["config"])
        points = [p for p in cfg.grid(m).configs() if label(m, p) in labels]
        if len(labels) != 1 or len(points) != 1:
            raise ValueError(
                f"the earlier selection of ({d}, ε {e:g}, {m}) is {sorted(labels)}, "
                f"which matches {len(points)} points of this config's grid (allowed: 1)"
            )
        chosen[(d, float(e), m)] = points[0]
    log.info("reused the main stage's selection of %d cells", len(chosen))
    return chosen


def _reused_timing(results: Path, kept: list[str]) -> list[dict]:
    """The earlier run's timing rows of the ``kept`` stages (its ``timing.csv``), marked."""
    path = results.parent / "timing.csv"
    if not path.exists():
        return []
    old = pd.read_csv(path)
    kept = [s for s in kept if s != "tstar"]  # an analysis, recomputed from the sweep rows
    # The main stage's timing rows are its tuning and its evaluation.
    names = {n for s in kept for n in (("tune", "evaluate") if s == "main" else (s,))}
    old = old[old["stage"].str.split(" ").str[0].isin(names)]
    return [{**r, "stage": f"{r['stage']} (earlier run)"} for r in old.to_dict("records")]


def _computed_timing(path: Path, timing: list[dict]) -> list[dict]:
    """``timing`` with its cached stages' rows replaced by ``path``'s (the computing run)."""
    old = {r["stage"]: r for r in pd.read_csv(path).to_dict("records")}
    return [
        {**old[r["stage"]], "stage": f"{r['stage']} (computing run)"}
        if r["stage"] in old and "(earlier run)" not in r["stage"]
        else r
        for r in timing
    ]


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
        tables["targets"] = targets.checks(df)
        tables["budget"] = sections.budget(df)
        tables["fit_time"] = sections.fit_time(df)
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
    ap.add_argument("--stages", nargs="+", default=None, help="run only these stages")
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="an earlier results.csv.gz: the rows of the stages not run come from it",
    )
    ap.add_argument("--reuse-label", default=None, help="how the report names --reuse")
    ap.add_argument("--run-label", default=None, help="how the report names this run")
    ap.add_argument(
        "--timing-from",
        type=Path,
        default=None,
        help="timing.csv of the run that computed the cached cells (its wall times)",
    )
    args = ap.parse_args(argv)
    logs.configure(tag="benchmark")
    out = args.out
    if out is None:
        name = load(args.config, quick=args.quick).name
        out = Path("experiments/reports") / (f"{name}-quick" if args.quick else name)
    run(
        args.config,
        quick=args.quick,
        out=out,
        processes=args.processes,
        stages_to_run=None if args.stages is None else tuple(args.stages),
        reuse=args.reuse,
        reuse_label=args.reuse_label,
        timing_from=args.timing_from,
        run_label=args.run_label,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
