"""Pairwise interaction terms of DP-EBM (its second stage): 2-D shape functions.

A pair term (a, b) adds ``v[cell(x)]`` to the logit(s), where the cell is the
pair of *coarse* bins of x in terms a and b. The coarse bins are a public
function of the main terms' binning and of released values only
(:func:`coarse_map`): a threshold term's fine bins are grouped into at most
``coarse_bins − 1`` runs of consecutive bins (its missing bin keeps a group
of its own), a one-hot term's levels into at most ``coarse_bins`` groups of
levels with neighbouring released shape values. Every record sits in exactly
one cell of a pair, so a pair's per-cell ``[Σg | Σh]`` has the sensitivity
of a main term's per-bin reply.

Selection (:func:`pair_gain`): DP-EBM ranks all pairs with FAST on the
private data; here the ranking reads only a release: the per-cell sums of
every candidate pair at the current model, released together in one
Gaussian event (sensitivity √P times a term's, P candidates). The gain of a
pair is the loss reduction of one Newton step on its cells from those noisy
sums, ``½ Σ_cells Σg² / (max(Σh, 0) + λ)``, minus the same for the noise
alone (every candidate has its own number of cells, so the noise's expected
contribution, ``½ σ² Σ 1/(max(Σh, 0) + λ)``, is subtracted before ranking).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairTerm:
    """One interaction term: fine bin → coarse bin maps of terms a and b, and cell values.

    Attributes
    ----------
    a, b : int
        The two main terms (a < b).
    map_a, map_b : int64 arrays
        Coarse bin of every fine bin of term a (resp. b).
    values : (n_a · n_b,) or (n_a · n_b, C) float64
        The shape value(s) of every cell ``i · n_b + j``.
    """

    a: int
    b: int
    map_a: np.ndarray
    map_b: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        for name in ("map_a", "map_b"):
            m = np.asarray(getattr(self, name), dtype=np.int64).reshape(-1)
            if m.size == 0 or m.min() < 0:
                raise ValueError(f"{name} must map every fine bin to a coarse bin ≥ 0; got {m}")
            object.__setattr__(self, name, m)
        object.__setattr__(self, "a", int(self.a))
        object.__setattr__(self, "b", int(self.b))
        values = np.asarray(self.values, dtype=np.float64)
        if not 0 <= self.a < self.b or values.shape[:1] != (self.n_cells,):
            raise ValueError(
                f"pair ({self.a}, {self.b}) needs a < b and {self.n_cells} cells; "
                f"got values of shape {values.shape}"
            )
        object.__setattr__(self, "values", values)

    @property
    def n_a(self) -> int:
        return int(self.map_a.max()) + 1

    @property
    def n_b(self) -> int:
        return int(self.map_b.max()) + 1

    @property
    def n_cells(self) -> int:
        return self.n_a * self.n_b

    def cells(self, bins: np.ndarray) -> np.ndarray:
        """Cell of every row, from the (m, n) fine bins of the main terms."""
        return self.map_a[bins[self.a]] * self.n_b + self.map_b[bins[self.b]]

    def with_values(self, values: np.ndarray) -> PairTerm:
        return PairTerm(self.a, self.b, self.map_a, self.map_b, values)


def coarse_map(n_bins: int, coarse_bins: int, *, order: np.ndarray | None, missing: bool):
    """Fine bin → coarse bin of one term, at most ``coarse_bins`` groups.

    ``order``: ``None`` for a threshold term (consecutive bins grouped; its last
    bin, when ``missing``, is a group of its own); else the levels sorted by a
    released value (neighbours in that order grouped).
    """
    if order is None:
        body = n_bins - int(missing)
        groups = max(1, min(body, coarse_bins - int(missing)))
        out = (np.arange(body) * groups) // body
        return np.append(out, groups) if missing else out
    groups = min(n_bins, coarse_bins)
    out = np.empty(n_bins, dtype=np.int64)
    out[np.asarray(order, dtype=np.int64)] = (np.arange(n_bins) * groups) // n_bins
    return out


def newton_gain(sum_g: np.ndarray, sum_h: np.ndarray, lam: float) -> float:
    """½ Σ Σg² / (max(Σh, 0) + λ) over all cells (and classes)."""
    return float(0.5 * np.sum(np.square(sum_g) / (np.maximum(sum_h, 0.0) + lam)))


def pair_gain(sum_g: np.ndarray, sum_h: np.ndarray, lam: float, sigma: float) -> float:
    """The Newton gain of a pair from released sums, less the noise's expected share."""
    noise = 0.5 * sigma**2 * float(np.sum(1.0 / (np.maximum(sum_h, 0.0) + lam)))
    return newton_gain(sum_g, sum_h, lam) - noise


def candidate_pairs(importance: np.ndarray, n_terms: int) -> list[tuple[int, int]]:
    """All pairs among the ``n_terms`` terms of largest ``importance`` (released values)."""
    top = np.sort(np.argsort(-np.asarray(importance), kind="stable")[:n_terms])
    return [(int(a), int(b)) for i, a in enumerate(top) for b in top[i + 1 :]]


def pairs_to_arrays(
    pairs: tuple[PairTerm, ...], width: int, prefix: str = "pair"
) -> dict[str, np.ndarray]:
    """``pairs`` (P, 2), ``pair_maps`` (P, 2, width) padded with −1, ``pair_values``
    (P, cells[, C]) padded with 0 (``prefix`` replaces ``pair``)."""
    cells = max(p.n_cells for p in pairs)
    tail = pairs[0].values.shape[1:]
    maps = np.full((len(pairs), 2, width), -1, dtype=np.int64)
    values = np.zeros((len(pairs), cells, *tail))
    for i, p in enumerate(pairs):
        maps[i, 0, : p.map_a.size] = p.map_a
        maps[i, 1, : p.map_b.size] = p.map_b
        values[i, : p.n_cells] = p.values
    ab = np.array([[p.a, p.b] for p in pairs], dtype=np.int64)
    return {f"{prefix}s": ab, f"{prefix}_maps": maps, f"{prefix}_values": values}


def pairs_from_arrays(arrays, n_bins, prefix: str = "pair") -> tuple[PairTerm, ...]:
    """Inverse of :func:`pairs_to_arrays`; ``n_bins(k)``: fine bins of main term k."""
    if f"{prefix}s" not in arrays:
        return ()
    ab = np.asarray(arrays[f"{prefix}s"], dtype=np.int64).reshape(-1, 2)
    maps = np.asarray(arrays[f"{prefix}_maps"], dtype=np.int64)
    values = np.asarray(arrays[f"{prefix}_values"], dtype=np.float64)
    out = []
    for i, (a, b) in enumerate(ab):
        ma, mb = maps[i, 0, : n_bins(int(a))], maps[i, 1, : n_bins(int(b))]
        cells = (int(ma.max()) + 1) * (int(mb.max()) + 1)
        out.append(PairTerm(a, b, ma, mb, values[i, :cells]))
    return tuple(out)
