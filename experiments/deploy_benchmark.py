"""Rounds per minute of a real loopback federation, against empty Flower rounds in the same launch.

Runs ``fedpriv.server.deploy`` (TLS, node authentication, one process per SuperLink,
SuperNode, SuperExec and ClientApp) with ``ping-rounds = T`` empty round
trips timed by the same ServerApp before training, for K = 3 and K = 5 at
T = 10, and once more for K = 3 with the server polling for replies every
3 s, Flower 1.42's own deployment-grid cadence, to show what our 0.1 s
polling (and SuperExecs polling every 0.1 s) buys. SuperNodes themselves
poll every 3 s (not configurable in 1.42) and start one ClientApp process per
message, which bounds every round from below.

Usage::

    python -m fedpriv.experiments.deploy_benchmark [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import numpy as np


def one(k: int, rounds: int, poll: float) -> dict:
    from fedpriv.server.deploy import deploy

    out_dir = tempfile.mkdtemp(prefix="fedpriv-deploy-bench-")
    t0 = time.perf_counter()
    code, out = deploy(
        {
            "num-clients": k,
            "rounds": rounds,
            "ping-rounds": rounds,
            "poll-interval": poll,
            "out-dir": out_dir,
            "timings": True,  # round times are this benchmark's output (an uncertified run)
        },
        quiet=True,
    )
    wall = time.perf_counter() - t0
    if code != 0 or out is None:
        raise SystemExit(f"deployment K={k} failed with exit code {code}")
    comm = json.loads((out / "communication.json").read_text())
    auc = json.loads((out / "metrics.json").read_text())["auc"]
    ours = np.array(comm["round_seconds"])
    empty = np.array(comm["empty_round_seconds"])
    return {
        "k": k,
        "poll": poll,
        "wall": wall,
        "auc": auc,
        "ours": ours.mean(),
        "ours_median": float(np.median(ours)),
        "empty": empty.mean(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args(argv)
    rows = [one(3, args.rounds, 0.1), one(5, args.rounds, 0.1), one(3, args.rounds, 3.0)]
    print(f"loopback deployment, TLS + node auth, DP boosting on BRFSS, T = {args.rounds}")
    print("   K  server poll  our round (median)  empty round  ratio  rounds/min  wall")
    for r in rows:
        print(
            f"  {r['k']:>2}  {r['poll']:>9.1f} s  {r['ours']:7.2f} s ({r['ours_median']:5.2f})"
            f"  {r['empty']:9.2f} s  {r['ours'] / r['empty']:5.2f}"
            f"  {60 / r['ours']:10.1f}  {r['wall']:4.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
