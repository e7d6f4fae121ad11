"""Lumberjack's leaf release (mixed into :class:`fedpriv.strategies.lumberjack.LumberjackStrategy`).

The last round's leaf class counts become each leaf's scores: Gaussian noise on
the fixed-point grid (pooled over the forest), or one exponential-mechanism label
per leaf (Lebeda et al., "Lumberjack", §4: the leaf mechanisms), or the majority
class without privacy. Every tree's leaf event is recorded through the release
stage before any leaf noise is drawn (:mod:`fedpriv.privacy.release_stage`).
"""

from __future__ import annotations

import numpy as np

from fedpriv.models.heavy_hitters import ForestModel, exponential_labels
from fedpriv.privacy.randomness import gaussian_on_grid
from fedpriv.privacy.range_guard import gaussian_margin, sum_bound
from fedpriv.privacy.release_stage import ReleaseStage


def _one_hot(labels: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Rows of ``like``'s shape with a 1 at each row's label."""
    out = np.zeros(like.shape)
    out[np.arange(labels.size), labels] = 1.0
    return out


def _majority(mine: np.ndarray) -> np.ndarray:
    """Each leaf's majority class, one-hot (the non-private reference)."""
    return _one_hot(np.argmax(mine, axis=1), mine)


class LumberjackLeaves:
    """The leaf round's release; the strategy provides ``config``, ``n_classes``,
    ``n_records``, ``unit_records``, ``eta_``, ``leaf_noise``, ``_trees``, ``_budget``,
    ``_ledger``, ``_secret_rng`` and ``_events``."""

    def _release_leaves(self, counts: np.ndarray) -> None:
        cfg = self.config
        counts = counts.reshape(-1, self.n_classes)
        if self._budget is None:  # the non-private reference: each leaf's majority class
            scores = self._leaf_scores(counts, _majority)
            self._model = ForestModel(tuple(self._trees), tuple(scores), pooled=False)
            return
        gaussian = cfg.leaf_mechanism == "gaussian"
        if gaussian:
            leaf_std = self.leaf_noise(counts.size)

            def leaves(rng):
                return self._leaf_scores(counts, lambda mine: gaussian_on_grid(mine, leaf_std, rng))
        else:

            def leaves(rng):
                # A unit moves a tree's counts by up to m in all: η/m per count keeps each
                # tree's labels η-bounded-range per unit (:mod:`fedpriv.privacy.units`).
                eta = self.eta_ / self.unit_records
                return self._leaf_scores(
                    counts, lambda mine: _one_hot(exponential_labels(mine, eta, rng), mine)
                )

        # Every tree's leaf event is recorded before any leaf noise is drawn; one record
        # adds 1 to one leaf count per tree, so every honest Gaussian count is ≤ n.
        stage = ReleaseStage(ledger=self._ledger, rng=self._secret_rng, event=self._events[1][0])
        scores = stage.select(
            leaves,
            label=[f"tree {k}: leaf labels" for k in range(cfg.trees)],
            bound=sum_bound(1.0, self.n_records, sampling_rate=1.0) if gaussian else None,
            margin=(lambda d: gaussian_margin(leaf_std, d)) if gaussian else None,
        )
        self._model = ForestModel(tuple(self._trees), tuple(scores), pooled=gaussian)

    def _leaf_scores(self, counts: np.ndarray, leaf_values) -> list[np.ndarray]:
        """Each tree's node scores: ``leaf_values(mine)`` at its leaves, 0 elsewhere."""
        scores, start = [], 0
        for tree in self._trees:
            leaf = tree.is_leaf
            mine = counts[start : start + int(leaf.sum())]
            start += mine.shape[0]
            out = np.zeros((tree.left.size, self.n_classes))
            out[leaf] = leaf_values(mine)
            scores.append(out)
        if start != counts.shape[0]:
            raise ValueError(f"reply holds {counts.shape[0]} leaves; the forest has {start}")
        return scores
