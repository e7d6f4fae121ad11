"""DP forests: Lumberjack and the fully random forest against diffprivlib and scikit-learn.

``--speed``    each fit alone in a fresh interpreter (wall time and peak RSS of that
               process): Lumberjack on Adult (30 trees, depth 49, ε = 1) and on
               BRFSS (48,000 rows, 50 trees), and diffprivlib's
               ``RandomForestClassifier`` on Adult at depth 15 and 17 (20 trees),
               printed as ratios against Lumberjack from the same run.
``--evaluate`` Adult over ``--seeds`` seeds at ε ∈ {0.5, 1, 2, 4, 8} (δ = 1e-6):
               Lumberjack (30 trees, depth 49, ε₁ = 0.75ε; Gaussian leaf
               counts pooled over the trees, and the paper's EM leaves); the fully random
               forest and diffprivlib, each tuned per ε on the validation split
               (forest: depth × leaf mechanism × budget mode; diffprivlib: trees
               {5, 10, 20} × depth {5, 10, 15}); scikit-learn ExtraTrees and a
               DecisionTree without privacy. Accuracy and AUC, mean ± sd; fits use
               train + val (80 %). Then Lumberjack's AUC on BRFSS and 130-US at
               ε ∈ {0.5, 2, 8}. Tuning on private validation data is not accounted
               (as in the paper).

diffprivlib 0.6.6 imports ``DOUBLE`` and ``DTYPE`` from ``sklearn.tree._tree``,
which scikit-learn 1.9 removed; :func:`import_diffprivlib` restores the two
aliases (float64, float32) before importing it. Install it with
``pip install -e '.[baselines]'``.

Usage::

    python -m fedpriv.experiments.forest_benchmark --speed
    python -m fedpriv.experiments.forest_benchmark --evaluate --seeds 5
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


def import_diffprivlib():
    import sklearn.tree._tree as sk_tree

    # Aliases diffprivlib 0.6.6 expects (removed in scikit-learn 1.9).
    for name, value in (("DOUBLE", np.float64), ("DTYPE", np.float32)):
        if not hasattr(sk_tree, name):
            setattr(sk_tree, name, value)
    from diffprivlib.models import RandomForestClassifier

    return RandomForestClassifier


def ordinal_bounds(schema) -> tuple[np.ndarray, np.ndarray]:
    """Public bounds of the ordinal view, from the schema (diffprivlib needs them)."""
    from fedpriv.data.schema import CategoricalColumn, Missing

    lo, hi = [], []
    for col in schema.columns:
        if isinstance(col, CategoricalColumn):
            # A value outside a domain without a missing level is encoded −1.
            lo.append(0.0 if col.missing is Missing.CATEGORY else -1.0)
            hi.append(float(col.n_levels - 1))
        else:
            lo.append(0.0)
            hi.append(1.0)
    return np.array(lo), np.array(hi)


def _scores(proba, y) -> tuple[float, float]:
    from sklearn.metrics import roc_auc_score

    return float(np.mean((proba > 0.5) == y)), float(roc_auc_score(y, proba))


# -- speed ------------------------------------------------------------------------
def _one_fit(kind: str) -> dict:
    from fedpriv.data import load_adult, load_brfss

    if kind.startswith("lumberjack"):
        from fedpriv.server.estimators import LumberjackClassifier

        ds, trees = (load_brfss(), 50) if kind == "lumberjack-brfss" else (load_adult(), 30)
        X, y = ds.xy("test")
        t0 = time.perf_counter()
        clf = LumberjackClassifier(trees=trees, epsilon=1.0, seed=0).fit(ds, part="train+val")
        seconds = time.perf_counter() - t0
        proba = clf.predict_proba(X)[:, 1]
    else:
        depth = int(kind.rsplit("-", 1)[1])
        rf = import_diffprivlib()
        ds = load_adult()
        X_tr, y_tr = ds.xy("train+val", ordinal=True)
        X, y = ds.xy("test", ordinal=True)
        t0 = time.perf_counter()
        clf = rf(
            n_estimators=20,
            max_depth=depth,
            epsilon=1.0,
            bounds=ordinal_bounds(ds.schema),
            classes=[0.0, 1.0],
            random_state=0,
        ).fit(X_tr, y_tr)
        seconds = time.perf_counter() - t0
        proba = clf.predict_proba(X)[:, 1]
    acc, auc = _scores(proba, y)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_mb": peak, "accuracy": acc, "auc": auc}


def speed() -> None:
    rows = {}
    for kind in ("lumberjack-adult", "lumberjack-brfss", "diffprivlib-15", "diffprivlib-17"):
        out = subprocess.run(
            [sys.executable, "-m", "fedpriv.experiments.forest_benchmark", "--fit-once", kind],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows[kind] = json.loads(out.strip().splitlines()[-1])
        r = rows[kind]
        print(
            f"  {kind:<18} {r['seconds']:7.1f} s  peak RSS {r['peak_mb']:6.0f} MB  "
            f"accuracy {r['accuracy']:.4f}  AUC {r['auc']:.4f}",
            flush=True,
        )
    lj = rows["lumberjack-adult"]
    for depth in (15, 17):
        d = rows[f"diffprivlib-{depth}"]
        print(
            f"  diffprivlib depth {depth} / Lumberjack depth 49 (Adult): "
            f"{d['seconds'] / lj['seconds']:.2f}x the time, {d['peak_mb'] / lj['peak_mb']:.2f}x "
            "the memory"
        )
    print("  targets: Lumberjack Adult (30 × depth 49) ≤ 20 s and ≤ 1 GB; BRFSS 50 trees ≤ 3 min")


# -- evaluation -------------------------------------------------------------------
def _mean_sd(values) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def evaluate(seeds: int) -> None:
    from fedpriv.server.estimators import DPRandomForestClassifier, LumberjackClassifier
    from sklearn.ensemble import ExtraTreesClassifier
    from sklearn.tree import DecisionTreeClassifier

    from fedpriv.data import load_adult, load_brfss, load_diabetes130

    rf_dpl = import_diffprivlib()
    ds = load_adult()
    X_te, y_te = ds.xy("test")
    O_tr, y_tr = ds.xy("train", ordinal=True)
    O_va, y_va = ds.xy("val", ordinal=True)
    O_all, y_all = ds.xy("train+val", ordinal=True)
    O_te, _ = ds.xy("test", ordinal=True)
    X_va, _ = ds.xy("val")
    bounds = ordinal_bounds(ds.schema)
    print(f"Adult, {seeds} seeds, δ = 1e-6; accuracy | AUC (mean ± sd); majority class .761")
    X_all, _ = ds.xy("train+val")
    for name, model in (
        ("sklearn ExtraTrees (non-private)", ExtraTreesClassifier(n_estimators=100, n_jobs=1)),
        ("sklearn DecisionTree (non-private)", DecisionTreeClassifier()),
    ):
        accs, aucs = [], []
        for s in range(seeds):
            model.set_params(random_state=s).fit(X_all, y_all)
            a, u = _scores(model.predict_proba(X_te)[:, 1], y_te)
            accs.append(a)
            aucs.append(u)
        print(f"  {name:<36} {_mean_sd(accs)} | {_mean_sd(aucs)}", flush=True)
    forest_grid = [
        (d, leaves, mode)
        for d in (4, 6, 8, 10, 12)
        for leaves in ("exponential", "gaussian")
        for mode in ("all", "disjoint")
    ]
    dpl_grid = [(k, d) for k in (5, 10, 20) for d in (5, 10, 15)]
    for eps in EPSILONS:
        cells = {}
        t0 = time.perf_counter()
        fits = [
            LumberjackClassifier(epsilon=eps, seed=s).fit(ds, part="train+val")
            for s in range(seeds)
        ]
        per_fit = (time.perf_counter() - t0) / seeds
        cells["Lumberjack (30 × depth 49)"] = [
            _scores(f.predict_proba(X_te)[:, 1], y_te) for f in fits
        ]
        cells["Lumberjack, paper's EM leaves"] = [
            _scores(
                LumberjackClassifier(epsilon=eps, seed=s, leaf_mechanism="exponential")
                .fit(ds, part="train+val")
                .predict_proba(X_te)[:, 1],
                y_te,
            )
            for s in range(seeds)
        ]
        best = max(
            forest_grid,
            key=lambda g: _scores(
                DPRandomForestClassifier(
                    trees=20, depth=g[0], leaf_mechanism=g[1], mode=g[2], epsilon=eps
                )
                .fit(ds)
                .predict_proba(X_va)[:, 1],
                y_va,
            )[0],
        )
        cells[f"random forest (20 × d{best[0]}, {best[1][:3]}, {best[2]})"] = [
            _scores(
                DPRandomForestClassifier(
                    trees=20,
                    depth=best[0],
                    leaf_mechanism=best[1],
                    mode=best[2],
                    epsilon=eps,
                    seed=s,
                )
                .fit(ds, part="train+val")
                .predict_proba(X_te)[:, 1],
                y_te,
            )
            for s in range(seeds)
        ]

        def dpl(k, d, s, X, y, eps=eps):
            return rf_dpl(
                n_estimators=k,
                max_depth=d,
                epsilon=eps,
                bounds=bounds,
                classes=[0.0, 1.0],
                random_state=s,
            ).fit(X, y)

        k, d = max(
            dpl_grid,
            key=lambda g: _scores(dpl(*g, 0, O_tr, y_tr).predict_proba(O_va)[:, 1], y_va)[0],
        )
        cells[f"diffprivlib RF ({k} × d{d})"] = [
            _scores(dpl(k, d, s, O_all, y_all).predict_proba(O_te)[:, 1], y_te)
            for s in range(seeds)
        ]
        print(f"  ε = {eps:g}  (Lumberjack {per_fit:.1f} s per fit)")
        for name, scores in cells.items():
            accs, aucs = zip(*scores, strict=True)
            print(f"    {name:<34} {_mean_sd(accs)} | {_mean_sd(aucs)}", flush=True)

    print(f"Lumberjack test AUC on the benchmark corpora, {seeds} seeds (30 trees, depth 49)")
    for name, loader in (("brfss", load_brfss), ("diabetes130", load_diabetes130)):
        ds = loader()
        X_te, y_te = ds.xy("test")
        cells = []
        for eps in (0.5, 2.0, 8.0):
            aucs = [
                _scores(
                    LumberjackClassifier(epsilon=eps, seed=s)
                    .fit(ds, part="train+val")
                    .predict_proba(X_te)[:, 1],
                    y_te,
                )[1]
                for s in range(seeds)
            ]
            cells.append(f"ε={eps:g}: {_mean_sd(aucs)}")
        print(f"  {name:<12} {' | '.join(cells)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--fit-once", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--evaluate", action="store_true")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.fit_once:
        print(json.dumps(_one_fit(args.fit_once)))
        return 0
    if not (args.speed or args.evaluate):
        args.speed = True
    if args.speed:
        speed()
    if args.evaluate:
        evaluate(args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
