"""DP federated evaluation: the client half (per-class score histogram of held-out rows).

The query carries the released model as its training method's arrays
(``query.config["model_method"]``, ``query.arrays``); the client rebuilds it
with :data:`MODEL_CLASSES`, scores every one of its held-out rows (the
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
from fedpriv.federation.protocol import ClientData, Query, require_every_record
from fedpriv.methods import resolve
from fedpriv.privacy.randomness import SecretKey

Scorer = Callable[[np.ndarray], np.ndarray]


#: Training method -> the class of its released model (``from_arrays`` rebuilds it), as
#: an import path resolved on use (the random forest's model lives with its strategy).
MODEL_CLASSES: dict[str, str] = {
    "boosting": "fedpriv.models.trees:TreeEnsemble",
    "dp_gam": "fedpriv.models.gam:GAMModel",
    "logistic": "fedpriv.models.networks:NetworkModel",
    "mlp": "fedpriv.models.networks:NetworkModel",
    "random_forest": "strategies.random_forest:RandomForestModel",
    "lumberjack": "fedpriv.models.heavy_hitters:ForestModel",
}


def load_scorer(method: str, arrays: Mapping[str, np.ndarray]) -> Scorer:
    """The scorer of the model ``method`` released as ``arrays``."""
    try:
        path = MODEL_CLASSES[method]
    except KeyError:
        raise ValueError(
            f"model_method must be one of {sorted(MODEL_CLASSES)}; got {method!r}"
        ) from None
    return resolve(path).from_arrays(dict(arrays)).predict_proba


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
        require_every_record(sample, data, "the evaluation counts every held-out row")
        bins = check_bins(int(query.config["bins"]))
        if query.reply_length != 2 * bins:
            raise ValueError(f"reply_length is {query.reply_length}; 2·bins is {2 * bins}")
        scorer = self.scorer
        if scorer is None:
            scorer = load_scorer(str(query.config["model_method"]), query.arrays)
        return score_histogram(scorer(data.X), data.y, bins)
