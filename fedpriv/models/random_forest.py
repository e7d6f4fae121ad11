"""The released model of the DP random forest: complete random trees and leaf scores.

The trees are data-independent (:func:`fedpriv.strategies.random_forest.random_complete_tree`);
only each leaf's class scores are released, once, by the leaf mechanism of
:mod:`fedpriv.strategies.random_forest`. A row's score is the average of the
leaves it reaches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedpriv.models.base import ReleasedModel
from fedpriv.models.trees import RandomTree, route


@dataclass(frozen=True)
class RandomForestModel(ReleasedModel):
    """Complete random trees and each leaf's released class scores."""

    trees: tuple[RandomTree, ...]
    leaf_scores: np.ndarray  # (k, 2^D, C)

    def class_scores(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        total = np.zeros((X.shape[0], self.leaf_scores.shape[2]))
        for tree, scores in zip(self.trees, self.leaf_scores, strict=True):
            total += scores[route(tree, X)]
        return total / len(self.trees)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.class_scores(X)[:, 1]

    def explain(self, schema=None):
        """Internal nodes per schema column (:class:`fedpriv.models.explain_trees.SplitUsage`)."""
        from fedpriv.models.explain_trees import RANDOM, split_usage

        feats = np.concatenate([t.feature for t in self.trees])
        return split_usage(feats, schema, trees=len(self.trees), origin=RANDOM)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X) - 0.5

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": np.stack([t.feature for t in self.trees]),
            "threshold": np.stack([t.threshold for t in self.trees]),
            "leaf_scores": self.leaf_scores,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> RandomForestModel:
        """Inverse of :meth:`to_arrays`."""
        trees = tuple(
            RandomTree(f, t) for f, t in zip(arrays["feature"], arrays["threshold"], strict=True)
        )
        return cls(trees=trees, leaf_scores=np.asarray(arrays["leaf_scores"]))
