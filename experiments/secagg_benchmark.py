"""Secure aggregation's cost: fedpriv's shim against the plain sum and Flower's SecAgg+.

    python -m fedpriv.experiments.secagg_benchmark            # the full grid, ≤ 45 min
    python -m fedpriv.experiments.secagg_benchmark --ks 10 --lengths 64   # one K, one L

For K ∈ {10, 100, 1000} clients, vector lengths L ∈ {64, 10⁴, 10⁵} and no dropouts or
10 % of the clients dropping after the key exchange (before their masked input), each
cell sums one vector per client with one system:

* ``plain``: fedpriv's plain ring sum (``secure_aggregation=False``);
* ``fedpriv``: fedpriv's shim (:mod:`experiments.secagg_bench_fedpriv`): keys once per
  run, then one round (masked input, signed survivor list, unmask);
* ``flower``: Flower 1.42's ``SecAggPlusWorkflow`` with its client mod
  ``secaggplus_mod`` (:mod:`experiments.secagg_bench_flower`), which re-keys every
  round: its setup stages (setup, share keys) are part of each round.

Both secure systems use fedpriv's SecAgg+ graph parameters at each K
(:func:`fedpriv.federation.secagg_graph.choose_parameters` through
:meth:`SecAggConfig.graph_parameters`: degree k, threshold t): Flower gets
``num_shares = k + 1`` (its neighbourhoods include the node) and
``reconstruction_threshold = t``; below the sparse graph's range (no k) both use the
complete graph with fedpriv's strict majority t.

Each cell runs in its own process under a limit of ``--limit`` CPU seconds (a watchdog
thread in the cell's process), an
address-space limit of ``--memory`` GB and a wall limit of ``--wall`` seconds; a cell over
one is reported "stopped: …", and the same system's cells with K, L and dropout all at
least as large are not run (reported "skipped"). A cell whose sum differs from the plain
sum (fedpriv: bit for bit; Flower: beyond |S| quantisation steps) fails: "error".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fedpriv.experiments import secagg_bench_fedpriv as fp
from fedpriv.experiments import secagg_bench_flower as fl

from fedpriv.federation.secagg import SecAggConfig

log = logging.getLogger(__name__)
OUT = Path(__file__).parent / "reports" / "secagg_benchmark"
SYSTEMS = ("plain", "fedpriv", "flower")
KS, LENGTHS, DROPOUTS = (10, 100, 1000), (64, 10_000, 100_000), (0.0, 0.1)


class AggregateMismatch(AssertionError):
    """A secure sum that is not the plain sum: the benchmark of a wrong protocol."""


class Vectors(Mapping):
    """Client u's vector, uniform in [−1, 1]^L, drawn on access from (seed, u): the K × L
    inputs never sit in memory at once."""

    def __init__(self, k: int, length: int, seed: int) -> None:
        self.k, self.length, self.seed = k, length, seed

    def __getitem__(self, u: int) -> np.ndarray:
        if not 0 <= u < self.k:
            raise KeyError(u)
        return np.random.default_rng([self.seed, u]).uniform(-1.0, 1.0, self.length)

    def __iter__(self):
        return iter(range(self.k))

    def __len__(self) -> int:
        return self.k


@dataclass(frozen=True, kw_only=True)
class Cell:
    system: str
    k: int
    length: int
    dropout: float

    @property
    def key(self) -> str:
        return f"{self.system},{self.k},{self.length},{self.dropout:g}"

    @classmethod
    def of(cls, key: str) -> Cell:
        s, k, n, d = key.split(",")
        return cls(system=s, k=int(k), length=int(n), dropout=float(d))

    def covers(self, other: Cell) -> bool:
        """Whether ``other`` is at least as large in K, L and dropout (same system)."""
        return (
            other.system == self.system and other.k >= self.k
            and other.length >= self.length and other.dropout >= self.dropout
        )  # fmt: skip


def parameters(k: int, config: SecAggConfig | None = None) -> tuple[int | None, int]:
    """fedpriv's (degree, threshold) at K clients: SecAgg+'s graph, or (None, strict
    majority of K) where the complete graph is used."""
    config = config or SecAggConfig()
    p = config.graph_parameters(k)
    if p is None:
        return None, config.effective_threshold(k)
    return p.degree, config.neighbourhood_threshold(p)


def flower_params(k: int) -> fl.FlowerParams:
    """Flower's SecAgg+ at fedpriv's (k, t): ``num_shares = k + 1`` (complete graph: K)."""
    degree, t = parameters(k)
    return fl.FlowerParams(num_shares=k if degree is None else degree + 1,
                           reconstruction_threshold=t)  # fmt: skip


def dropped(k: int, dropout: float, seed: int) -> list[int]:
    """⌊dropout·K⌋ clients, the same for every system at (K, dropout, seed)."""
    n = int(np.floor(dropout * k + 1e-9))
    return sorted(np.random.default_rng([seed, k]).choice(k, size=n, replace=False).tolist())


def run_cell(cell: Cell, seed: int = 0) -> dict:
    """One cell in this process: its costs, its sum checked against the plain sum."""
    xs, lost = Vectors(cell.k, cell.length, seed), dropped(cell.k, cell.dropout, seed)
    survivors = [u for u in range(cell.k) if u not in set(lost)]
    degree, t = parameters(cell.k)
    if cell.system == "flower":
        params = flower_params(cell.k)
        out = fl.run_flower(xs, lost, params)
        exact = np.zeros(cell.length)
        for u in survivors:
            exact += xs[u]
        tolerance = len(survivors) * params.step + 1e-9 * len(survivors)
        out.update(degree=params.num_shares - 1, threshold=params.reconstruction_threshold)
    else:
        out = (fp.run_plain if cell.system == "plain" else fp.run_fedpriv)(xs, lost)
        exact, tolerance = out.pop("exact"), 0.0
        out.update(degree=degree, threshold=t)
    total = np.asarray(out.pop("total"))
    err = float(np.max(np.abs(total - exact))) if total.shape == exact.shape else np.inf
    if not err <= tolerance or out["survivors"] != len(survivors):
        raise AggregateMismatch(
            f"{cell.key}: sum off the plain sum by {err:.3g} (tolerance {tolerance:.3g}) "
            f"over {out['survivors']} survivors ({len(survivors)} expected)"
        )
    return {**out, "max_abs_error": err, "tolerance": tolerance, "status": "ok"}


STOPPED = 75  # a cell's exit status when its watchdog stops it at the CPU limit


def _limits(memory_gb: float):
    def apply() -> None:
        size = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return apply


def watchdog(limit: float, every: float = 0.5) -> None:
    """Exit with :data:`STOPPED` once this process has used ``limit`` CPU seconds.

    A thread rather than ``RLIMIT_CPU``: under that rlimit this machine's kernel
    reports ``process_time`` at tick granularity, too coarse for the small cells.
    """

    def watch() -> None:
        while time.process_time() < limit:
            time.sleep(every)
        os._exit(STOPPED)

    threading.Thread(target=watch, daemon=True).start()


def launch(cell: Cell, *, seed: int, limit: float, memory_gb: float, wall: float) -> dict:
    """Run ``cell`` in a child process under the limits; its row (status and costs)."""
    cmd = [sys.executable, "-m", "fedpriv.experiments.secagg_benchmark", "--cell", cell.key,
           "--seed", str(seed), "--limit", str(limit)]  # fmt: skip
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}  # fmt: skip
    before, t0 = os.getloadavg()[0], time.perf_counter()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = {"system": cell.system, "K": cell.k, "L": cell.length, "dropout": cell.dropout}
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=wall,
            preexec_fn=_limits(memory_gb),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        proc = None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    row.update(
        wall_s=time.perf_counter() - t0,
        process_cpu_s=usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime,
        load_before=before, load_after=os.getloadavg()[0],
    )  # fmt: skip
    if proc is None:
        return {**row, "status": f"stopped: wall limit ({wall:g} s)"}
    if proc.returncode == STOPPED:
        return {**row, "status": f"stopped: limit ({limit:g} s CPU)"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        if "MemoryError" in proc.stderr or "Cannot allocate" in proc.stderr:
            return {**row, "status": f"stopped: memory ({memory_gb:g} GB)"}
        return {**row, "status": f"error: {tail}"}
    return {**row, **json.loads(lines[-1])}


def grid(ks, lengths, dropouts, systems) -> list[Cell]:
    """Cells in the order they run: small K first, so a stop skips what it covers."""
    return [
        Cell(system=s, k=k, length=n, dropout=d)
        for k in ks for d in dropouts for n in lengths for s in systems
    ]  # fmt: skip


def run_grid(
    cells, *, seed: int, limit: float, memory_gb: float, wall: float, out: Path,
    done: Mapping[str, dict] | None = None,
) -> list[dict]:  # fmt: skip
    """Run every cell (skipping those a stopped cell covers), writing rows as they come;
    a cell in ``done`` (an earlier run's rows by cell key, same seed) that ran is reused."""
    rows, stops, done = [], [], done or {}
    for cell in cells:
        stop = next((s for s in stops if s.covers(cell)), None)
        if done.get(cell.key, {}).get("status") == "ok":
            row = done[cell.key]
        elif stop is not None:
            row = {"system": cell.system, "K": cell.k, "L": cell.length, "dropout": cell.dropout,
                   "status": f"skipped: {stop.key} stopped"}  # fmt: skip
        else:
            row = launch(cell, seed=seed, limit=limit, memory_gb=memory_gb, wall=wall)
            if row["status"].startswith("stopped"):
                stops.append(cell)
        log.info("%s: %s", cell.key, row["status"])
        rows.append(row)
        out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", help="run one cell in this process (system,K,L,dropout)")
    ap.add_argument("--ks", type=int, nargs="+", default=list(KS))
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--dropouts", type=float, nargs="+", default=list(DROPOUTS))
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--limit", type=float, default=300.0, help="CPU seconds per cell")
    ap.add_argument("--memory", type=float, default=6.0, help="GB of address space per cell")
    ap.add_argument("--wall", type=float, default=1800.0, help="wall seconds per cell")
    ap.add_argument("--resume", action="store_true", help="reuse the cells <out>.jsonl ran")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the report from <out>.jsonl and <out>.meta.json")  # fmt: skip
    args = ap.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    if args.cell:
        watchdog(args.limit)
        row = run_cell(Cell.of(args.cell), seed=args.seed)
        print(json.dumps(row))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from fedpriv.experiments.secagg_bench_report import write_report

    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta_path = args.out.with_suffix(".meta.json")
    if args.report_only:
        rows = [json.loads(ln) for ln in args.out.with_suffix(".jsonl").read_text().splitlines()]
        write_report(rows, json.loads(meta_path.read_text()), args.out)
        return 0
    cells = grid(args.ks, args.lengths, args.dropouts, args.systems)
    t0, load0 = time.perf_counter(), os.getloadavg()
    old = args.out.with_suffix(".jsonl")
    done = [json.loads(ln) for ln in old.read_text().splitlines()] if args.resume else []
    rows = run_grid(
        cells, seed=args.seed, limit=args.limit, memory_gb=args.memory, wall=args.wall,
        out=args.out, done={Cell(system=r["system"], k=r["K"], length=r["L"],
                                 dropout=r["dropout"]).key: r for r in done},
    )  # fmt: skip
    meta = {"limit": args.limit, "memory_gb": args.memory, "seed": args.seed, "wall": args.wall,
            "wall_s": time.perf_counter() - t0, "load_start": load0,
            "load_end": os.getloadavg(), "cpus": os.cpu_count()}  # fmt: skip
    meta_path.write_text(json.dumps(meta))
    write_report(rows, meta, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
