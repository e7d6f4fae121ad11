"""DP boosting against the paper: validation and test AUC, Brier against the base rate.

Each cell (dataset, ε, settings) is fitted with the in-process estimator on
the training split, once per secret key (subkeys of the process key,
:mod:`fedpriv.experiments.keys`; public seed = key index), and scored on the
validation and test splits: mean ± sd of AUC, test Brier, the mean predicted
probability and the training base rate p with its Brier p(1 − p)-style score
(predicting p on the test split), and seconds per fit. ``--grid`` sweeps
:class:`fedpriv.strategies.boosting.BoostingConfig` fields (every combination).

Usage::

    python -m fedpriv.experiments.boosting_check --cells brfss:2 --keys 3
    python -m fedpriv.experiments.boosting_check --cells diabetes130:0.5,diabetes130:8 \\
        --grid sampling_rate=0.2,1 depth=3,5 rounds=100 lam=2.5,5,10
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
from fedpriv.experiments.gam_check import NUM_CLIENTS, _parse_grid, base_rate_brier, load
from fedpriv.experiments.keys import secret_key_for
from fedpriv.server.estimators import DPBoostingClassifier
from sklearn.metrics import brier_score_loss, roc_auc_score

#: Benchmark paper, Table 6 (DP boosting), ε = 0.5 / 2 / 8.
PAPER = {
    "brfss": {0.5: 0.796, 2.0: 0.811, 8.0: 0.814},
    "diabetes130": {0.5: 0.572, 2.0: 0.587, 8.0: 0.600},
}
CELLS = tuple((d, e) for d in ("brfss", "diabetes130") for e in (0.5, 2.0, 8.0))


def score(data, epsilon: float, k: int, **settings) -> tuple[float, ...]:
    """(val AUC, test AUC, test Brier, mean test probability, seconds) of one fit."""
    est = DPBoostingClassifier(
        epsilon=epsilon,
        num_clients=NUM_CLIENTS,
        seed=k,
        secure_aggregation=False,
        secret_key=secret_key_for("boosting_check", data.name, repr(epsilon), k),
        **settings,
    )
    t0 = time.perf_counter()
    est.fit(data)
    seconds = time.perf_counter() - t0
    out = []
    for part in (data.split.val, data.split.test):
        p = est.predict_proba(data.X[part])[:, 1]
        out.append((roc_auc_score(data.y[part], p), p))
    yt = data.y[data.split.test]
    p = out[1][1]
    return out[0][0], out[1][0], brier_score_loss(yt, p), float(p.mean()), seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=3, help="secret keys per cell")
    ap.add_argument("--cells", default="", help="dataset:epsilon,... (default: the paper's)")
    ap.add_argument("--grid", nargs="*", default=[], help="settings: key=v1,v2 ...")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cells = [(d, float(e)) for d, e in (c.split(":") for c in args.cells.split(",") if c)]
    cache = {}
    print("dataset      ε     settings                                            val AUC"
          "   test AUC (mean ± sd)  paper   Brier   base Brier  mean p  base p  s/fit")  # fmt: skip
    for name, eps in cells or CELLS:
        data = cache.setdefault(name, load(name))
        base = base_rate_brier(data)
        rate = float(data.y[data.split.train].mean())
        for settings in _parse_grid(args.grid) or [{}]:
            rows = np.array([score(data, eps, k, **settings) for k in range(args.keys)])
            val, auc, brier, mean_p, secs = rows.T
            text = ",".join(f"{k}={v:g}" for k, v in settings.items()) or "defaults"
            paper = PAPER.get(name, {}).get(eps)
            print(
                f"{name:12s} {eps:<5g} {text:51s} {val.mean():.4f}   {auc.mean():.4f} ± "
                f"{auc.std(ddof=1) if args.keys > 1 else 0.0:.4f}     "
                f"{'  -  ' if paper is None else f'{paper:.3f}'}   {brier.mean():.4f}  "
                f"{base:.4f}      {mean_p.mean():.3f}   {rate:.3f}   {secs.mean():5.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
