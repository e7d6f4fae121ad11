"""Learner factory and dataset access, shared by every cell (benchmark paper §4.1, §4.2).

A learner is named by its method (:mod:`fedpriv.methods`) and configured by
a flat parameter dict of its settings; this module turns the pair into the
method's in-process estimator. Datasets are loaded once per
process and partitioned as the paper does: synthetic by Dirichlet(0.5) over
K = 5 clients, BRFSS IID over K = 5, 130-US by medical specialty.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: Keyword arguments of each dataset's partition (``TabularDataset.client_partition``).
PARTITION = {"synthetic": {"alpha": 0.5}, "brfss": {}, "brfss3": {}, "diabetes130": {}}


@functools.cache
def dataset(name: str):
    """The corpus ``name`` (cached per process; fedpriv caches the encoding on disk)."""
    from fedpriv.data import load_brfss, load_diabetes130, load_synthetic

    loaders = {
        "synthetic": lambda: load_synthetic(n=6_000),  # 4,800 train + val, as paper Table 4
        "brfss": load_brfss,
        "brfss3": lambda: load_brfss(multiclass=True),  # the same rows' three classes
        "diabetes130": load_diabetes130,
    }
    if name not in loaders:
        raise ValueError(f"dataset must be one of {sorted(loaders)}; got {name!r}")
    return loaders[name]()


@functools.cache
def partition(name: str, part: str, n_clients: int) -> list[np.ndarray]:
    """Who holds ``part`` of ``name``: frozen across run seeds (paper §4.1)."""
    return dataset(name).client_partition(n_clients, part, **PARTITION.get(name, {}))


def make_estimator(
    learner: str,
    params: dict[str, Any],
    *,
    epsilon: float,
    delta: float,
    seed: int,
    n_clients: int = 5,
    secure_aggregation: bool = False,
    secret_key=None,
):
    """A fresh estimator for ``learner`` with ``params`` at (ε, δ) and run ``seed``.

    ``seed`` is public (trees, initial weights); ``secret_key`` keys the
    private randomness (``None``: fresh OS entropy at every fit; cells pass
    :func:`fedpriv.experiments.keys.secret_key_for` of their content key).
    """
    from fedpriv.methods import get_method

    return get_method(learner).estimator_class(
        **params,
        epsilon=epsilon,
        delta=delta,
        seed=seed,
        num_clients=n_clients,
        secure_aggregation=secure_aggregation,
        secret_key=secret_key,
    )


def fitted(cell, part: str, secret_key):
    """``cell``'s estimator (its learner, settings, (ε, δ), seed, clients) fitted on
    ``part`` of its dataset with the frozen partition; private randomness from
    ``secret_key``. Returns (estimator, dataset, fit seconds)."""
    import time

    if cell.learner == "dp_ebm":  # interpret's pooled DP-EBM: not a fedpriv method
        from fedpriv.experiments.bench import dp_ebm

        return dp_ebm.fitted(cell, part, secret_key)
    ds = dataset(cell.dataset)
    clf = make_estimator(
        cell.learner,
        cell.param_dict,
        epsilon=cell.epsilon,
        delta=cell.delta,
        seed=cell.seed,
        n_clients=cell.n_clients,
        secure_aggregation=cell.secure_aggregation,
        secret_key=secret_key,
    )
    rows = partition(cell.dataset, part, cell.n_clients)
    # The bundled corpus's frozen partition is public (as the launchers' declared bound):
    # declared, so no record count is released and the fit equals a Flower run's.
    clf.set_params(max_records=max(len(p) for p in rows))
    t0 = time.perf_counter()
    clf.fit(ds, part=part, partition=rows)
    return clf, ds, time.perf_counter() - t0


def label(learner: str, params: dict[str, Any]) -> str:
    """A short, stable description of a configuration (report tables)."""
    short = {
        "rounds": "T",
        "depth": "D",
        "learning_rate": "lr",
        "sampling_rate": "q",
        "clip_norm": "C",
        "hidden": "h",
        "trees": "trees",
        "leaf_mechanism": "leaves",
    }
    return " ".join(
        f"{short.get(k, k)}={v:g}" if isinstance(v, float) else f"{short.get(k, k)}={v}"
        for k, v in sorted(params.items())
    )
