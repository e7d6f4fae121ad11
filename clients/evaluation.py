"""DP federated evaluation: the client half (per-class score histogram of held-out rows).

The query carries the released model as its training method's arrays
(``query.config["model_method"]``, ``query.arrays``); the client rebuilds it
with :data:`MODEL_CLASSES`, scores every one of its held-out rows (the
runtime gives this handler the client's test split) and returns the 2·B
counts of :func:`fedpriv.evaluation_dp.score_histogram`: one record adds 1 to
at most one count (L1 = L2 sensitivity 1, whatever the model or scorer; the node
stage ``"histogram"``). A handler built with ``scorer=``
uses that instead (e.g. a model that is not a registered method's).

Binary tasks only: a score is P(y = 1 | x); labels outside {0, 1} count nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from fedpriv.clients.query_settings import count_setting

from fedpriv.evaluation_dp import SENSITIVITY, STAGE, check_bins, score_histogram
from fedpriv.federation.protocol import ClientData, Query, ReplySensitivity, require_every_record
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
    "random_forest": "fedpriv.strategies.random_forest:RandomForestModel",
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
    """Client handler for :class:`fedpriv.strategies.evaluation.EvaluationStrategy`."""

    method = "evaluation"

    def __init__(self, scorer: Scorer | None = None) -> None:
        self.scorer = scorer

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """Stage ``"histogram"``: one record moves one count by 1 (L1 = L2 = 1), for
        any ``bins`` and model; a query whose ``bins`` is invalid or disagrees with its
        ``reply_length`` is refused."""
        _bins(query)
        return ReplySensitivity(stage=STAGE, l1=SENSITIVITY, l2=SENSITIVITY)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        require_every_record(sample, data, "the evaluation counts every held-out row")
        bins = _bins(query)
        scorer = self.scorer
        if scorer is None:
            scorer = load_scorer(str(query.config["model_method"]), query.arrays)
        return score_histogram(scorer(data.X), data.y, bins)


def _bins(query: Query) -> int:
    """The query's B bins (even, in [2, 10000]), matching its reply length 2·B."""
    bins = check_bins(count_setting(query, "bins", minimum=2))
    if query.reply_length != 2 * bins:
        raise ValueError(f"reply_length is {query.reply_length}; 2·bins is {2 * bins}")
    return bins
