"""Cells: the unit of work (one fit and its evaluation), their cache and the process pool.

A :class:`Cell` is everything that determines a result: learner, parameters,
(ε, δ), run seed, which rows train and which evaluate. Its cache key is a
SHA-256 of that content (plus :data:`CELL_VERSION`), so a finished cell is
never recomputed and an interrupted study resumes where it stopped. The
private randomness of a cell (noise, coins) comes from the subkey of its
content key (:mod:`fedpriv.experiments.keys`), never from its seed, and the secret
never enters the cache key: a cached result is one draw of the cell.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Bump when a change alters what a cell computes: every key changes with it.
CELL_VERSION = "bench-2"
KINDS = ("fit", "mia", "offpath")
PARTS = ("train", "train+val")
EVAL_PARTS = ("val", "test")


def content_key(version: str, cell: Any) -> str:
    """SHA-256 of a frozen cell dataclass's fields (``params`` pairs as lists) and ``version``."""
    content = {"version": version, **asdict(cell)}
    content["params"] = [list(p) for p in cell.params]
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Cell:
    """One fit of one learner configuration at one (ε, δ) and seed, and what it is scored on.

    ``kind="fit"`` trains on ``train_part`` and scores ``eval_part``
    (:func:`fedpriv.evaluation.metrics.binary_metrics`); ``"mia"`` and
    ``"offpath"`` are the §5.5 attack cells (:mod:`fedpriv.experiments.bench.mia`).
    ``params`` is a sorted tuple of (name, value) pairs.
    """

    kind: str
    dataset: str
    learner: str
    params: tuple[tuple[str, Any], ...]
    epsilon: float  # math.inf: the non-private reference
    delta: float
    seed: int
    train_part: str = "train+val"
    eval_part: str = "test"
    n_clients: int = 5
    secure_aggregation: bool = False
    members: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}; got {self.kind!r}")
        if self.train_part not in PARTS:
            raise ValueError(f"train_part must be one of {list(PARTS)}; got {self.train_part!r}")
        if self.eval_part not in EVAL_PARTS:
            raise ValueError(f"eval_part must be one of {list(EVAL_PARTS)}; got {self.eval_part!r}")
        if not (0.0 < self.epsilon <= 100.0 or self.epsilon == math.inf):
            raise ValueError(f"epsilon must lie in (0, 100] or be inf; got {self.epsilon!r}")
        if not (0.0 < self.delta < 1.0):
            raise ValueError(f"delta must lie in (0, 1); got {self.delta!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be an integer in [0, inf); got {self.seed!r}")

    @classmethod
    def make(cls, kind: str, dataset: str, learner: str, params: dict[str, Any], **kw) -> Cell:
        return cls(kind, dataset, learner, tuple(sorted(params.items())), **kw)

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        """Stable content hash: same cell, same key, in every process and session."""
        return content_key(CELL_VERSION, self)


class CellCache:
    """One JSON file per finished cell under ``root`` (``root/ab/abcdef….json``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, cell: Cell) -> dict[str, Any] | None:
        try:
            with open(self._path(cell.key), encoding="utf-8") as fh:
                return json.load(fh)["result"]
        except (OSError, ValueError, KeyError):
            return None

    def put(self, cell: Cell, result: dict[str, Any]) -> None:
        path = self._path(cell.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"cell": asdict(cell), "key": cell.key, "result": result}, fh)
        os.replace(tmp, path)


# -- execution ------------------------------------------------------------------------
def fit_cell(cell: Cell) -> dict[str, Any]:
    """Train ``cell``'s learner on its ``train_part`` and score its ``eval_part``."""
    import numpy as np
    from fedpriv.experiments.bench import learners
    from fedpriv.experiments.keys import secret_key_for
    from sklearn.metrics import log_loss

    from fedpriv.evaluation.metrics import base_rate_brier, binary_metrics, multiclass_metrics

    clf, ds, seconds = learners.fitted(cell, cell.train_part, secret_key_for("cell", cell.key))
    X, y = ds.xy(cell.eval_part)
    proba = clf.predict_proba(X)
    n_classes = proba.shape[1]
    if n_classes == 2:
        out: dict[str, Any] = binary_metrics(y, proba[:, 1])
    else:
        out = multiclass_metrics(y, proba)
    out["logloss"] = float(
        log_loss(y, np.clip(proba, 1e-12, 1.0 - 1e-12), labels=list(range(n_classes)))
    )
    # The calibration floor: the constant predictor of the training rows' class rates.
    out["brier_base"] = base_rate_brier(ds.xy(cell.train_part)[1], y, n_classes)
    comm = clf.communication_
    out.update(
        epsilon_spent=clf.epsilon_spent_,
        floats_per_client=float(comm.floats_uploaded.mean()),
        rounds=int(comm.rounds),
        noise_multiplier=_finite_or_none(clf.noise_multiplier_),
        seconds=seconds,
    )
    return out


def _finite_or_none(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def execute(cell: Cell) -> dict[str, Any]:
    """Run one cell in this process (the pool's task)."""
    if cell.kind == "fit":
        return fit_cell(cell)
    from fedpriv.experiments.bench import mia

    return mia.attack_cell(cell) if cell.kind == "mia" else mia.offpath_cell(cell)


def _worker_init() -> None:
    # Thread limits come from the parent's environment (experiments/benchmark.py).
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)


def make_pool(processes: int) -> Executor | None:
    """A pool of ``processes`` spawned workers (``None`` for one: run in process)."""
    if processes <= 1:
        return None
    ctx = multiprocessing.get_context("spawn")  # no fork after torch/numba threads exist
    return ProcessPoolExecutor(max_workers=processes, mp_context=ctx, initializer=_worker_init)


def run_cells(
    cells: Iterable[Cell],
    cache: CellCache,
    pool: Executor | None,
    *,
    desc: str,
    runner: Callable[[Cell], dict[str, Any]] = execute,
) -> dict[Cell, dict[str, Any]]:
    """Results of ``cells`` (deduplicated), from the cache or computed, with a progress bar."""
    from tqdm import tqdm

    todo = list(dict.fromkeys(cells))
    results: dict[Cell, dict[str, Any]] = {}
    missing = []
    for c in todo:
        hit = cache.get(c)
        if hit is None:
            missing.append(c)
        else:
            results[c] = hit
    bar = tqdm(total=len(todo), initial=len(todo) - len(missing), desc=desc, unit="cell")
    try:
        if pool is None:
            for c in missing:
                results[c] = runner(c)
                cache.put(c, results[c])
                bar.update()
        else:
            futures = {pool.submit(runner, c): c for c in missing}
            for fut in as_completed(futures):
                c = futures[fut]
                results[c] = fut.result()
                cache.put(c, results[c])
                bar.update()
    finally:
        bar.close()
    return {c: results[c] for c in todo}
