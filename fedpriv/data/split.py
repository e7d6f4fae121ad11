"""Train / validation / test splits, frozen by a recorded seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv.validation import check_open_unit


@dataclass(frozen=True)
class Split:
    """Row indices of each part and the seed (or rule) that defines them."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    seed: int | None
    rule: str


def stratified_indices(
    y: np.ndarray, fraction: float, rng: np.random.Generator, *, strata: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split rows into (rest, part) with ``fraction`` of every stratum in ``part``.

    Strata default to the labels; pass e.g. label × client to keep both.
    """
    check_open_unit("fraction", fraction)
    key = np.asarray(y) if strata is None else np.asarray(strata)
    part: list[np.ndarray] = []
    for value in np.unique(key):
        rows = rng.permutation(np.flatnonzero(key == value))
        part.append(rows[: round(fraction * rows.size)])
    chosen = np.sort(np.concatenate(part))
    rest = np.setdiff1d(np.arange(key.size), chosen, assume_unique=True)
    return rest, chosen


def make_split(
    y: np.ndarray,
    *,
    seed: int,
    test_fraction: float = 0.2,
    val_fraction: float = 0.2,
    strata: np.ndarray | None = None,
    test_rows: np.ndarray | None = None,
) -> Split:
    """Stratified train/val/test split; ``test_rows`` fixes an official test set instead."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    y = np.asarray(y)
    key = y if strata is None else np.asarray(strata)
    if test_rows is None:
        rest, test = stratified_indices(y, test_fraction, rng, strata=key)
        rule = f"stratified {1 - test_fraction:.0%}/{test_fraction:.0%} train/test"
    else:
        test = np.sort(np.asarray(test_rows))
        rest = np.setdiff1d(np.arange(y.size), test, assume_unique=True)
        rule = "official test file"
    tr_local, val_local = stratified_indices(y[rest], val_fraction, rng, strata=key[rest])
    return Split(
        train=rest[tr_local],
        val=rest[val_local],
        test=test,
        seed=seed,
        rule=f"{rule}; validation = {val_fraction:.0%} of train, stratified",
    )


def unit_split(
    units: np.ndarray,
    y: np.ndarray,
    *,
    seed: int,
    test_fraction: float = 0.2,
    val_fraction: float = 0.2,
    strata: np.ndarray | None = None,
) -> Split:
    """:func:`make_split` of the *units* (each stratified by its first row's ``strata``,
    default its label), every row in its unit's part: no unit is both trained on and
    scored (a patient's encounters all in train, or all in test)."""
    units, y = np.asarray(units), np.asarray(y)
    key = y if strata is None else np.asarray(strata)
    _, first = np.unique(units, return_index=True)  # each unit's first row
    first = np.sort(first)
    by_unit = make_split(
        y[first], seed=seed, test_fraction=test_fraction, val_fraction=val_fraction,
        strata=key[first],
    )  # fmt: skip
    part_of = np.empty(int(units.max(initial=-1)) + 1, dtype=np.int64)
    for i, rows in enumerate((by_unit.train, by_unit.val, by_unit.test)):
        part_of[units[first[rows]]] = i
    row_part = part_of[units]
    train, val, test = (np.flatnonzero(row_part == i) for i in range(3))
    return Split(train=train, val=val, test=test, seed=seed, rule=f"by unit: {by_unit.rule}")
