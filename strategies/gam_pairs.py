"""DP-EBM's pair stage, the server half: select pairs from a release, then fit them.

Mixed into :class:`fedpriv.strategies.gam.DPGAMStrategy`; the maths and the coarse
bins are in :mod:`fedpriv.models.gam_pairs`.

Interactions (``interactions`` = P > 0, :mod:`fedpriv.models.gam_pairs`): the
last ``interaction_rounds`` rounds fit P pair terms. The first of them, the
*selection* round, asks for the per-cell sums of every candidate pair (all
pairs among the ``interaction_candidates`` terms of largest released
importance) at the current model: one release with sensitivity √(#candidate pairs)
times a column round's. The P pairs of largest noise-corrected gain are kept
and that release's sums are their first Newton step; each later round visits
one kept pair (cyclic) and asks for its per-cell sums (a column round's
sensitivity: one record, one cell). The selection costs one round of the plan
and reads nothing but released values; the pairs' coarse bins
(``interaction_bins`` per side) are post-processing of the released binning
and shapes. If the selection round is aborted, the remaining rounds keep
cycling over the columns.

Everything here reads the public configuration and released values only: the
importance of a column is the released-Σh weighted spread of its released
shape, the coarse bins follow the released binning and shapes, the gains the
released cell sums. The selection's reply comes divided by √P (each client
normalises it, :mod:`fedpriv.models.gam_sensitivity`) and is scaled back.
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.federation.protocol import Query
from fedpriv.models.gam_pairs import (
    PairTerm,
    candidate_pairs,
    coarse_map,
    pair_gain,
    pairs_to_arrays,
)

METHOD = "dp_gam"


def importance(shape: np.ndarray, hess: np.ndarray) -> float:
    """Released-Σh weighted mean |s − mean s| of one column's shape (all classes)."""
    w = np.maximum(hess, 0.0)
    total = w.sum()
    if not total > 0:
        return 0.0
    mean = (w * shape).sum(axis=0) / np.maximum(w.sum(axis=0), 1e-300)
    return float((w * np.abs(shape - mean)).sum() / total)


class PairStage:
    """The selection round and the pair rounds (needs the strategy's state)."""

    def _coarse(self, k: int) -> np.ndarray:
        terms, shape = self._live, self._shapes[k]
        nb = terms.n_bins(k)
        if terms.levels[k] > 0:  # one-hot: levels grouped by released shape value
            key = shape if shape.ndim == 1 else shape[:, int(np.argmax(np.ptp(shape, axis=0)))]
            order = np.argsort(key, kind="stable")
            return coarse_map(nb, self.config.interaction_bins, order=order, missing=False)
        missing = bool(terms.missing[k] >= 0)
        return coarse_map(nb, self.config.interaction_bins, order=None, missing=missing)

    def _candidates(self) -> list[PairTerm]:
        imp = np.array([importance(s, h) for s, h in zip(self._shapes, self._hess, strict=True)])
        tail = (self.n_classes,) if self.multiclass else ()
        out = []
        for a, b in candidate_pairs(imp, self.config.interaction_candidates):
            ma, mb = self._coarse(a), self._coarse(b)
            cells = (int(ma.max()) + 1) * (int(mb.max()) + 1)
            out.append(PairTerm(a, b, ma, mb, np.zeros((cells, *tail))))
        return out

    def pair_query(self, t: int) -> Query:
        width = self._width()
        arrays = self.model().to_arrays()
        if t == self.config.main_rounds:
            self._cands = self._candidates()
            arrays.update(pairs_to_arrays(self._cands, self._live.max_bins, prefix="candidate"))
            return Query(
                round=t,
                method=METHOD,
                sampling_rate=1.0,
                reply_length=width * sum(p.n_cells for p in self._cands),
                record_bound=1.0,
                arrays=arrays,
                config={
                    "phase": "select",
                    "candidates": len(self._cands),
                    "n_classes": self.n_classes,
                },
            )
        j = (t - self.config.main_rounds - 1) % len(self._pairs)
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=width * self._pairs[j].n_cells,
            record_bound=1.0,
            arrays=arrays,
            config={"phase": "pair", "pair": j, "n_classes": self.n_classes},
        )

    def update_pairs(self, query: Query, stats: np.ndarray) -> None:
        t, width = self._t, self._width()
        if query.config["phase"] == "select":
            cands = self._cands
            sens = math.sqrt(len(cands)) * self.term_sensitivity
            if stats.shape != (width * sum(p.n_cells for p in cands),):
                raise ValueError(f"round {t}: the candidates' cells do not match {stats.shape}")
            # The client divided the sums by √P (a column round's sensitivity): released
            # through the plan's stage, then scaled back (noise std z·√P·Δ).
            if self._noise is not None:
                label = f"round {t}: {len(cands)} candidate pairs' cell (Σg, Σh)"
                stats = self._noise.release(stats, label=label)
            stats = stats * math.sqrt(len(cands))
            sigma = 0.0 if self._noise is None else self.noise_multiplier_ * sens
            lam = self._lambda(sens)
            parts = np.split(stats, np.cumsum([width * p.n_cells for p in cands])[:-1])
            gains = [pair_gain(*part.reshape(2, -1), lam, sigma) for part in parts]
            keep = np.argsort(-np.array(gains), kind="stable")[: self.config.interactions]
            for i in keep:
                step, _ = self.newton_step(parts[i], cands[i].n_cells, sens)
                self._pairs.append(cands[i].with_values(step))
            return
        j = int(query.config["pair"])
        pair = self._pairs[j]
        if stats.shape != (width * pair.n_cells,):
            raise ValueError(f"round {t}: need {width * pair.n_cells} sums; got {stats.shape}")
        if self._noise is not None:
            label = f"round {t}: pair ({pair.a}, {pair.b}) cell (Σg, Σh)"
            stats = self._noise.release(stats, label=label)
        step, _ = self.newton_step(stats, pair.n_cells, self.term_sensitivity)
        self._pairs[j] = pair.with_values(pair.values + step)
