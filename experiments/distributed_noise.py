"""Central vs distributed noise: the matched benchmark's extra rows, the cost per round, the ring.

For each dataset and ε of the matched benchmark, and each learner with a distributed
form (boosting, DP-SGD logistic), the configuration the benchmark selected (its
``results.csv``, stage ``main``) is fitted twice per seed under one secret key:
``noise = "central"`` and ``noise = "distributed"`` (K = 5, one tolerated dropout,
:mod:`fedpriv.privacy.distributed`), both through secure aggregation so the per-round
time compares like with like (the benchmark itself sums in plain, which is the same
sum). Reported: test AUC and ε spent of each, the per-round wall time and its ratio
(target ≤ 1.5×), and the ring's use: bytes per client per round and the headroom
bits the noisy sum needs (:func:`ring_use`).

Usage::

    python -m experiments.distributed_noise [--seeds 5] [--quick] [--out DIR]

Outputs ``distributed.csv`` (one row per fit) and ``distributed.md`` in ``DIR``
(default ``experiments/reports/matched``).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from experiments.bench.learners import dataset, partition
from experiments.keys import secret_key_for
from fedpriv import logs
from fedpriv.evaluation import binary_metrics
from fedpriv.methods import get_method

log = logs.get_logger(__name__)

OUT = Path("experiments/reports/matched")
DATASETS = ("synthetic", "brfss", "diabetes130")
EPSILONS = (0.5, 2.0, 8.0)
LEARNERS = ("boosting", "logistic")
DELTA, K, DROPOUTS = 1e-5, 5, 1
#: The benchmark's short labels back to parameter names (experiments.bench.learners.label).
LONG = {"T": "rounds", "D": "depth", "lr": "learning_rate", "q": "sampling_rate",
        "C": "clip_norm", "h": "hidden"}  # fmt: skip


def selected(results: Path) -> dict[tuple[str, str, float], dict]:
    """The configuration the matched benchmark selected per (dataset, learner, ε)."""
    r = pd.read_csv(results)
    main = r[(r.stage == "main") & (r.metric == "auc") & (r.variant == "selected")
             & r.learner.isin(LEARNERS)]  # fmt: skip
    out = {}
    for (ds, learner, eps), g in main.groupby(["dataset", "learner", "epsilon"]):
        params = {}
        for item in str(g.config.iloc[0]).split():
            k, v = item.split("=")
            k = LONG.get(k, k)
            params[k] = int(v) if k in ("rounds", "depth", "hidden") else float(v)
        out[(ds, learner, float(eps))] = params
    return out


def ring_use(std: float, n_clients: int, max_records: int, record_bound: float) -> dict:
    """The 64-bit ring's use: bits of the largest exact sum, and of the noisy sum at
    10 standard deviations of the survivors' noise (the shares' tail), in ticks of 2^-32."""
    exact = n_clients * record_bound * max_records * 2.0**32
    noisy = exact + 10.0 * std * math.sqrt(n_clients / (n_clients - DROPOUTS)) * 2.0**32
    return {"bits_exact": math.log2(exact), "bits_noisy": math.log2(noisy)}


def fit(ds_name: str, learner: str, params: dict, eps: float, seed: int, noise: str) -> dict:
    ds = dataset(ds_name)
    clf = get_method(learner).estimator_class(
        **params, epsilon=eps, delta=DELTA, seed=seed, num_clients=K, secure_aggregation=True,
        noise=noise, tolerated_dropouts=DROPOUTS,
        secret_key=secret_key_for("distributed", ds_name, learner, repr(eps), seed),
    )  # fmt: skip
    t0 = time.perf_counter()
    clf.fit(ds, part="train", partition=partition(ds_name, "train", K))
    seconds = time.perf_counter() - t0
    X, y = ds.xy("test")
    auc = binary_metrics(y, clf.predict_proba(X)[:, 1])["auc"]
    outcome = clf.run_outcome_
    comm = clf.communication_
    return {
        "dataset": ds_name, "learner": learner, "epsilon": eps, "seed": seed, "noise": noise,
        "auc": auc, "epsilon_spent": clf.epsilon_spent_, "seconds": seconds,
        "rounds": outcome.rounds_planned, "released": outcome.rounds_released,
        "bytes_per_client": float(np.mean(comm.bytes_uploaded)),
        "z": clf.noise_multiplier_,
    }  # fmt: skip


def run(*, seeds: int, quick: bool, out: Path) -> Path:
    picks = selected(out / "results.csv")
    cells = [
        (d, lrn, e, s, noise)
        for d in (DATASETS[:1] if quick else DATASETS)
        for e in (EPSILONS[1:2] if quick else EPSILONS)
        for lrn in LEARNERS
        for s in range(seeds)
        for noise in ("central", "distributed")
    ]
    rows, warm = [], set()
    for d, lrn, e, s, noise in tqdm(cells, desc="central vs distributed", unit="fit"):
        params = dict(picks[(d, lrn, e)])
        if quick:
            params["rounds"] = min(params["rounds"], 40)
        if (d, lrn) not in warm:  # kernels compiled and data encoded before any timing
            for mode in ("central", "distributed"):
                fit(d, lrn, {**params, "rounds": 5}, e, 0, mode)
            warm.add((d, lrn))
        rows.append(fit(d, lrn, params, e, s, noise))
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "distributed.csv", index=False)
    (out / "distributed.md").write_text(report(frame, picks))
    return out / "distributed.md"


def report(frame: pd.DataFrame, picks: dict) -> str:
    """The section: AUC side by side, the per-round cost ratio, the ring."""
    g = frame.groupby(["dataset", "learner", "epsilon", "noise"])
    t = g.agg(auc=("auc", "mean"), sd=("auc", "std"), eps=("epsilon_spent", "max"),
              sec=("seconds", "median"), rounds=("rounds", "first"),
              bytes=("bytes_per_client", "mean")).reset_index()  # fmt: skip
    lines = [
        "# Distributed noise next to central noise (matched benchmark, extra rows)\n",
        "Each row: the configuration the matched benchmark selected for (dataset, learner, ε),",
        f"fitted {frame.seed.nunique()} times per mode under the same secret keys, K = {K},",
        f"δ = {DELTA:g}, secure aggregation in both modes. Distributed: every client adds a",
        f"share inside secure aggregation, sized for K − {DROPOUTS} survivors; ε spent is the",
        "ledger's figure for the survivors' actual noise (all five survived).\n",
        "| dataset | learner | ε | AUC central | AUC distributed | Δ AUC | ε spent central |"
        " ε spent distributed | s/round central | s/round distributed | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for (d, lrn, e), h in t.groupby(["dataset", "learner", "epsilon"]):
        c, x = (h[h.noise == m].iloc[0] for m in ("central", "distributed"))
        pc, px = c.sec / c.rounds, x.sec / x.rounds
        ratios.append(px / pc)
        lines.append(
            f"| {d} | {lrn} | {e:g} | {c.auc:.4f} ± {c.sd:.4f} | {x.auc:.4f} ± {x.sd:.4f} | "
            f"{x.auc - c.auc:+.4f} | {c.eps:.3f} | {x.eps:.3f} | {pc * 1e3:.2f} ms | "
            f"{px * 1e3:.2f} ms | {px / pc:.2f}× |"
        )
    lines += [
        "",
        f"Per-round cost, distributed over central (median fit time / rounds, same run): "
        f"median {np.median(ratios):.2f}×, max {max(ratios):.2f}× (target ≤ 1.5×).\n",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one dataset, one ε, 40 rounds")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logs.configure(tag="distributed")
    path = run(seeds=args.seeds, quick=args.quick, out=args.out)
    log.info("report: %s", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
