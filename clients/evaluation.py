"""DP federated evaluation: the client half (per-class score histogram of held-out rows).

The query carries the released model as its training method's arrays
(``query.config["model_method"]``, ``query.arrays``); the client rebuilds it
with :data:`MODEL_LOADERS`, scores every one of its held-out rows (the
runtime gives this handler the client's test split) and returns the 2·B
counts of :func:`fedpriv.evaluation_dp.score_histogram`: one record adds 1 to
exactly one count (L1 = L2 sensitivity 1). A handler built with ``scorer=``
uses that instead (e.g. a model that is not a registered method's).

Binary tasks only: a score is P(y = 1 | x); labels outside {0, 1} count nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedpriv.evaluation_dp import check_bins, score_histogram
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.models.heavy_hitters import ForestModel, PrunedTree
from fedpriv.models.networks import NetworkModel
from fedpriv.models.trees import RandomTree, TreeEnsemble, route
from fedpriv.privacy.randomness import SecretKey

Scorer = Callable[[np.ndarray], np.ndarray]


def _random_forest(arrays: Mapping[str, np.ndarray]) -> Scorer:
    """P(y = 1) of a random forest's ``to_arrays()`` (strategies.random_forest): the mean
    over its complete trees of the leaf's class-1 score."""
    trees = [RandomTree(f, t) for f, t in zip(arrays["feature"], arrays["threshold"], strict=True)]
    scores = np.asarray(arrays["leaf_scores"], dtype=np.float64)  # (k, 2^D, C)

    def scorer(X: np.ndarray) -> np.ndarray:
        total = np.zeros(np.asarray(X).shape[0])
        for tree, leaf in zip(trees, scores, strict=True):
            total += leaf[route(tree, X), 1]
        return total / len(trees)

    return scorer


def _lumberjack(arrays: Mapping[str, np.ndarray]) -> Scorer:
    """P(y = 1) of a Lumberjack :class:`ForestModel`'s ``to_arrays()`` (trees concatenated)."""
    cuts = np.cumsum(np.asarray(arrays["tree_sizes"], dtype=np.int64))[:-1]
    parts = {k: np.split(np.asarray(arrays[k]), cuts) for k in ("feature", "threshold")}
    parts |= {k: np.split(np.asarray(arrays[k], dtype=np.int64), cuts) for k in ("left", "right")}
    trees = tuple(
        PrunedTree(f, t, lft, rgt, key=np.zeros(f.size, dtype=np.int64))
        for f, t, lft, rgt in zip(
            parts["feature"], parts["threshold"], parts["left"], parts["right"], strict=True
        )
    )
    leaf_scores = tuple(np.split(np.asarray(arrays["leaf_scores"], dtype=np.float64), cuts))
    model = ForestModel(trees, leaf_scores, pooled=bool(np.asarray(arrays["pooled"]).ravel()[0]))
    return model.predict_proba


def _predict_proba(model_class: Any) -> Callable[[Mapping[str, np.ndarray]], Scorer]:
    return lambda arrays: model_class.from_arrays(dict(arrays)).predict_proba


#: Training method -> rebuild its released model's arrays into a scorer X -> P(y = 1).
MODEL_LOADERS: dict[str, Callable[[Mapping[str, np.ndarray]], Scorer]] = {
    "boosting": _predict_proba(TreeEnsemble),
    "logistic": _predict_proba(NetworkModel),
    "mlp": _predict_proba(NetworkModel),
    "random_forest": _random_forest,
    "lumberjack": _lumberjack,
}


def load_scorer(method: str, arrays: Mapping[str, np.ndarray]) -> Scorer:
    """The scorer of the model ``method`` released as ``arrays``."""
    try:
        loader = MODEL_LOADERS[method]
    except KeyError:
        raise ValueError(
            f"model_method must be one of {sorted(MODEL_LOADERS)}; got {method!r}"
        ) from None
    return loader(arrays)


class EvaluationClient:
    """Client handler for :class:`strategies.evaluation.EvaluationStrategy`."""

    method = "evaluation"

    def __init__(self, scorer: Scorer | None = None) -> None:
        self.scorer = scorer

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        if np.asarray(sample).size != data.n:
            raise ValueError("the evaluation counts every held-out row: the sample must be all")
        bins = check_bins(int(query.config["bins"]))
        if query.reply_length != 2 * bins:
            raise ValueError(f"reply_length is {query.reply_length}; 2·bins is {2 * bins}")
        scorer = self.scorer
        if scorer is None:
            scorer = load_scorer(str(query.config["model_method"]), query.arrays)
        return score_histogram(scorer(data.X), data.y, bins)
