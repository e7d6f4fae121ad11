"""`flwr run` of the default job: wall time and per-round time against an empty Flower round.

Runs the README's main job through ``fedpriv.server.simulate`` with ``ping-rounds``
empty round trips timed by the same ServerApp before training (the same-run
baseline), then times the clients' own work for the same rounds in process.
Target: our round ≤ 1.2 × an empty Flower round + client compute.

Usage::

    python -m fedpriv.experiments.flower_benchmark [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time

import numpy as np

from fedpriv import logs

log = logs.get_logger(__name__)


def client_compute_per_round(s) -> float:
    """Seconds all clients spend answering one round of the run ``s`` (its resolved
    :class:`~fedpriv.federation.settings.RunSettings`; sequential), measured in process
    with the method's own client half."""
    import dataclasses

    from fedpriv.experiments.keys import secret_key_for
    from fedpriv.server.app import build_strategy

    from fedpriv.data import load_for_run
    from fedpriv.federation.protocol import make_clients, poisson_sample

    ds = load_for_run(s.dataset, num_clients=s.num_clients, split_seed=s.split_seed)
    X, y = ds.xy("train")
    clients = make_clients(X, y, ds.client_partition(s.num_clients))
    # The job's own strategy, without noise: only the clients' work is timed.
    strategy = build_strategy(
        dataclasses.replace(s, epsilon=math.inf),
        ds.schema,
        n_records=int(X.shape[0]),
        n_features=int(X.shape[1]),
    )
    strategy.begin(
        n_features=X.shape[1],
        ledger=None,
        rng=np.random.default_rng(0),
        secret_rng=secret_key_for("speed", "flower").generator("noise"),  # unused: no noise
    )
    handler, states, rng, spent = (
        s.method_record.client_handler(),
        [{} for _ in clients],
        secret_key_for("speed", "flower").generator("coins"),
        0.0,
    )
    while (q := strategy.next_query()) is not None:
        total = np.zeros(q.reply_length)
        for c, st in zip(clients, states, strict=True):
            sample = poisson_sample(c.n, q.sampling_rate, rng)
            t0 = time.perf_counter()
            total += handler.answer(q, c, sample, st)
            spent += time.perf_counter() - t0
        strategy.update(q, total)
    return spent / s.rounds


def main(argv: list[str] | None = None) -> int:
    from fedpriv.server.launch import parse_set
    from fedpriv.server.simulate import resolve_simulation, simulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--ping-rounds",
        type=int,
        default=None,
        help="empty rounds timed first (default: as many as training rounds, since both "
        "are quantised by the simulation engine's 0.1 s message loop)",
    )
    args = ap.parse_args(argv)
    logs.configure(tag="flower_benchmark")
    given = parse_set(args.set)
    job = resolve_simulation(given).settings  # the job as the simulation resolves it
    overrides = {
        **given,
        "ping-rounds": args.ping_rounds if args.ping_rounds is not None else job.rounds,
        "out-dir": tempfile.mkdtemp(prefix="fedpriv-flower-bench-"),
        "timings": True,  # round times are this benchmark's output (an uncertified run)
    }
    t0 = time.perf_counter()
    code, out = simulate(overrides, quiet=True)
    wall = time.perf_counter() - t0
    if code != 0 or out is None:
        log.error("simulation failed with exit code %d", code)
        return 1
    comm = json.loads((out / "communication.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    run = resolve_simulation(overrides)
    config = run.run_config
    compute = client_compute_per_round(run.settings)
    ours, empty = comm["mean_round_seconds"], comm["mean_empty_round_seconds"]
    budget = 1.2 * empty + compute
    print(
        f"job: {config['dataset']}, K={config['num-clients']}, T={config['rounds']}, "
        f"ε={config['epsilon']}; AUC {metrics['auc']:.4f}"
    )
    print(f"wall time of the whole command      : {wall:6.1f} s")
    print(
        f"mean fedpriv round                  : {ours * 1e3:6.1f} ms "
        f"(median {comm['median_round_seconds'] * 1e3:.1f} ms)"
    )
    print(
        f"mean empty Flower round (same run)  : {empty * 1e3:6.1f} ms  (ratio {ours / empty:.2f}x)"
    )
    per_round = np.array(comm["round_seconds"])
    slow = np.flatnonzero(per_round > 1.5 * empty)
    print(
        f"rounds over 1.5 x empty             : {slow.size} of {per_round.size} "
        f"(rounds {', '.join(str(i + 1) for i in slow[:12])}{' ...' if slow.size > 12 else ''})"
    )
    print(f"client compute per round (in process): {compute * 1e3:6.1f} ms")
    print(
        f"target 1.2 x empty + compute        : {budget * 1e3:6.1f} ms -> "
        f"{'met' if ours <= budget else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
