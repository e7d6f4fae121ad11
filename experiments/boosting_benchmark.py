"""DP federated boosting: speed against scikit-learn, utility against the papers.

``--speed``   in-process fit of T = 75, depth 5 on the synthetic task (all 4,800
              rows, K = 5 Dirichlet(0.5) clients), in ``--processes`` fresh
              interpreters (default 5), with and without the
              secure-aggregation shim, client work per 1,000 records per round,
              and a same-run ratio against scikit-learn's
              ``HistGradientBoostingClassifier(max_iter=75, max_depth=5)``.
``--utility`` test AUC over ``--seeds`` seeds with the paper's selected settings
              (depth 5, lr 0.4, q 0.05), trained on the whole 80 % (train + val,
              as the paper): BRFSS (T = 25/50/50) and 130-US (T = 25/75/150) at
              ε ∈ {0.5, 2, 8}; Adult at ε ∈ {0.5, 1, 2, 4, 8}
              with T and depth tuned per budget on the validation split, next to
              the public DP-TR figures (100 trees, depth 6). δ = 1e-5 throughout.

Usage::

    python -m fedpriv.experiments.boosting_benchmark --speed
    python -m fedpriv.experiments.boosting_benchmark --utility --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

PAPER = {  # benchmark paper, Table 6 (DP boosting column), ε = 0.5 / 2 / 8
    "brfss": {0.5: 0.796, 2.0: 0.811, 8.0: 0.814},
    "diabetes130": {0.5: 0.572, 2.0: 0.587, 8.0: 0.600},
}
ROUNDS = {"brfss": {0.5: 25, 2.0: 50, 8.0: 50}, "diabetes130": {0.5: 25, 2.0: 75, 8.0: 150}}
#: The paper's algorithm: λ = 1 (no noise-relative λ) and margin 0 (no intercept round).
PAPER_ALGORITHM = {"lam": 0.0, "intercept": False}
DPTR_ADULT = {0.5: 0.866, 1.0: 0.880, 2.0: 0.891, 4.0: 0.898, 8.0: 0.903}


def _auc(clf, X, y) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, clf.predict_proba(X)[:, 1]))


def speed_once(repeats: int = 7) -> dict[str, float]:
    """One process's best-of-``repeats`` timings, in seconds (client work in ms/1k/round)."""
    from fedpriv.clients.boosting import BoostingClient
    from fedpriv.experiments.keys import secret_key_for
    from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy
    from sklearn.ensemble import HistGradientBoostingClassifier

    from fedpriv.data import load_synthetic
    from fedpriv.data.partition import dirichlet
    from fedpriv.federation.protocol import make_clients
    from fedpriv.federation.runtime import InProcessRuntime
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger, calibrate_gaussian_noise_multiplier
    from fedpriv.seeding import derive_generator

    ds = load_synthetic()
    X, y = ds.X, ds.y  # the TARGETS.md task: all 4,800 rows
    clients = make_clients(
        X, y, dirichlet(y, n_clients=5, alpha=0.5, rng=derive_generator(0, "speed-partition"))
    )
    cfg = BoostingConfig(rounds=75, depth=5, sampling_rate=0.05)
    calibrate_gaussian_noise_multiplier(  # warm the cache: calibration is reported separately
        target_epsilon=2.0, target_delta=1e-5, sampling_probability=0.05, steps=75
    )

    def fit(**kw) -> float:
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5))
        rt = InProcessRuntime(clients=clients, handler=BoostingClient(), seed=0, **kw)
        t0 = time.perf_counter()
        rt.run(DPBoostingStrategy(cfg), ledger=ledger)
        return time.perf_counter() - t0

    def best(f) -> float:
        f()
        return min(f() for _ in range(repeats))

    t_secure = best(lambda: fit())
    t_plain = best(lambda: fit(secure_aggregation=False))
    t_sklearn = best(
        lambda: _timed(
            lambda: HistGradientBoostingClassifier(
                max_iter=75, max_depth=5, early_stopping=False
            ).fit(X, y)
        )
    )

    # Client work: the handler's answer_many for all clients, per 1,000 records
    # per round; the best of ``repeats`` whole 75-round passes (fresh state each).
    records = sum(c.n for c in clients)

    def client_pass() -> float:
        handler, state, spent = BoostingClient(), {}, 0.0
        strategy = DPBoostingStrategy(BoostingConfig(rounds=75, depth=5))
        strategy.begin(
            n_features=X.shape[1],
            ledger=None,
            rng=np.random.default_rng(0),
            secret_rng=secret_key_for("speed", "boosting").generator("noise"),  # unused: no noise
        )
        rng = np.random.default_rng(1)  # stand-in Poisson samples: only the handler is timed
        while (q := strategy.next_query()) is not None:
            samples = [np.flatnonzero(rng.random(c.n) < 0.05) for c in clients]
            t0 = time.perf_counter()
            replies = handler.answer_many(q, clients, samples, state)
            spent += time.perf_counter() - t0
            strategy.update(q, replies.sum(axis=0))
        return spent

    spent = best(client_pass)
    return {
        "secure": t_secure,
        "plain": t_plain,
        "sklearn": t_sklearn,
        "client_ms_per_1000": spent / 75 / records * 1000 * 1e3,
    }


def speed(processes: int = 5) -> None:
    """:func:`speed_once` in ``processes`` fresh interpreters, one after the other.

    On the shared VMs this runs on, a whole process is sometimes ~1.8x slower
    than the next one (every part alike, sklearn included), so one process's
    best-of-N is not enough: each process's figures and ratios are printed,
    then the best and the median over processes.
    """
    import json
    import subprocess

    rows = []
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, "-m", "fedpriv.experiments.boosting_benchmark", "--speed-once"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print("synthetic 4,800 rows, K=5 Dirichlet(0.5), T=75, depth 5, ε=2; best of 7 per process")
    print("  process  secure-agg fit  plain-sums fit  sklearn HGB(75)  client ms/1k rec/round")
    for k, r in enumerate(rows):
        print(
            f"  {k:>7}  {r['secure'] * 1e3:8.1f} ms {r['sklearn'] / r['secure']:4.1f}x"
            f"  {r['plain'] * 1e3:7.1f} ms {r['sklearn'] / r['plain']:4.1f}x"
            f"  {r['sklearn'] * 1e3:11.1f} ms  {r['client_ms_per_1000']:18.4f}"
        )
    for label, pick in (("best", min), ("median", statistics.median)):
        print(
            f"  {label:>7}  {pick(r['secure'] for r in rows) * 1e3:8.1f} ms"
            f"        {pick(r['plain'] for r in rows) * 1e3:7.1f} ms"
            f"       {pick(r['sklearn'] for r in rows) * 1e3:11.1f} ms"
            f"  {pick(r['client_ms_per_1000'] for r in rows):18.4f}"
        )
    print("  (Nx = sklearn time / ours, same process)")
    print("  targets: fit <= 25 ms (paper 0.24 s; simple vectorised numpy 52 ms);")
    print("           client work <= 0.03 ms per 1,000 records per round")


def _timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def utility(seeds: int) -> None:
    from fedpriv.server.estimators import DPBoostingClassifier

    from fedpriv.data import load_adult, load_brfss, load_diabetes130

    print(f"test AUC, mean ± sd over {seeds} seeds (depth 5, lr 0.4, q 0.05, δ = 1e-5)")
    for name, loader in (("brfss", load_brfss), ("diabetes130", load_diabetes130)):
        ds = loader()
        Xte, yte = ds.xy("test")
        for eps in (0.5, 2.0, 8.0):
            T = ROUNDS[name][eps]
            aucs = [
                _auc(
                    DPBoostingClassifier(
                        rounds=T, epsilon=eps, seed=s, secure_aggregation=False, **PAPER_ALGORITHM
                    ).fit(ds, part="train+val"),
                    Xte,
                    yte,
                )
                for s in range(seeds)
            ]
            print(
                f"  {name:<12} ε={eps:<4} T={T:<4} AUC {np.mean(aucs):.3f} ± {np.std(aucs):.3f}"
                f"   (paper {PAPER[name][eps]:.3f})",
                flush=True,
            )

    ds = load_adult()
    Xva, yva = ds.xy("val")
    Xte, yte = ds.xy("test")
    grid = [(T, d) for T in (25, 50, 100) for d in (5, 6)]
    for eps in (0.5, 1.0, 2.0, 4.0, 8.0):
        scores = {}
        for T, d in grid:
            fits = [
                DPBoostingClassifier(
                    rounds=T,
                    depth=d,
                    epsilon=eps,
                    seed=s,
                    secure_aggregation=False,
                    **PAPER_ALGORITHM,
                ).fit(ds)
                for s in range(seeds)
            ]
            scores[(T, d)] = (statistics.mean(_auc(f, Xva, yva) for f in fits), fits)
        (T, d), (_, fits) = max(scores.items(), key=lambda kv: kv[1][0])
        aucs = [_auc(f, Xte, yte) for f in fits]
        t0 = time.perf_counter()
        DPBoostingClassifier(rounds=T, depth=d, epsilon=eps, seed=0).fit(ds)
        fit_s = time.perf_counter() - t0
        print(
            f"  adult        ε={eps:<4} T={T:<4} depth {d}  AUC {np.mean(aucs):.3f} ± "
            f"{np.std(aucs):.3f}   (DP-TR {DPTR_ADULT[eps]:.3f}; fit {fit_s:.2f} s)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--speed-once", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--utility", action="store_true")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.speed_once:
        import json

        print(json.dumps(speed_once()))
        return 0
    if not (args.speed or args.utility):
        args.speed = True
    if args.speed:
        speed(args.processes)
    if args.utility:
        utility(args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
