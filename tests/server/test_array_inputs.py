"""Arrays get the checks a CSV gets: finite features (NaN/inf named by row and column) and
values outside the public box [0, 1] counted in a warning. (Labels outside the public
label set: ``tests/data/test_label_sets.py``.)"""

import logging
import math

import numpy as np
import pytest
from fedpriv.server.estimator_base import federated_training_data
from fedpriv.server.estimators import DPBoostingClassifier, DPLogisticClassifier, DPMLPClassifier
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier

from tests.keys import key_for

#: The cheapest fit of each learner (the checks run before any training).
TINY = {
    DPBoostingClassifier: {"rounds": 2, "depth": 2},
    DPLogisticClassifier: {"rounds": 4, "sampling_rate": 0.5},
    DPMLPClassifier: {"rounds": 4, "sampling_rate": 0.5, "hidden": 2},
    LumberjackClassifier: {"trees": 1, "depth": 2},
    DPRandomForestClassifier: {"trees": 1, "depth": 2},
}
ALL = list(TINY)


def _tiny(cls):
    # Non-private: no noise calibration to pay for (these test input checks, not privacy).
    return cls(**TINY[cls], epsilon=math.inf, num_clients=2, secret_key=key_for(3))


def _data(n=24):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (n, 3))
    return X, (X[:, 0] > 0.5).astype(np.int64)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize(("value", "what"), [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_non_finite_feature_is_named_by_row_and_column(cls, value, what):
    X, y = _data()
    X[7, 2] = value
    X[9, 0] = np.nan
    with pytest.raises(ValueError, match=rf"X contains {what}\w* at row 7, column 2 \(2 non-"):
        _tiny(cls).fit(X, y)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_predict_proba_names_a_non_finite_feature(cls):
    X, y = _data()
    est = _tiny(cls).fit(X, y)
    X[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN at row 4, column 1 \(1 non-finite"):
        est.predict_proba(X)


def test_federated_training_data_refuses_non_finite_arrays():
    X, y = _data()
    X[3, 1] = np.inf
    with pytest.raises(ValueError, match=r"X contains infinity at row 3, column 1"):
        federated_training_data(X, y, None, 2)


def test_values_outside_the_public_box_are_counted_in_a_warning(caplog):
    X, y = _data()
    X[2, 1], X[5, 1], X[6, 0] = 3.0, -0.5, 1.5
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        _tiny(DPBoostingClassifier).fit(X, y)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "X has 3 value(s) outside the public box [0, 1] in column(s) [0, 1]: trees draw "
        "thresholds in [0, 1] and send them to the nearest edge; scale each feature by public "
        "bounds (a schema does this)"
    ]
