"""Ablation cells: one fit under one federation condition, and how it is scored.

An :class:`AblationCell` adds the federation condition (participation ρ and
its accounting, partition, K, covariate shift γ) to what an issue-8
:class:`fedpriv.experiments.bench.cells.Cell` holds. It is cached by the same
:class:`~fedpriv.experiments.bench.cells.CellCache` (content hash) and run by the same
:func:`~fedpriv.experiments.bench.cells.run_cells` pool.

With natural clients (the shift study) each client's test rows come from its
own shifted distribution, and the cell also records the within-client macro
AUC and the exact split of pooled AUC into within- and cross-client pairs
(benchmark paper §5.6, "pooled AUC inflates under shift").
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from fedpriv.experiments.ablation.config import ACCOUNTINGS, PARTITIONS
from fedpriv.experiments.bench.cells import content_key
from scipy.stats import rankdata

#: Bump when a change alters what a cell computes: every key changes with it.
CELL_VERSION = "ablate-1"
#: Seed of the data draw, the split and the partitions: frozen across run seeds (paper §4.1).
DATA_SEED = 0


@dataclass(frozen=True)
class AblationCell:
    """One fit of one learner at one (ε, δ), seed and federation condition.

    Build with :meth:`make`, which normalises the condition so that equal
    experiments get equal keys: α only for ``dirichlet``, the Zipf exponent
    only for ``zipf``, and accounting ``valid`` at ρ = 1 (all three
    accountings are the same event there).
    """

    learner: str
    params: tuple[tuple[str, Any], ...]
    epsilon: float
    delta: float
    seed: int
    n_rows: int
    n_clients: int
    partition: str
    alpha: float | None
    zipf_s: float | None
    participation: float
    accounting: str
    covariate_shift: float
    secure_aggregation: bool = False

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {list(PARTITIONS)}; got {self.partition!r}")
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(
                f"accounting must be one of {list(ACCOUNTINGS)}; got {self.accounting!r}"
            )
        if not 0.0 < self.participation <= 1.0:
            raise ValueError(f"participation must lie in (0, 1]; got {self.participation!r}")
        if self.covariate_shift > 0 and self.partition != "natural":
            raise ValueError(
                f"covariate_shift > 0 needs the natural partition; got {self.partition!r}"
            )
        if self.seed < 0:
            raise ValueError(f"seed must be an integer in [0, inf); got {self.seed!r}")

    @classmethod
    def make(
        cls,
        learner: str,
        params: dict[str, Any],
        *,
        partition: str,
        alpha: float | None,
        zipf_s: float | None,
        participation: float,
        accounting: str,
        **kw: Any,
    ) -> AblationCell:
        return cls(
            learner=learner,
            params=tuple(sorted(params.items())),
            partition=partition,
            alpha=float(alpha) if partition == "dirichlet" else None,
            zipf_s=float(zipf_s) if partition == "zipf" else None,
            participation=float(participation),
            accounting="valid" if participation == 1.0 else accounting,
            **kw,
        )

    @property
    def key(self) -> str:
        """Stable content hash: same cell, same key, in every process and session."""
        return content_key(CELL_VERSION, self)

    @property
    def condition(self) -> dict[str, Any]:
        """The federation condition as report columns."""
        return {
            "participation": self.participation,
            "alpha": np.nan if self.alpha is None else self.alpha,
            "accounting": self.accounting,
            "n_clients": self.n_clients,
            "partition": self.partition,
            "covariate_shift": self.covariate_shift,
        }


# -- data -----------------------------------------------------------------------------
@functools.cache
def dataset(n_rows: int, covariate_shift: float, n_clients: int, natural: bool):
    """The synthetic task (paper Table 4), cached per process.

    ``natural``: rows keep the generator's client ids (the split is then
    stratified by client × label, whatever γ, so every γ splits the same
    latent points the same way).
    """
    from fedpriv.data import load_synthetic
    from fedpriv.data.split import make_split
    from fedpriv.data.synthetic import SyntheticConfig, make_synthetic

    ds = load_synthetic(n=n_rows, n_clients=n_clients, covariate_shift=covariate_shift)
    if not natural:
        return ds
    cfg = SyntheticConfig(n_clients=n_clients, covariate_shift=covariate_shift)
    data = make_synthetic(n=n_rows, seed=DATA_SEED, config=cfg)
    split = make_split(data.y, seed=DATA_SEED, val_fraction=0.2, strata=data.client * 2 + data.y)
    names = tuple(f"client {k}" for k in range(n_clients))
    return dataclasses.replace(ds, split=split, clients=data.client, client_names=names)


@functools.cache
def partition(cell_condition: tuple, part: str = "train+val") -> list[np.ndarray]:
    """Who holds ``part``: frozen across run seeds (drawn from :data:`DATA_SEED`)."""
    from fedpriv.data import zipf
    from fedpriv.seeding import derive_generator

    n_rows, gamma, k, kind, alpha, s = cell_condition
    ds = dataset(n_rows, gamma, k, kind == "natural")
    if kind == "natural":
        return ds.natural_partition(part)
    if kind == "iid":
        return ds.client_partition(k, part)
    if kind == "dirichlet":
        return ds.client_partition(k, part, alpha=alpha)
    rng = derive_generator(DATA_SEED, "partition", f"zipf-{s!r}", part)
    return zipf(ds.rows(part).size, n_clients=k, s=s, rng=rng)


# -- scoring --------------------------------------------------------------------------
def auc_decomposition(y: np.ndarray, p: np.ndarray, client: np.ndarray) -> dict[str, float]:
    """Within-client macro AUC and the within/cross-client split of pooled AUC.

    Pooled AUC is a mean over all (positive, negative) pairs. Splitting the
    pairs by whether both rows share a client gives the identity
    ``auc = w · auc_within_pairs + (1 − w) · auc_cross_pairs`` with
    ``w = within_pair_fraction``. Under covariate shift the cross-client
    pairs are ranked partly by client membership (clients' base rates
    differ), which is the inflation the benchmark paper warns of (§5.6).

    Returns
    -------
    dict
        ``auc_macro_within`` (mean of per-client AUCs over clients with both
        classes), ``auc_within_pairs``, ``auc_cross_pairs``,
        ``within_pair_fraction``.
    """
    y = np.asarray(y).astype(bool)
    ranks = rankdata(p)

    def u_stat(mask: np.ndarray) -> tuple[float, float]:
        r = rankdata(p[mask])
        pos, neg = int(y[mask].sum()), int((~y[mask]).sum())
        return float(r[y[mask]].sum() - pos * (pos + 1) / 2.0), float(pos * neg)

    pos, neg = int(y.sum()), int((~y).sum())
    u_all, n_all = float(ranks[y].sum() - pos * (pos + 1) / 2.0), float(pos * neg)
    aucs, u_in, n_in = [], 0.0, 0.0
    for k in np.unique(client):
        u, n = u_stat(client == k)
        if n > 0:
            aucs.append(u / n)
            u_in, n_in = u_in + u, n_in + n
    cross = n_all - n_in
    return {
        "auc_macro_within": float(np.mean(aucs)) if aucs else float("nan"),
        "auc_within_pairs": u_in / n_in if n_in else float("nan"),
        "auc_cross_pairs": (u_all - u_in) / cross if cross else float("nan"),
        "within_pair_fraction": n_in / n_all if n_all else float("nan"),
    }


def execute(cell: AblationCell) -> dict[str, Any]:
    """Fit ``cell``'s learner on train + val under its condition; score it on test."""
    from fedpriv.experiments.bench import learners
    from fedpriv.experiments.keys import secret_key_for

    from fedpriv.evaluation.metrics import binary_metrics

    t0 = time.perf_counter()
    natural = cell.partition == "natural"
    ds = dataset(cell.n_rows, cell.covariate_shift, cell.n_clients, natural)
    cond = (cell.n_rows, cell.covariate_shift, cell.n_clients, cell.partition)
    part = partition((*cond, cell.alpha, cell.zipf_s))
    clf = learners.make_estimator(
        cell.learner,
        dict(cell.params),
        epsilon=cell.epsilon,
        delta=cell.delta,
        seed=cell.seed,
        n_clients=cell.n_clients,
        secure_aggregation=cell.secure_aggregation,
        secret_key=secret_key_for("ablation-cell", cell.key),
    )
    # The study measures what low participation does, rounds that release nothing
    # included: a cell is never "failed" for them (the default would fail ρ = 0.25).
    clf.set_params(
        participation=cell.participation,
        participation_accounting=cell.accounting,
        max_aborted_share=1.0,
    )
    t_fit = time.perf_counter()
    clf.fit(ds, part="train+val", partition=part)
    fit_seconds = time.perf_counter() - t_fit
    X, y = ds.xy("test")
    p = clf.predict_proba(X)[:, 1]
    out: dict[str, Any] = binary_metrics(y, p)
    if natural:
        out.update(auc_decomposition(y, p, ds.clients[ds.rows("test")]))
    report = clf.privacy_report_
    out.update(
        noise_multiplier=float(clf.noise_multiplier_),
        epsilon_spent=float(clf.epsilon_spent_),
        certified=float(report.certified),
        rounds=int(clf.communication_.rounds),
        seconds=fit_seconds,
        cell_seconds=time.perf_counter() - t0,
    )
    return out
