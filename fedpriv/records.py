"""Checks on what enters a run: the labels, and which client holds which record.

Record-level DP bounds what one record can add to a reply. Two inputs can
silently break that bound before any mechanism runs:

* a label outside the learner's label set: boosting's g = p − y then leaves
  [−1, 1] (y ∈ {−1, 1} doubles the sensitivity, y ∈ {0, 5} multiplies it by
  ~5) and a forest's class count lands in another slot;
* a partition that gives one row to two clients (or twice to one), which
  counts that record twice.

:func:`check_labels` and :func:`check_partition` refuse both at every entry
point (estimators, dataset loading, the Flower ClientApp, ``make_clients``).
:func:`public_label_set` and :func:`encode_labels` let an estimator take any
public label set (strings included): each label becomes its class index.
The label set always comes from a public schema or a public parameter, never
from the rows (privacy rule 2). The kernels clip as well, so a caller that
bypasses these checks still cannot exceed the sensitivity (rule 6).

Light on purpose (numpy only): the federation core imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpriv.errors import DataError

#: The encoded label set of every binary learner (and of every schema's target).
BINARY_LABELS: tuple[int, ...] = (0, 1)


def check_labels(y, labels: Sequence[float], *, column: str = "y") -> np.ndarray:
    """``y`` as a float64 vector if every label lies in the public set ``labels``.

    Raises
    ------
    DataError
        ``code="label_outside_label_set"``, naming the first bad value, its
        row and the allowed set (the value stays local: only the code and
        ``column`` are public, :func:`fedpriv.errors.public_error`).
    """
    allowed = tuple(labels)
    if not allowed:
        raise ValueError("labels must be a non-empty public label set")
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise DataError(
            f"labels must be a 1-D array; got shape {arr.shape}",
            code="bad_label_shape",
            column=column,
        )
    if arr.dtype.kind not in "biuf":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise DataError(
                f"labels must be numbers in the label set {list(allowed)}; got dtype {arr.dtype}",
                code="label_outside_label_set",
                column=column,
            ) from None
    arr = np.asarray(arr, dtype=np.float64)
    ok = np.isin(arr, np.asarray(allowed, dtype=np.float64))
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        v = float(arr[i])
        raise DataError(
            f"label {_number(v)} (row {i}) is outside the label set "
            "[" + ", ".join(_number(float(a)) for a in allowed) + "]",
            code="label_outside_label_set",
            column=column,
        )
    return arr


def public_label_set(classes, *, n_classes: int | None = None, key: str = "classes") -> np.ndarray:
    """A public label set as a sorted array of distinct labels (scikit-learn's ``classes_`` order).

    Parameters
    ----------
    classes : array-like
        The labels, from a public source (a schema, a parameter): never from
        the private rows (privacy rule 2).
    n_classes : int, optional
        The exact number of classes a learner takes (2 for a binary learner).
    key : str
        The parameter's name, for the error message.

    Raises
    ------
    ValueError
        Fewer than two labels, a repeated label, labels that cannot be
        ordered, or not ``n_classes`` of them.
    """
    try:
        arr = np.asarray(classes)
        labels = np.unique(arr) if arr.ndim == 1 else None
    except TypeError:  # labels of mixed types cannot be ordered
        raise ValueError(f"{key} must be labels of one type; got {classes!r}") from None
    if labels is None or arr.dtype.kind not in "biufUSO":
        raise ValueError(f"{key} must be a 1-D sequence of labels; got {classes!r}")
    if labels.size != arr.size:
        raise ValueError(f"{key} must not repeat a label; got {list(arr.tolist())}")
    if labels.size < 2 or (n_classes is not None and labels.size != n_classes):
        need = "at least 2" if n_classes is None else f"exactly {n_classes}"
        raise ValueError(f"{key} must hold {need} labels; got {list(arr.tolist())}")
    return labels


def encode_labels(y, classes: np.ndarray, *, column: str = "y", note: str = "") -> np.ndarray:
    """Each label of ``y`` as its index into the public label set ``classes`` (float64).

    ``classes`` is a :func:`public_label_set` (sorted); a numeric label set
    takes the vectorised path of :func:`check_labels`, any other set (e.g.
    strings) a lookup by equality.

    Raises
    ------
    DataError
        ``code="label_outside_label_set"``, as :func:`check_labels`, with
        ``note`` appended to the message.
    """
    classes = np.asarray(classes)
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise DataError(
            f"labels must be a 1-D array; got shape {arr.shape}",
            code="bad_label_shape",
            column=column,
        )
    try:
        if classes.dtype.kind in "biuf" and arr.dtype.kind in "biuf":
            return np.searchsorted(classes, check_labels(arr, classes, column=column)).astype(
                np.float64
            )
        index = {c: i for i, c in enumerate(classes.tolist())}
        codes = np.fromiter((index.get(v, -1) for v in arr.tolist()), np.int64, arr.size)
        if (codes >= 0).all():
            return codes.astype(np.float64)
        i = int(np.flatnonzero(codes < 0)[0])
        raise DataError(
            f"label {arr[i].item()!r} (row {i}) is outside the label set {classes.tolist()}",
            code="label_outside_label_set",
            column=column,
        )
    except DataError as err:
        if not note or err.code != "label_outside_label_set":
            raise
        noted = DataError(f"{err.args[0]}. {note}", code=err.code)  # args[0] names the column
        noted.column = err.column
        raise noted from None


def _number(v: float) -> str:
    return repr(int(v)) if v.is_integer() else repr(v)


def class_codes(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Each label as a class index in [0, n_classes), or −1 if it is not one.

    −1 marks a label that is not an integer in [0, C) (a negative, too large,
    fractional or NaN label): a forest counts that record in no slot, so its
    contribution stays within the one count its sensitivity assumes even if
    label validation was bypassed.
    """
    y = np.asarray(y)
    out = np.full(y.shape, -1, dtype=np.int64)
    if y.dtype.kind in "iub":
        ok = (y >= 0) & (y < n_classes)
    else:
        yf = np.asarray(y, dtype=np.float64)
        ok = (yf >= 0) & (yf < n_classes) & (yf == np.floor(yf))
    out[ok] = y[ok].astype(np.int64)
    return out


def check_partition(partition: Sequence, n_rows: int) -> list[np.ndarray]:
    """``partition`` as int64 index arrays if it gives each row to at most one client.

    Parameters
    ----------
    partition : sequence of array-like
        Client k's row indices into the ``n_rows`` rows.
    n_rows : int
        Rows the indices point into.

    Raises
    ------
    DataError
        ``code="partition_out_of_range"`` for an index outside [0, n_rows)
        (a negative index would silently wrap around to another row), or
        ``code="overlapping_partition"`` naming the first row held twice and
        the two clients (the same client twice if it lists the row twice):
        that record would count twice, doubling its contribution.
    """
    n = int(n_rows)
    parts: list[np.ndarray] = []
    for k, p in enumerate(partition):
        idx = np.asarray(p)
        if idx.size == 0:
            parts.append(np.zeros(0, dtype=np.int64))
            continue
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            raise DataError(
                f"client {k}: row indices must be a 1-D integer array; got "
                f"{idx.dtype}{list(idx.shape)}",
                code="bad_partition",
            )
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise DataError(
                f"client {k}: row index {bad} is outside [0, {n})",
                code="partition_out_of_range",
            )
        parts.append(idx.astype(np.int64, copy=False))
    if parts:
        rows = np.concatenate(parts)
        owner = np.repeat(np.arange(len(parts)), [p.size for p in parts])
        order = np.argsort(rows, kind="stable")
        dup = np.flatnonzero(rows[order][1:] == rows[order][:-1])
        if dup.size:
            a, b = order[dup[0]], order[dup[0] + 1]
            first, second = int(owner[a]), int(owner[b])
            who = f"client {first} twice" if first == second else f"clients {first} and {second}"
            raise DataError(
                f"row {int(rows[a])} is held by {who}: its record would count twice",
                code="overlapping_partition",
            )
    return parts
