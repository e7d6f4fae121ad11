"""Encoded datasets with their split, natural clients and load report; on-disk cache.

A :class:`TabularDataset` holds every encoded row once, plus the row indices
of the train / validation / test parts. The split (and any partition drawn
for it) is frozen by ``split.seed``, independent of the run seed, so every
run and every learner sees the same rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.data.encode import Encoded, LoadReport, log_report
from fedpriv.data.errors import DataError
from fedpriv.data.partition import Partition, dirichlet, iid, natural
from fedpriv.data.schema import Schema
from fedpriv.data.split import Split
from fedpriv.data.units import unit_codes
from fedpriv.privacy.cache import cache_dir
from fedpriv.records import check_labels, check_partition
from fedpriv.seeding import derive_generator

_PARTS = ("train", "val", "test")


@dataclass(frozen=True)
class TabularDataset:
    """All encoded rows of one corpus and how they are split and held.

    Attributes
    ----------
    X, X_ordinal, y : numpy.ndarray
        One-hot view, ordinal view (see :mod:`fedpriv.data.encode`), labels.
    clients : numpy.ndarray or None
        Natural client code of each row (``client_names[code]``), if the corpus
        has one.
    split : Split
        Row indices of each part and the seed that defines them.
    units : numpy.ndarray or None
        Each row's unit code (equal ids, equal codes) when the schema names a
        ``unit_column`` (:mod:`fedpriv.data.units`); else ``None``.
    """

    name: str
    schema: Schema
    X: np.ndarray
    X_ordinal: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    split: Split
    report: LoadReport
    clients: np.ndarray | None = None
    client_names: tuple[str, ...] = ()
    units: np.ndarray | None = None

    @classmethod
    def from_encoded(
        cls,
        name: str,
        schema: Schema,
        parts: Sequence[Encoded],
        split: Split,
        report: LoadReport,
        *,
        clients: np.ndarray | None = None,
        client_names: tuple[str, ...] = (),
    ) -> TabularDataset:
        """A dataset from tables encoded with ``schema`` (stacked in order); a unit id
        shared by two tables is one unit."""
        units = None
        if parts and all(e.units is not None for e in parts):
            units = unit_codes(np.concatenate([e.units for e in parts]))
        return cls(
            name=name,
            schema=schema,
            X=np.vstack([e.X for e in parts]),
            X_ordinal=np.vstack([e.X_ordinal for e in parts]),
            y=np.concatenate([e.y for e in parts]),
            feature_names=schema.feature_names,
            split=split,
            report=report,
            clients=clients,
            client_names=client_names,
            units=units,
        )

    def __post_init__(self) -> None:
        # Every way in (a corpus loader, a CSV, the on-disk cache) ends here: the
        # labels must lie in the schema's public label set, whatever the file held.
        check_labels(self.y, self.schema.target.classes, column=self.schema.target.column)
        check_training_classes(
            self.y[self.split.train], self.schema, source=self.report.source or self.name
        )
        # A dataset is shared by every learner and run: freeze its arrays.
        if (self.units is None) != (self.schema.unit_column is None) or (
            self.units is not None and self.units.shape != self.y.shape
        ):
            raise ValueError(
                f"dataset {self.name!r}: units must hold one code per row exactly when the "
                f"schema names a unit_column ({self.schema.unit_column!r})"
            )
        arrays = (self.X, self.X_ordinal, self.y, self.clients, self.units)
        for arr in (*arrays, *vars(self.split).values()):
            if isinstance(arr, np.ndarray):
                arr.flags.writeable = False

    def rows(self, part: str) -> np.ndarray:
        """Row indices of ``"train"``, ``"val"``, ``"test"`` or ``"train+val"`` (the 80 %)."""
        if part == "train+val":
            return np.sort(np.concatenate([self.split.train, self.split.val]))
        if part not in _PARTS:
            raise ValueError(f"part must be one of {(*_PARTS, 'train+val')}; got {part!r}")
        return getattr(self.split, part)

    def xy(self, part: str, *, ordinal: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Features and labels of ``part`` (``"train"``, ``"val"`` or ``"test"``)."""
        r = self.rows(part)
        return (self.X_ordinal if ordinal else self.X)[r], self.y[r]

    def natural_partition(self, part: str = "train") -> Partition:
        """Per-client indices *into* ``part`` from the natural client column."""
        if self.clients is None:
            raise ValueError(f"dataset {self.name!r} has no natural clients; use a partitioner")
        rows = self.rows(part)
        return check_partition(
            natural(self.clients[rows], n_clients=len(self.client_names)), rows.size
        )

    def client_partition(
        self, n_clients: int = 5, part: str = "train", *, alpha: float | None = None
    ) -> Partition:
        """Who holds ``part``: the natural clients, else IID (or Dirichlet(α) label skew).

        A simulated split is drawn from the dataset's split seed, so it is
        frozen across run seeds and identical in every runtime.
        """
        if self.clients is not None:
            return self.natural_partition(part)
        kind = "iid" if alpha is None else f"dirichlet-{alpha!r}"
        rng = derive_generator(self.split.seed or 0, "partition", kind, part)
        n = self.rows(part).size
        if alpha is None:
            parts = iid(n, n_clients=n_clients, rng=rng)
        else:
            parts = dirichlet(self.y[self.rows(part)], n_clients=n_clients, alpha=alpha, rng=rng)
        return check_partition(parts, n)

    @property
    def positive_rate(self) -> float:
        return float(self.y.mean())


def check_training_classes(
    y: np.ndarray,
    schema: Schema | None = None,
    *,
    source: str = "",
    column: str = "y",
    labels: Sequence[Any] | None = None,
) -> None:
    """Refuse training labels of one class only: a classifier needs at least two.

    ``schema`` names the target column and its labels in the message (without one,
    as for an estimator fitted on arrays, ``column`` and the label: ``labels[code]``,
    the public label set ``y`` indexes, else the class code).

    Without this a fit "completes" on one class and its AUC is NaN. Which classes
    the rows hold is a fact about private rows, so this is a local check where the
    curator holds the training rows (a loaded dataset, an in-process fit): its error
    stays with the data's owner and is never released to the server (a Flower node
    sends only an error's code and column, :func:`fedpriv.errors.public_error`; a
    node holding one class is normal in a federation and is not checked here).

    Raises
    ------
    DataError
        ``code="one_class"``: ``the training rows hold one class only (label 0) ...``.
    """
    present = np.unique(np.asarray(y))
    if present.size != 1:
        return
    code = int(present[0])
    if schema is None:
        label = code if labels is None else np.asarray(labels)[code].item()
        raise DataError(
            f"the training rows hold one class only (label {label!r}): a classifier needs at "
            "least two",
            code="one_class",
            source=source,
            column=column,
        )
    target = schema.target
    if target.multiclass:
        what = f"label {target.labels[code]!r}"
        need = "at least two of the declared labels"
    else:
        side = (
            f"one of {list(target.positive)}" if code == 1 else f"none of {list(target.positive)}"
        )
        what = f"label {code}: {side}"
        need = "both"
    raise DataError(
        f"the training rows hold one class only ({what}): a classifier needs {need}; check "
        "the target column and the schema's positive labels",
        code="one_class",
        source=source,
        column=target.column,
    )


# --------------------------------------------------------------------------
# cache: encoded arrays keyed by input checksums + schema digest + options
# --------------------------------------------------------------------------
_CHECKSUMS: dict[tuple[str, int, int], str] = {}
_CACHE_VERSION = "data-4"  # 4: unit codes (a schema's unit_column)


def file_checksum(path: Path) -> str:
    """sha256 of a file's bytes (memoised by path, size and mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CHECKSUMS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _CHECKSUMS[key] = h.hexdigest()
    return _CHECKSUMS[key]


def cache_key(kind: str, files: list[Path], schema: Schema, options: dict[str, Any]) -> str:
    payload = json.dumps(
        {
            "version": _CACHE_VERSION,
            "kind": kind,
            "files": [file_checksum(Path(f)) for f in files],
            "schema": schema.digest(),
            "options": options,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _save(path: Path, ds: TabularDataset) -> None:
    meta = {
        "name": ds.name,
        "feature_names": list(ds.feature_names),
        "report": ds.report.to_dict(),
        "client_names": list(ds.client_names),
        "split_seed": ds.split.seed,
        "split_rule": ds.split.rule,
        "has_clients": ds.clients is not None,
        "has_units": ds.units is not None,
        # All-numeric corpora (BRFSS) have identical views: store one.
        "ordinal_is_onehot": ds.X.shape == ds.X_ordinal.shape
        and np.array_equal(ds.X, ds.X_ordinal),
    }
    arrays = {
        "X": ds.X,
        "y": ds.y,
        "train": ds.split.train,
        "val": ds.split.val,
        "test": ds.split.test,
        "clients": ds.clients if ds.clients is not None else np.zeros(0, dtype=np.int64),
        "units": ds.units if ds.units is not None else np.zeros(0, dtype=np.int64),
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    }
    if not meta["ordinal_is_onehot"]:
        arrays["X_ordinal"] = ds.X_ordinal
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def _load(path: Path, schema: Schema) -> TabularDataset:
    with np.load(path) as z:
        meta = json.loads(z["meta"].tobytes().decode())
        X = z["X"]
        return TabularDataset(
            name=meta["name"],
            schema=schema,
            X=X,
            X_ordinal=X if meta["ordinal_is_onehot"] else z["X_ordinal"],
            y=z["y"],
            feature_names=tuple(meta["feature_names"]),
            split=Split(
                train=z["train"],
                val=z["val"],
                test=z["test"],
                seed=meta["split_seed"],
                rule=meta["split_rule"],
            ),
            report=LoadReport.from_dict(meta["report"]),
            clients=z["clients"] if meta["has_clients"] else None,
            client_names=tuple(meta["client_names"]),
            units=z["units"] if meta.get("has_units") else None,
        )


def cached(
    kind: str,
    files: list[Path],
    schema: Schema,
    options: dict[str, Any],
    build: Callable[[], TabularDataset],
    *,
    use_cache: bool = True,
) -> TabularDataset:
    """Return the cached dataset for these inputs, building and storing it on a miss.

    Either way the load report's warnings (out-of-domain values, ignored
    columns) are logged: the user sees them at every load, not only the first.
    """
    ds = _cached(kind, files, schema, options, build, use_cache=use_cache)
    log_report(ds.report)
    return ds


def _cached(
    kind: str,
    files: list[Path],
    schema: Schema,
    options: dict[str, Any],
    build: Callable[[], TabularDataset],
    *,
    use_cache: bool,
) -> TabularDataset:
    root = cache_dir() if use_cache else None
    if root is None:
        return build()
    path = root / "data" / f"{kind}-{cache_key(kind, files, schema, options)}.npz"
    if path.exists():
        try:
            return _load(path, schema)
        except (OSError, ValueError, KeyError):
            pass  # a torn or stale file: rebuild it
    ds = build()
    try:
        _save(path, ds)
    except OSError:
        pass
    return ds
