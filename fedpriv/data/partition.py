"""Federated partitioners: each returns one index array per client.

Every row goes to exactly one client (property-tested, and checked on the
way out by :func:`~fedpriv.records.check_partition`, which also guards every
place a caller's partition enters: a row held twice would count twice).
Poisson participation is not a partitioner; it belongs to the runtime.
Partitions are a property of the simulated federation and are drawn once
from a recorded seed.
"""

from __future__ import annotations

import numpy as np

from fedpriv.data.errors import DataError
from fedpriv.records import check_partition
from fedpriv.validation import check_count, check_generator, check_positive

Partition = list[np.ndarray]


def _check_nonempty(parts: Partition, what: str, n: int) -> Partition:
    parts = check_partition(parts, n)
    empty = [k for k, p in enumerate(parts) if p.size == 0]
    if empty:
        raise DataError(
            f"{what}: client(s) {empty} received zero rows; use fewer clients",
            code="empty_client",
        )
    return parts


def natural(groups: np.ndarray, *, n_clients: int | None = None) -> Partition:
    """Clients are the values of a client column (integer codes 0..K-1)."""
    g = np.asarray(groups, dtype=np.int64)
    k = int(g.max()) + 1 if n_clients is None else check_count("n_clients", n_clients)
    if g.min() < 0 or g.max() >= k:
        raise DataError(
            f"natural partition: client codes must lie in [0, {k}); got [{g.min()}, {g.max()}]",
            code="bad_client_codes",
        )
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(k + 1))
    return _check_nonempty(
        [order[bounds[i] : bounds[i + 1]] for i in range(k)], "natural partition", g.size
    )


def iid(n: int, *, n_clients: int, rng: np.random.Generator) -> Partition:
    """Uniformly random, (near-)equal-sized clients."""
    check_count("n", n)
    k = check_count("n_clients", n_clients)
    check_generator("rng", rng)
    perm = rng.permutation(n)
    return _check_nonempty([np.sort(p) for p in np.array_split(perm, k)], "iid partition", n)


def dirichlet(
    y: np.ndarray, *, n_clients: int, alpha: float, rng: np.random.Generator, max_tries: int = 100
) -> Partition:
    """Label skew: class c's rows are split by proportions p_c ~ Dir(α·1_K).

    Hsu, Qi & Brown 2019 ("Measuring the effects of non-identical data
    distribution"); small α gives each client few classes, large α → IID.
    Redraws (up to ``max_tries``) until every client has a row.
    """
    y = np.asarray(y)
    k = check_count("n_clients", n_clients)
    a = check_positive("alpha", alpha)
    check_generator("rng", rng)
    classes = np.unique(y)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in classes:
            rows = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(k, a))
            cuts = (np.cumsum(p)[:-1] * rows.size).astype(np.int64)
            for client, chunk in enumerate(np.split(rows, cuts)):
                parts[client].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if all(p.size for p in out):
            return check_partition(out, y.size)
    raise DataError(
        f"dirichlet partition: some client got zero rows in {max_tries} draws "
        f"(n={y.size}, n_clients={k}, alpha={a}); use fewer clients or a larger alpha",
        code="empty_client",
    )


def zipf(n: int, *, n_clients: int, s: float, rng: np.random.Generator) -> Partition:
    """Size imbalance: client i gets ≈ 1 + (n−K)·i^{-s}/Σ_j j^{-s} rows, drawn at random."""
    check_count("n", n)
    k = check_count("n_clients", n_clients)
    s = float(s)
    if not np.isfinite(s) or s < 0:
        raise ValueError(f"s must lie in [0, inf); got {s!r}")
    check_generator("rng", rng)
    if n < k:
        raise DataError(
            f"zipf partition: {n} rows cannot give {k} clients a row each", code="too_few_rows"
        )
    w = np.arange(1, k + 1, dtype=np.float64) ** -s
    # One row each, the rest in proportion to i^{-s}: every client exists.
    sizes = 1 + np.floor(w / w.sum() * (n - k)).astype(np.int64)
    sizes[0] += n - sizes.sum()  # remainder to the largest client
    perm = rng.permutation(n)
    cuts = np.cumsum(sizes)[:-1]
    return _check_nonempty([np.sort(p) for p in np.split(perm, cuts)], "zipf partition", n)


def label_skew(y: np.ndarray, parts: Partition) -> float:
    """Mean total-variation distance between client label distributions and the pooled one."""
    y = np.asarray(y)
    parts = check_partition(parts, y.size)
    classes = np.unique(y)
    pooled = np.array([(y == c).mean() for c in classes])
    tv = [
        0.5 * np.abs(np.array([(y[p] == c).mean() for c in classes]) - pooled).sum() for p in parts
    ]
    return float(np.mean(tv))
