"""Unit-level privacy: at most m records per unit, whole units sampled, sensitivity per unit.

A schema's ``unit_column`` (:mod:`fedpriv.data.units`) asks for a guarantee per
unit (a patient): neighbouring datasets differ by one unit with *all* its
records. Three things make each release's sensitivity a unit's:

1. **Contribution bounding** (:func:`bound_units`). Each node keeps at most m =
   ``max_records_per_unit`` records of every unit, a uniformly random subset of
   that unit's records drawn from its own secret key. Every record gets an
   i.i.d. uniform priority and a unit keeps its m lowest. Independent across
   units, so the subset a unit keeps does not depend on any other unit's
   records (removing a unit removes its priorities and leaves everyone else's:
   the couplings behind the DP argument hold record by record). Nothing about
   how many records a unit had leaves the node: the bound is public, the
   counts are never read into anything released.
2. **Unit sampling** (:func:`unit_sample`). Poisson subsampling amplifies a
   unit's privacy only if the unit is in or out as a whole: sampling its m
   records independently at rate q includes some of them with probability
   1 − (1 − q)^m ≈ m·q, not q. A node with units draws one Poisson(q) coin per
   unit (from the same private stream as record coins) and a sampled unit
   answers with all its kept records.
3. **Sensitivity per unit** (:func:`scale_sensitivity`). A unit moves any sum of
   per-record contributions by at most m times one record's bound (triangle
   inequality, L1 and L2 alike), so histogram and tree learners calibrate to
   m·Δ and a node accounts with m·Δ. DP-SGD clips per unit instead (the sum of a
   unit's per-example gradients clipped to C), keeping Δ = C.

Units must not span nodes: each node bounds only its own records, so a unit held
by two nodes could contribute 2m. A node cannot check this without the other
nodes' ids, which never leave them: it is the schema's public precondition
``unit_scope = "node"``, which the consortium guarantees (one hospital's
patient ids, or ids de-duplicated across sites before the run). A simulation
on one file holds every row and checks it (:func:`check_units_within_clients`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv.errors import DataError
from fedpriv.privacy.randomness import SecretKey, check_private

#: The key path of a node's contribution-bounding coins (one subset per run's key).
BOUND_PATH = "unit-bound"


@dataclass(frozen=True, kw_only=True)
class UnitRows:
    """A node's rows after contribution bounding: which it keeps, and their units.

    ``rows``: sorted indices into the node's rows; ``units``: each kept row's unit
    as a dense code 0 … U − 1 (U kept units, in order of first appearance).
    """

    rows: np.ndarray
    units: np.ndarray

    @property
    def n_units(self) -> int:
        return int(self.units.max(initial=-1)) + 1


def dense_units(codes: np.ndarray) -> np.ndarray:
    """Codes 0 … U − 1 in order of first appearance (the same partition of the rows)."""
    codes = np.asarray(codes)
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def bound_units(codes: np.ndarray, max_records: int, rng: np.random.Generator) -> UnitRows:
    """Keep at most ``max_records`` rows of each unit: a uniformly random subset per unit.

    ``codes``: each row's unit (any integer codes); ``rng``: the node's private
    stream (:func:`bounding_generator`), never a seeded one. Each row draws an
    i.i.d. uniform priority and every unit keeps its ``max_records`` lowest
    (module docstring, 1); a unit with fewer rows keeps them all.
    """
    check_private("rng", rng)
    if isinstance(max_records, bool) or not isinstance(max_records, int | np.integer):
        raise TypeError(f"max_records must be an integer; got {max_records!r}")
    if max_records < 1:
        raise ValueError(f"max_records must be an integer in [1, inf); got {max_records!r}")
    units = dense_units(codes)
    n = units.size
    priority = rng.random(n)  # one coin per row, whatever the unit sizes
    order = np.lexsort((priority, units))  # by unit, then priority
    ranked = units[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if n else np.zeros(0, int)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    keep = np.sort(order[rank < max_records])
    return UnitRows(rows=keep, units=dense_units(units[keep]))


def bounding_generator(key: SecretKey, *path: int | str) -> np.random.Generator:
    """The contribution-bounding stream of a node's ``key`` (under ``path``, e.g. the
    held-out rows): private, and the same for every round of a run."""
    return key.generator(BOUND_PATH, *path)


def unit_sample(
    units: np.ndarray, n_units: int, rate: float, rng: np.random.Generator
) -> np.ndarray:
    """Sorted row indices of a Poisson(``rate``) sample of whole units (module docstring, 2).

    One private coin per unit 0 … ``n_units`` − 1, drawn exactly as
    :func:`fedpriv.federation.protocol.poisson_sample` draws one per record; a
    sampled unit brings every one of its rows.
    """
    from fedpriv.federation.protocol import poisson_sample

    picked = poisson_sample(n_units, rate, rng)
    if rate == 1.0:
        return np.arange(np.asarray(units).size, dtype=np.int64)
    chosen = np.zeros(max(n_units, 0), dtype=bool)
    chosen[picked] = True
    return np.flatnonzero(chosen[units]) if units.size else np.zeros(0, dtype=np.int64)


def scale_sensitivity(l1: float, l2: float, max_records: int) -> tuple[float, float]:
    """(L1, L2) of a unit of at most ``max_records`` records, each moving a sum by at
    most (``l1``, ``l2``): ``max_records`` times both (triangle inequality)."""
    m = int(max_records)
    if m < 1:
        raise ValueError(f"max_records must be an integer in [1, inf); got {max_records!r}")
    return m * float(l1), m * float(l2)


def check_units_within_clients(
    units: np.ndarray, partition: Sequence[np.ndarray], *, column: str, source: str = ""
) -> None:
    """Refuse (``DataError`` ``unit_spans_clients``) a unit whose rows two clients hold.

    ``units``: each row's unit code; ``partition``: each client's row indices. Only
    where one party holds every row (a simulation on one file, an in-process fit):
    the message names the clients, never a unit id or a count.
    """
    units = np.asarray(units)
    owner = np.full(units.size, -1, dtype=np.int64)
    for k, rows in enumerate(partition):
        owner[np.asarray(rows, dtype=np.int64)] = k
    held = owner >= 0
    if not held.any():
        return
    u, c = units[held], owner[held]
    order = np.lexsort((c, u))
    u, c = u[order], c[order]
    clash = (u[1:] == u[:-1]) & (c[1:] != c[:-1])
    if clash.any():
        i = int(np.flatnonzero(clash)[0])
        raise DataError(
            f"a unit's records are held by clients {int(c[i])} and {int(c[i + 1])}: "
            "unit-level privacy bounds each unit per node, so a unit may not span "
            "clients (unit_scope = 'node'); give each unit's records to one client",
            code="unit_spans_clients",
            source=source,
            column=column,
        )
