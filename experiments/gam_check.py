"""DP-EBM (``dp_gam``) against boosting and DP-SGD logistic regression: test AUC and Brier.

Each cell (dataset, ε, learner) is fitted with the in-process estimator on
the training split, once per secret key (subkeys of the process key,
:mod:`fedpriv.experiments.keys`), and scored on the test split: mean ± sd of AUC and
Brier over the keys, next to the base-rate Brier (predicting the training
class rates; with C > 2 classes the multiclass Brier and macro AUC).
``--grid`` sweeps dp_gam's settings instead, e.g. with and without pair terms
(``interactions``).

Usage::

    python -m fedpriv.experiments.gam_check                      # the report's table
    python -m fedpriv.experiments.gam_check --keys 5 --learners dp_gam
    python -m fedpriv.experiments.gam_check --grid rounds=29,43 lam=2.5,5 --cells adult:0.5
    python -m fedpriv.experiments.gam_check --keys 5 --cells adult:0.5,adult:2 --grid interactions=0,3
    python -m fedpriv.experiments.gam_check --bench --keys 20 --cells diabetes130:0.5 \
        --grid binary_group=0,4 bins=8 lam=20 rounds=40 column_order=gain
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time

import numpy as np
from fedpriv.experiments.keys import secret_key_for
from sklearn.metrics import brier_score_loss, roc_auc_score

from fedpriv.data import load_brfss, load_dataset, load_diabetes130
from fedpriv.evaluation.metrics import base_rate_brier as _base_rate_brier
from fedpriv.evaluation.metrics import multiclass_metrics
from fedpriv.methods import get_method

log = logging.getLogger(__name__)

#: (dataset, ε, target AUC of dp_gam) of the report.
CELLS = (
    ("adult", 0.5, 0.90),
    ("diabetes130", 2.0, 0.63),
    ("brfss", 0.5, 0.817),
    ("brfss", 2.0, 0.823),
    ("brfss", 8.0, 0.824),
)
LEARNERS = ("dp_gam", "boosting", "logistic")
#: Clients of a dataset without natural ones (an IID split), and Diabetes 130-US's K.
NUM_CLIENTS = 5


def load(name: str):
    if name == "diabetes130":
        return load_diabetes130(n_clients=NUM_CLIENTS)
    if name == "brfss":
        return load_brfss()
    if name == "brfss3":
        return load_brfss(multiclass=True)
    return load_dataset(name)


def score(data, learner: str, epsilon: float, key, **settings) -> tuple[float, float]:
    """Test AUC and Brier of one fit (C > 2 classes: macro one-vs-rest AUC and the
    multiclass Brier score, :func:`fedpriv.evaluation.metrics.multiclass_metrics`)."""
    est = get_method(learner).estimator_class(
        epsilon=epsilon, num_clients=NUM_CLIENTS, secret_key=key, **settings
    )
    est.fit(data)
    X, y = data.X[data.split.test], data.y[data.split.test]
    P = est.predict_proba(X)
    if P.shape[1] > 2:
        m = multiclass_metrics(y, P)
        return m["auc"], m["brier"]
    p = P[:, 1]
    return float(roc_auc_score(y, p)), float(brier_score_loss(y, p))


def base_rate_brier(data) -> float:
    """Brier of predicting the training class rates (binary: the positive rate)."""
    return _base_rate_brier(
        data.y[data.split.train], data.y[data.split.test], len(data.schema.target.classes)
    )


def bench_score(name: str, learner: str, epsilon: float, seed: int, **settings):
    """Test AUC and Brier of the matched benchmark's cell (train + val → test, its
    partition and its key for ``seed``): :func:`fedpriv.experiments.bench.cells.fit_cell`."""
    from fedpriv.experiments.bench.cells import Cell, fit_cell

    cell = Cell.make("fit", name, learner, settings, epsilon=epsilon, delta=1e-5, seed=seed)
    out = fit_cell(cell)
    return out["auc"], out["brier"]


def run_cell(data, learner, epsilon, keys, bench=False, **settings) -> dict:
    t0 = time.perf_counter()
    rows = [
        bench_score(data.name, learner, epsilon, k, **settings)
        if bench
        else score(
            data,
            learner,
            epsilon,
            secret_key_for("gam_check", data.name, repr(epsilon), k),
            **settings,
        )
        for k in range(keys)
    ]
    auc, brier = np.array(rows).T
    return {
        "auc": auc.mean(),
        "auc_sd": auc.std(ddof=1) if keys > 1 else 0.0,
        "brier": brier.mean(),
        "brier_sd": brier.std(ddof=1) if keys > 1 else 0.0,
        "seconds": (time.perf_counter() - t0) / keys,
    }


def _value(v: str):
    """A grid value: true/false, an integer, a float, else the word itself."""
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v) if v.isdigit() else float(v)
    except ValueError:
        return v


def _parse_grid(items: list[str]) -> list[dict]:
    axes = {}
    for item in items:
        key, _, values = item.partition("=")
        axes[key] = [_value(v) for v in values.split(",")]
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=5, help="secret keys per cell")
    ap.add_argument("--learners", default=",".join(LEARNERS))
    ap.add_argument("--cells", default="", help="dataset:epsilon,... (default: the report's)")
    ap.add_argument("--grid", nargs="*", default=[], help="dp_gam settings: key=v1,v2 ...")
    ap.add_argument(
        "--bench",
        action="store_true",
        help="fit the matched benchmark's cells (its split and keys, seeds 0..keys-1)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cells = [(d, e, None) for d, e in (c.split(":") for c in args.cells.split(",") if c)]
    cells = [(d, float(e), t) for d, e, t in cells] or list(CELLS)
    cache = {}
    print("dataset      ε      learner   settings                                AUC (mean ± sd)"
          "     Brier (mean ± sd)   base Brier  s/fit  target")  # fmt: skip
    for name, eps, target in cells:
        data = cache.setdefault(name, load(name))
        base = base_rate_brier(data)
        runs = (
            [("dp_gam", g) for g in _parse_grid(args.grid)]
            if args.grid
            else [(lr, {}) for lr in args.learners.split(",")]
        )
        for learner, settings in runs:
            r = run_cell(data, learner, eps, args.keys, args.bench, **settings)
            text = ",".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
            tgt = "" if target is None or learner != "dp_gam" else f"{target:.3f}"
            print(
                f"{name:12s} {eps:<6g} {learner:9s} {text:39s} {r['auc']:.4f} ± {r['auc_sd']:.4f}"
                f"     {r['brier']:.4f} ± {r['brier_sd']:.4f}     {base:.4f}     "
                f"{r['seconds']:5.1f}  {tgt}",
                flush=True,
            )


if __name__ == "__main__":
    main()
