"""Defaults every estimator shares: secure aggregation on, fresh secret randomness."""

import inspect

import pytest
from fedpriv.server.estimators import DPBoostingClassifier, DPLogisticClassifier, DPMLPClassifier
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier

ESTIMATORS = [
    DPBoostingClassifier,
    DPLogisticClassifier,
    DPMLPClassifier,
    LumberjackClassifier,
    DPRandomForestClassifier,
]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_secure_aggregation_is_on_and_the_key_fresh_by_default(estimator):
    # The two forest estimators defaulted to plain sums (the server saw each vector).
    params = inspect.signature(estimator.__init__).parameters
    assert params["secure_aggregation"].default is True
    assert params["secret_key"].default is None  # None: a fresh OS-entropy key per fit
    est = estimator()
    assert est.get_params()["secure_aggregation"] is True
