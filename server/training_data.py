"""The training rows of an in-process fit: array features checked, labels and partition.

:func:`check_features` refuses non-finite array features and counts values
outside the public box; :func:`federated_training_data` turns a dataset or
arrays into rows, class indices into the public label set and a partition
over the clients; :func:`unit_partition` bounds each client's units
(:mod:`fedpriv.privacy.units`). Plain functions over the data, kept apart from
:mod:`fedpriv.server.estimator_base` (the scikit-learn contract and the run),
which calls them and re-exports them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpriv.data import TabularDataset, iid
from fedpriv.federation.planning import client_key
from fedpriv.logs import get_logger
from fedpriv.privacy.randomness import SecretKey
from fedpriv.privacy.units import bound_units, bounding_generator, check_units_within_clients
from fedpriv.records import (
    BINARY_LABELS,
    check_labels,
    check_partition,
    encode_labels,
    public_label_set,
)
from fedpriv.seeding import derive_generator

log = get_logger(__name__)


def check_features(X: np.ndarray, *, box: bool = True) -> np.ndarray:
    """Refuse a NaN or infinite feature, naming its row and column; count values outside the box.

    A CSV's missing cells are declared by its schema (``missing = "indicator"``
    imputes and flags them); bare arrays have no schema, so a non-finite value
    is a ``ValueError`` naming the first (row, column) index. Array features
    are meant to lie in the public box [0, 1] (trees draw their thresholds
    there): with ``box``, values outside it are counted per column and logged
    as a WARNING (the curator's own log; never a value, only counts), not clipped.
    """
    X = np.asarray(X)
    if X.ndim == 2 and X.dtype.kind == "f":
        bad = ~np.isfinite(X)
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            what = "NaN" if np.isnan(X[i, j]) else "infinity"
            raise ValueError(
                f"X contains {what} at row {i}, column {j} ({int(bad.sum())} non-finite "
                "value(s) in all): features must be finite; impute or drop missing values "
                "first, or load the data with a schema that declares them "
                '(missing = "indicator")'
            )
        if box:
            outside = ((X < 0.0) | (X > 1.0)).sum(axis=0)
            if outside.any():
                cols = np.flatnonzero(outside)
                log.warning(
                    "X has %d value(s) outside the public box [0, 1] in column(s) %s: "
                    "trees draw thresholds in [0, 1] and send them to the nearest edge; "
                    "scale each feature by public bounds (a schema does this)",
                    int(outside.sum()),
                    cols[:10].tolist() + (["..."] if cols.size > 10 else []),
                )
    return X


def federated_training_data(
    data: TabularDataset | np.ndarray,
    y: np.ndarray | None,
    partition: list[np.ndarray] | None,
    n_clients: int,
    part: str = "train",
    *,
    classes: Sequence = BINARY_LABELS,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Training rows, their class indices and who holds them.

    The labels must lie in the public label set: the schema's for a dataset,
    else ``classes`` (the learner's: {0, 1} for a binary learner); each
    becomes its index into the sorted label set. A partition must give each
    row to at most one client (default: the dataset's
    :meth:`TabularDataset.client_partition`, or an IID split of the arrays).
    Both are refused with a :class:`~fedpriv.errors.DataError` naming the bad
    label or the shared row.
    """
    if isinstance(data, TabularDataset):
        X, yy = data.xy(part)
        target = data.schema.target
        yy = check_labels(yy, target.classes, column=target.column)
        if partition is None:
            partition = data.client_partition(n_clients, part)
        return X, yy, check_partition(partition, yy.size)
    if y is None:
        raise ValueError("fit(X, y): y is required with an array X")
    X = check_features(np.asarray(data, dtype=np.float64), box=False)
    yy = encode_labels(y, public_label_set(classes))
    if X.ndim != 2 or X.shape[0] != yy.size:
        raise ValueError(f"fit(X, y): X must be (n, d) with n = len(y); got {X.shape}, {yy.shape}")
    if partition is None:
        partition = iid(yy.size, n_clients=n_clients, rng=derive_generator(0, "partition", "iid"))
    return X, yy, check_partition(partition, yy.size)


def unit_partition(
    data: TabularDataset | np.ndarray, partition: list[np.ndarray], part: str, key: SecretKey
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Each client's rows bounded per unit, and every row's unit code (``None``: no units).

    A dataset whose schema names a ``unit_column``: a unit two clients would hold is
    refused (``unit_spans_clients``; the curator holds every row here, so it checks
    what a node cannot), then client k keeps at most ``max_records_per_unit`` rows of
    each unit, drawn from its own key ``client_key(key, k)`` as its node would
    (:func:`fedpriv.data.node.node_data`). Arrays or a dataset without units: the
    partition as given.
    """
    if not isinstance(data, TabularDataset) or data.units is None:
        return partition, None
    units = data.units[data.rows(part)]
    column = str(data.schema.unit_column)
    check_units_within_clients(units, partition, column=column, source=data.report.source)
    m = data.schema.unit_records
    bounded = []
    for k, rows in enumerate(partition):
        rows = np.asarray(rows, dtype=np.int64)
        # The node's own training stream (fedpriv.data.node.node_data draws the same).
        kept = bound_units(units[rows], m, bounding_generator(client_key(key, k), "train"))
        bounded.append(rows[kept.rows])
    return bounded, units
