"""Every learner at ε 0.5 / 2 / 8 on the bundled corpora and on tables it has never seen.

A newcomer's check, cell by cell: does a learner's model predict with a spread
(it is not a constant), is it at least as good as the base-rate predictor (Brier
score), and does the fit spend the budget it was given? For each table, each
registered method and each ε it fits the method's estimator in process at its
defaults (as ``fedpriv run`` does: K clients, the table's natural clients or an
IID split, δ = 1e-5), scores the held-out 20 % and records

* test AUC (macro one-vs-rest beyond two classes) and Brier score, against the
  Brier score of the training rows' class rates (the base-rate predictor);
* the standard deviation of the predicted probabilities (mean over classes),
  against that of the same method's non-private fit (ε = ∞, same data);
* ε spent as certified (the smaller of the PLD and RDP accountants' figures, as
  the run's report states it), both figures, and the run's status.

A cell passes when sd ≥ 0.01 (wherever the non-private fit's sd is), Brier ≤ the
base rate's, and ε spent ≥ 0.99 ε. Tables outside the repository are given as
``PATH:SCHEMA`` (a CSV and its public schema; ``experiments/schemas`` holds
the schemas of the two checked here, with the files' sources and hashes in the
report). Each cell's result is kept in ``DIR/heldout-cells.json`` so an
interrupted run resumes.

Usage::

    python -m fedpriv.experiments.heldout [--table PATH:SCHEMA ...] [--datasets adult,heart]
        [--methods boosting,mlp] [--epsilons 0.5,2,8] [--seeds 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fedpriv import logs

log = logs.get_logger(__name__)

CORPORA = ("adult", "brfss", "diabetes130", "heart")
EPSILONS = (0.5, 2.0, 8.0)
K_TABLE = 5
MIN_SD, MIN_SPEND = 0.01, 0.99


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One fit's held-out figures (see the module docstring)."""

    table: str
    method: str
    epsilon: float
    seed: int
    auc: float
    brier: float
    base_brier: float
    sd: float
    reference_sd: float
    spent: float
    pld: float
    rdp: float
    status: str
    seconds: float

    @property
    def checks(self) -> dict[str, bool]:
        return {
            "spread": self.sd >= MIN_SD or self.reference_sd < MIN_SD,
            "brier": self.brier <= self.base_brier,
            "spent": self.spent >= MIN_SPEND * self.epsilon,
        }


def _onehot(y: np.ndarray, c: int) -> np.ndarray:
    E = np.zeros((y.size, c))
    E[np.arange(y.size), y.astype(int)] = 1.0
    return E


def _scores(P: np.ndarray, y: np.ndarray, rates: np.ndarray) -> tuple[float, float, float, float]:
    """AUC, Brier, base-rate Brier and the mean per-class sd of ``P`` (n, C)."""
    from sklearn.metrics import roc_auc_score

    E = _onehot(y, P.shape[1])
    # Two classes: the usual Brier score of P(y = 1); more: summed over the classes.
    cols = slice(1, 2) if P.shape[1] == 2 else slice(None)
    brier = float(np.mean(np.sum((P - E)[:, cols] ** 2, axis=1)))
    base = float(np.mean(np.sum((rates - E)[:, cols] ** 2, axis=1)))
    score = P[:, 1] if P.shape[1] == 2 else P
    auc = float(roc_auc_score(y, score, multi_class="ovr"))
    sd = float(np.mean(P.std(axis=0)[1:] if P.shape[1] == 2 else P.std(axis=0)))
    return auc, brier, base, sd


def _load(name: str, spec: str | None, split_seed: int):
    from fedpriv.data import client_counts, load_csv, load_for_run
    from fedpriv.data.node import declared_max_records

    if spec is None:
        lo, hi = client_counts(name)
        k = min(max(5, lo), hi or 5)
        return (
            load_for_run(name, num_clients=k, split_seed=split_seed),
            k,
            (declared_max_records(name, k, split_seed)),
        )
    path, schema = spec.split(":", 1)
    data = load_csv(path, schema, split_seed=split_seed)
    return data, len(data.client_names) or K_TABLE, None


def _fitted(data, k: int, max_records, method: str, eps: float, seed: int):
    from fedpriv.methods import get_method

    est = get_method(method).estimator_class()
    params = {"epsilon": eps, "seed": seed, "num_clients": k}
    if max_records is not None and "max_records" in est.get_params():
        params["max_records"] = max_records
    est.set_params(**params)
    t0 = time.process_time()
    est.fit(data)
    return est, time.process_time() - t0


def _sd(P: np.ndarray) -> float:
    return float(np.mean(P.std(axis=0)[1:] if P.shape[1] == 2 else P.std(axis=0)))


def reference_sd(data, k: int, max_records, method: str) -> float:
    """The sd of ``method``'s non-private fit's test predictions."""
    est, _ = _fitted(data, k, max_records, method, math.inf, 0)
    return _sd(np.asarray(est.predict_proba(data.xy("test")[0]), dtype=np.float64))


def fit_cell(table: str, data, k: int, max_records, method: str, eps: float, seed: int,
             reference_sd: float) -> Cell:  # fmt: skip
    """Fit ``method`` at ``eps`` (fresh private key) and score the test rows."""
    est, seconds = _fitted(data, k, max_records, method, eps, seed)
    X, y = data.xy("test")
    _, ytr = data.xy("train")
    c = max(int(max(y.max(), ytr.max())) + 1, 2)
    rates = np.bincount(ytr.astype(int), minlength=c) / ytr.size
    P = np.asarray(est.predict_proba(X), dtype=np.float64)
    auc, brier, base, sd = _scores(P, y, rates)
    card = est.privacy_report_.to_dict()
    return Cell(table=table, method=method, epsilon=eps, seed=seed, auc=auc, brier=brier,
                base_brier=base, sd=sd, reference_sd=reference_sd,
                spent=float(card["epsilon"]), pld=float(card["epsilon_pld"]),
                rdp=float(card["epsilon_rdp"]), status=str(est.run_status_),
                seconds=seconds)  # fmt: skip


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def render(cells: list[Cell], tables: dict[str, str | None]) -> str:
    """The report: one row per (table, method, ε), failing checks named."""
    out = [
        "# Every learner on the bundled corpora and on tables it has never seen",
        "",
        "Each cell: the method at its defaults, in process (as `fedpriv run`), δ = 1e-5, "
        "a fresh private key, scored on the held-out 20 %. Checks: sd of the predicted "
        f"probabilities ≥ {MIN_SD} (where the method's non-private fit has that spread), Brier ≤ "
        f"the base-rate predictor's, ε spent (certified: the smaller of PLD and RDP) ≥ "
        f"{MIN_SPEND} ε.",
        "",
        "Tables outside the repository:",
        "",
    ]
    for name, spec in tables.items():
        if spec is not None:
            path, schema = spec.split(":", 1)
            out.append(f"* `{name}`: schema `{schema}`, file sha256 `{_sha(path)}`")
    out += [
        "",
        "| table | method | ε | AUC | Brier | base Brier | sd | non-private sd | ε spent "
        "| PLD | RDP | status | CPU s | failing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fails = 0
    for c in cells:
        bad = [k for k, ok in c.checks.items() if not ok]
        fails += bool(bad)
        out.append(
            f"| {c.table} | {c.method} | {c.epsilon:g} | {c.auc:.4f} | {c.brier:.4f} | "
            f"{c.base_brier:.4f} | {c.sd:.4f} | {c.reference_sd:.4f} | {c.spent:.4f} | "
            f"{c.pld:.4f} | {c.rdp:.4f} | "
            f"{c.status} | {c.seconds:.1f} | {', '.join(bad) or '–'} |"
        )
    out += ["", f"{len(cells)} cells, {fails} with a failing check.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from fedpriv.methods import method_names

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", action="append", default=[], metavar="PATH:SCHEMA")
    p.add_argument("--datasets", default=",".join(CORPORA))
    p.add_argument("--methods", default=",".join(method_names()))
    p.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("experiments/reports"))
    a = p.parse_args(argv)
    logs.configure(tag="heldout")
    tables: dict[str, str | None] = {d: None for d in a.datasets.split(",") if d}
    for spec in a.table:
        tables[Path(spec.split(":", 1)[0]).stem] = spec
    a.out.mkdir(parents=True, exist_ok=True)
    store = a.out / "heldout-cells.json"
    done = {}
    if store.exists():
        for d in json.loads(store.read_text()):
            done[(d["table"], d["method"], d["epsilon"], d["seed"])] = Cell(**d)
    epsilons = [float(e) for e in a.epsilons.split(",")]
    for name, spec in tables.items():
        data, k, max_records = _load(name, spec, 0)
        for method in a.methods.split(","):
            ref = None
            for eps in epsilons:
                for seed in range(a.seeds):
                    key = (name, method, eps, seed)
                    if key in done:
                        continue
                    if ref is None:
                        ref = reference_sd(data, k, max_records, method)
                    cell = fit_cell(name, data, k, max_records, method, eps, seed, ref)
                    done[key] = cell
                    log.info("%s", render([cell], {}).splitlines()[-3])
                    store.write_text(json.dumps([asdict(c) for c in done.values()], indent=1))
    cells = [done[k] for k in sorted(done, key=lambda t: (t[0], t[1], t[2], t[3]))]
    (a.out / "heldout.md").write_text(render(cells, tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
