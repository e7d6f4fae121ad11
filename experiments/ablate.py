"""Participation and heterogeneity ablations: one command per study, one report.

Reproduces §5.6 of the benchmark paper (``../shared/papers/
dp_federated_boosting_vs_dpsgd_benchmark.txt``) with fedpriv's in-process
learners and corrects its accounting:

* ``participation`` — ρ ∈ {1, .5, .25} × Dirichlet α ∈ {.1, .5, 10}, under
  the ``valid``, ``tight`` and ``paper`` participation accountings (Table 10;
  ``paper`` is not a valid guarantee);
* ``remark1`` — ρ = 1, α = .1 vs 10: the partition-invariance of Remark 1;
* ``clients`` — K ∈ {5, 10, 20} and Zipf(1.5) size imbalance at ρ = .5;
* ``shift`` — covariate shift γ ∈ {0, .6, 1.2}: pooled vs within-client AUC.

Each study is one TOML file, ``experiments/configs/ablate_<study>.toml``; its
``[quick]`` table is merged in by ``--quick``. Cells run through the issue-8
runner (:mod:`fedpriv.experiments.bench.cells`): a progress bar, a pool of ≤ 2
spawned processes, and a cache under ``OUT/cache`` keyed by each cell's
content hash, so studies that share cells (``remark1`` and ``participation``
at ρ = 1) compute them once and an interrupted run resumes. Outputs in
``OUT`` (default ``experiments/reports/ablations[-quick]``):
``results_<study>.csv`` and ``results.csv.gz`` (long format, compressed), the study's
tables as CSV, ``fig_<study>.png``, ``section_<study>.md``, and
``report.md`` assembled from every section present.

Usage::

    python -m fedpriv.experiments.ablate {participation,remark1,clients,shift,all}
        [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd
from fedpriv.experiments.ablation import analysis, figures, report, shift, shift_report
from fedpriv.experiments.ablation.cells import AblationCell, execute
from fedpriv.experiments.ablation.config import STUDIES, AblationConfig, config_path, load
from fedpriv.experiments.bench.cells import CellCache, make_pool, run_cells

from fedpriv import logs

log = logs.get_logger(__name__)

DEFAULT_OUT = Path("experiments/reports/ablations")


def plan(cfg: AblationConfig) -> list[AblationCell]:
    """Every cell of the study: the axes' product × learners × seeds, deduplicated."""
    ax = cfg.axes
    cells = []
    for rho, acc, kind, k, gamma in itertools.product(
        ax.participation, ax.accounting, ax.partition, ax.n_clients, ax.covariate_shift
    ):
        for alpha in ax.alpha if kind == "dirichlet" else (None,):
            for m, s in itertools.product(cfg.learners, range(cfg.seeds)):
                cells.append(
                    AblationCell.make(
                        m,
                        cfg.params(m),
                        partition=kind,
                        alpha=alpha,
                        zipf_s=ax.zipf_s,
                        participation=rho,
                        accounting=acc,
                        epsilon=cfg.epsilon,
                        delta=cfg.delta,
                        seed=s,
                        n_rows=cfg.n_rows,
                        n_clients=k,
                        covariate_shift=float(gamma),
                        secure_aggregation=cfg.secure_aggregation,
                    )
                )
    return list(dict.fromkeys(cells))


def _section(cfg: AblationConfig, df: pd.DataFrame, out: Path) -> str:
    """Analyse one study's rows: save its tables, draw its figure, return its section."""
    tables: dict[str, pd.DataFrame] = {}
    if cfg.name == "participation":
        tables["participation"] = analysis.participation_table(df, cfg)
        tables["participation_drops"] = analysis.participation_drops(df)
        fig = figures.participation(tables["participation"], cfg.axes.accounting, out)
        text = report.participation(
            cfg, tables["participation"], tables["participation_drops"], fig
        )
    elif cfg.name == "remark1":
        tables["remark1"] = analysis.remark1_table(df)
        fig = figures.remark1(tables["remark1"], analysis.paper.REMARK1_MAX_DIFF, out)
        text = report.remark1(cfg, tables["remark1"], fig)
    elif cfg.name == "clients":
        tables["clients"] = analysis.summary(df)
        tables["clients_tests"] = analysis.clients_tests(df)
        fig = figures.clients(tables["clients"], out)
        text = report.clients(cfg, tables["clients"], tables["clients_tests"], fig)
    else:
        tables["shift"] = analysis.shift_table(df)
        tables["shift_tests"] = analysis.shift_tests(df)
        gammas = tuple(sorted({*cfg.axes.covariate_shift, *cfg.diagnostic_shifts}))
        tables["shift_data"] = shift.diagnostics(cfg.n_rows, gammas, cfg.axes.n_clients[0])
        fig = figures.shift(tables["shift"], tables["shift_data"], out)
        text = shift_report.section(
            cfg, tables["shift"], tables["shift_tests"], tables["shift_data"], fig
        )
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    return text


def run_study(study: str, *, quick: bool, out: Path, pool, processes: int | None = None) -> dict:
    """Run one study into ``out``; returns its timing record."""
    t0 = time.perf_counter()
    cfg = load(config_path(study), quick=quick)
    cells = plan(cfg)
    cache = CellCache(out / "cache")
    computed = sum(cache.get(c) is None for c in cells)
    res = run_cells(cells, cache, pool, desc=study, runner=execute)
    rows = [r for c in cells for r in analysis.rows_of(study, c, res[c])]
    df = pd.DataFrame(rows, columns=list(analysis.ROW_KEYS))
    df.to_csv(out / f"results_{study}.csv", index=False)
    text = _section(cfg, df, out)
    (out / f"section_{study}.md").write_text(text, encoding="utf-8")
    record = {
        "study": study,
        "config": str(config_path(study).relative_to(Path.cwd()))
        if config_path(study).is_relative_to(Path.cwd())
        else str(config_path(study)),
        "quick": quick,
        "cells": len(cells),
        "computed": computed,
        "wall_seconds": time.perf_counter() - t0,
        "cell_seconds": float(sum(r.get("cell_seconds", 0.0) for r in res.values())),
        "fit_seconds": float(sum(r.get("seconds", 0.0) for r in res.values())),
        "processes": processes or cfg.processes,
    }
    (out / f"timing_{study}.json").write_text(json.dumps(record), encoding="utf-8")
    return record


def assemble(out: Path, *, quick: bool) -> Path:
    """``results.csv.gz`` and ``report.md`` from every study present in ``out``."""
    present = [s for s in STUDIES if (out / f"section_{s}.md").exists()]
    frames = [pd.read_csv(out / f"results_{s}.csv") for s in present]
    if frames:
        pd.concat(frames, ignore_index=True).to_csv(out / "results.csv.gz", index=False)
    timings = pd.DataFrame([json.loads((out / f"timing_{s}.json").read_text()) for s in present])
    cmd = "python -m fedpriv.experiments.ablate <study>" + (" --quick" if quick else "")
    meta = [
        ["command", f"`{cmd}` (configs `experiments/configs/ablate_<study>.toml`)"],
        ["studies", ", ".join(present)],
        [
            "machine",
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        ],
    ]
    parts = [
        "# Participation and heterogeneity ablations (issue 9; benchmark paper §5.6)\n",
        "Generated by `python -m fedpriv.experiments.ablate` from the CSV tables beside this file; "
        "every number below is computed, none is typed. Long-format results: `results.csv.gz`.\n",
        report._table(["item", "value"], meta),
        *[(out / f"section_{s}.md").read_text(encoding="utf-8") for s in present],
        report.timing(timings),
    ]
    path = out / "report.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=[*STUDIES, "all"])
    ap.add_argument("--quick", action="store_true", help="the [quick] subsets (CI smoke run)")
    ap.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}[-quick]")
    ap.add_argument(
        "--processes", type=int, choices=(1, 2), default=None, help="override the configs' pool"
    )
    args = ap.parse_args(argv)
    logs.configure(tag="ablate")
    out = args.out or DEFAULT_OUT.with_name(DEFAULT_OUT.name + ("-quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("absl").setLevel(logging.ERROR)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # inherited by the spawned workers
    studies = list(STUDIES) if args.study == "all" else [args.study]
    procs = args.processes or max(load(config_path(s)).processes for s in studies)
    pool = make_pool(procs)
    t0 = time.perf_counter()
    try:
        for s in studies:
            rec = run_study(s, quick=args.quick, out=out, pool=pool, processes=procs)
            done = f"{rec['cells']} cells ({rec['computed']} computed)"
            log.info("%s: %s in %.1f s", s, done, rec["wall_seconds"])
    finally:
        if pool is not None:
            pool.shutdown()
    path = assemble(out, quick=args.quick)
    log.info("report: %s (%.1f s)", path, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
