"""Empirical privacy audit of every learner end to end, and the cost of the secure sampler.

For each learner (boosting, DP-EBM and its group round, bdpe_α, DP-SGD
logistic and MLP, Lumberjack, the random forest in modes ``all`` and
``disjoint`` with Gaussian or Laplace leaves; :mod:`fedpriv.experiments.audit.learners`)
it measures the Clopper–Pearson lower bound ε̂ of

* the honest learner (fresh OS-entropy keys),
* its broken twin (noise cut or exact leaf counts; the ledger still claims ε),
* the attacker of docs/explanation/architecture.md §1, who subtracts its seed
  replay, against secret keys and against debug mode (``SecretKey.from_public_seed``),

then bootstraps how reliably the CI-sized audits refute the twins, traces the
audit's power on DP-SGD (noise / 2, 3, 4), reads the exact counts still held
by released Lumberjack models, and times ``GaussianMechanism.apply`` with
ChaCha20 + grid rounding against ``x + rng.normal`` with PCG64. Outputs in
``OUT`` (default ``experiments/reports/audit[-quick]``): ``audit.csv``,
``reliability.csv``, ``power.csv``, ``leaks.csv``, ``sampler_cost.csv`` and
``report.md``.

Usage::

    python -m fedpriv.experiments.audit_learners [--quick] [--out DIR] [--learners NAME ...]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from fedpriv.experiments.audit.auditing import AuditOutcome, audit_learner
from fedpriv.experiments.audit.learners import CI_TRIALS, all_audits, dpsgd_audit
from fedpriv.experiments.audit.reliability import bootstrap_failure_rate
from fedpriv.experiments.audit.report import write_report
from fedpriv.experiments.audit.runs import Run
from fedpriv.experiments.audit.sampler_cost import sampler_cost

from fedpriv import logs

log = logs.get_logger(__name__)
DEFAULT_OUT = Path("experiments/reports/audit")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How much of everything to run."""

    n_trials: int
    resamples: int
    power_factors: tuple[float, ...]
    sampler_seconds: float


FULL = Plan(n_trials=2000, resamples=3000, power_factors=(2.0, 3.0, 4.0), sampler_seconds=0.2)
QUICK = Plan(n_trials=200, resamples=200, power_factors=(), sampler_seconds=0.01)


def leaf_counts_statistic(audit):
    """The exact class-1 count of the canary's leaf, if the released trees still hold it."""
    x = audit.data.canary_x[None, :]

    def statistic(run: Run) -> float:
        trees = run.model.trees
        if not all(getattr(t, "leaf_counts", None) is not None for t in trees):
            return float("nan")
        return float(sum(t.leaf_counts[t.apply(x)[0], 1] for t in trees))

    return statistic


def _row(o: AuditOutcome, column: str, twin: str) -> dict:
    return {
        "learner": o.learner,
        "column": column,
        "twin": twin,
        "epsilon": o.epsilon,
        "delta": o.delta,
        "epsilon_hat": o.epsilon_hat,
        "n_trials": o.scores.n_trials,
        "keys": o.keys,
        "hits": o.result.hits,
        "hits_neighbour": o.result.hits_neighbour,
        "n_evaluation": o.result.n_evaluation,
        "threshold": o.result.threshold,
        "shift": o.scores.shift(),
        "seconds": o.seconds,
    }


def run(plan: Plan, names: list[str] | None) -> dict[str, pd.DataFrame]:
    """Every audit of ``plan``; returns the report's tables."""
    rows, reliability, leaks, timing = [], [], [], []
    for audit in all_audits():
        if names and audit.name not in names:
            continue
        t0 = time.perf_counter()
        n = plan.n_trials
        extra = {"leaf_counts": leaf_counts_statistic(audit)} if audit.name == "lumberjack" else {}
        replays: dict[int, float] = {}  # the §1 replay of a seed: one fit for both audits
        honest = audit_learner(
            audit, n_trials=n, keys="fresh", section1=True, replays=replays, extra=extra
        )
        # The twin on plain sums where they release what the secure sums do (central
        # noise): the same draws at a third to a half of the cost (LearnerAudit.fit).
        plain = audit.plain_sums_release_the_same
        twin = audit_learner(
            audit, n_trials=n, twin=True, keys="fresh", secure_aggregation=not plain
        )["plain"]
        debug = audit_learner(audit, n_trials=n, keys="debug", section1=True, replays=replays)
        for column, o in (
            ("honest", honest["plain"]),
            ("twin", twin),
            ("section1_secret", honest["section1"]),
            ("section1_debug", debug["section1"]),
            ("debug_plain", debug["plain"]),  # debug mode, attacker without the replay
        ):
            rows.append({**_row(o, column, audit.twin), "ci_trials": CI_TRIALS[audit.name]})
            log.info("%s %s: ε̂ = %.3f (ε = %g)", audit.name, column, o.epsilon_hat, o.epsilon)
        if "leaf_counts" in honest:
            o = honest["leaf_counts"]
            readable = not np.isnan(o.scores.without).any()
            leaks.append(
                {
                    "learner": audit.name,
                    "what the attacker reads": "model.trees[k].leaf_counts",
                    "trials / side": n,
                    "ε claimed": audit.epsilon,
                    "ε̂": o.epsilon_hat if readable else "n/a",
                }
            )
        ci = CI_TRIALS[audit.name]
        failures, hats = bootstrap_failure_rate(
            twin.scores,
            n_trials=min(ci, n),
            epsilon=audit.epsilon,
            delta=audit.delta,
            resamples=plan.resamples,
            rng=np.random.default_rng(0),
        )
        reliability.append(
            {
                "learner": audit.name,
                "broken twin": audit.twin,
                "CI trials / side": ci,
                "resamples": plan.resamples,
                "P(ε̂ ≤ ε)": failures,
                "min ε̂": hats.min(),
                "0.1 % quantile ε̂": np.quantile(hats, 1e-3),
                "median ε̂": np.median(hats),
            }
        )
        timing.append(
            {"learner": audit.name, "seconds": time.perf_counter() - t0, "trials / side": n}
        )
    power = []
    for factor in plan.power_factors:
        audit = dpsgd_audit("logistic", twin_factor=factor)
        o = audit_learner(
            audit, n_trials=plan.n_trials, twin=True, keys="fresh", secure_aggregation=False
        )["plain"]
        power.append(
            {
                "twin": audit.twin,
                "trials / side": plan.n_trials,
                "ε claimed": audit.epsilon,
                "μ": o.scores.shift(),
                "ε̂": o.epsilon_hat,
            }
        )
    t0 = time.perf_counter()
    sampler = pd.DataFrame(sampler_cost(min_seconds=plan.sampler_seconds))
    timing.append({"learner": "sampler cost", "seconds": time.perf_counter() - t0})
    sampler.columns = [
        "coordinates",
        "secure (µs)",
        "old PCG64 (µs)",
        "ChaCha20 only (µs)",
        "secure / old",
        "ChaCha20 / old",
    ]
    return {
        "results": pd.DataFrame(rows),
        "reliability": pd.DataFrame(reliability),
        "power": pd.DataFrame(power, columns=["twin", "trials / side", "ε claimed", "μ", "ε̂"]),
        "extra": pd.DataFrame(leaks),
        "sampler": sampler,
        "timing": pd.DataFrame(timing),
    }


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 trials, no power curve")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--learners", nargs="*", default=None, help="subset of learner names")
    args = parser.parse_args(argv)
    logs.configure(tag="audit_learners")
    plan = QUICK if args.quick else FULL
    out = args.out or Path(f"{DEFAULT_OUT}{'-quick' if args.quick else ''}")
    t0 = time.perf_counter()
    tables = run(plan, args.learners)
    meta = {
        "command": " ".join(
            [
                "python -m fedpriv.experiments.audit_learners",
                *(sys.argv[1:] if argv is None else argv),
            ]
        ),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "seconds": time.perf_counter() - t0,
        "timing": tables.pop("timing"),
    }
    path = write_report(out, meta=meta, **tables)
    log.info("wrote %s", path)
    return path


if __name__ == "__main__":
    main()
