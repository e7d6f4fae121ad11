"""Learner factory and dataset access, shared by every cell (benchmark paper §4.1, §4.2).

A learner is named (``boosting``, ``logistic``, ``mlp``, ``lumberjack``,
``random_forest``) and configured by a flat parameter dict; this module turns
the pair into a fedpriv in-process estimator. Datasets are loaded once per
process and partitioned as the paper does: synthetic by Dirichlet(0.5) over
K = 5 clients, BRFSS IID over K = 5, 130-US by medical specialty.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: Keyword arguments of each dataset's partition (``TabularDataset.client_partition``).
PARTITION = {"synthetic": {"alpha": 0.5}, "brfss": {}, "diabetes130": {}}

_ESTIMATORS = {
    "boosting": ("DPBoostingClassifier", {}),
    "logistic": ("DPSGDClassifier", {"model": "logistic"}),
    "mlp": ("DPSGDClassifier", {"model": "mlp"}),
    "lumberjack": ("LumberjackClassifier", {}),
    "random_forest": ("DPRandomForestClassifier", {}),
}


@functools.cache
def dataset(name: str):
    """The corpus ``name`` (cached per process; fedpriv caches the encoding on disk)."""
    from fedpriv.data import load_brfss, load_diabetes130, load_synthetic

    loaders = {
        "synthetic": lambda: load_synthetic(n=6_000),  # 4,800 train + val, as paper Table 4
        "brfss": load_brfss,
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
    epsilon: float | None,
    delta: float,
    seed: int,
    n_clients: int = 5,
    secure_aggregation: bool = False,
    secret_key=None,
):
    """A fresh estimator for ``learner`` with ``params`` at (ε, δ) and run ``seed``.

    ``seed`` is public (trees, initial weights); ``secret_key`` keys the
    private randomness (``None``: fresh OS entropy at every fit; cells pass
    :func:`experiments.keys.secret_key_for` of their content key).
    """
    import server.estimators as est

    if learner not in _ESTIMATORS:
        raise ValueError(f"learner must be one of {sorted(_ESTIMATORS)}; got {learner!r}")
    cls_name, fixed = _ESTIMATORS[learner]
    cls = getattr(est, cls_name)
    return cls(
        **fixed,
        **params,
        epsilon=epsilon,
        delta=delta,
        seed=seed,
        n_clients=n_clients,
        secure_aggregation=secure_aggregation,
        secret_key=secret_key,
    )


def label(learner: str, params: dict[str, Any]) -> str:
    """A short, stable description of a configuration (report tables)."""
    short = {
        "n_rounds": "T",
        "n_steps": "steps",
        "depth": "D",
        "max_depth": "D",
        "learning_rate": "lr",
        "sampling_rate": "q",
        "clip_norm": "C",
        "hidden": "h",
        "n_trees": "trees",
        "leaf_mechanism": "leaves",
    }
    return " ".join(
        f"{short.get(k, k)}={v:g}" if isinstance(v, float) else f"{short.get(k, k)}={v}"
        for k, v in sorted(params.items())
    )
