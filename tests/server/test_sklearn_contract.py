"""The estimators are scikit-learn classifiers, with a public label set and a hidden key."""

import pickle
import warnings

import numpy as np
import pytest
from fedpriv.server.estimator_base import expected_failed_checks
from fedpriv.server.estimators import (
    BDPEClassifier,
    DPBoostingClassifier,
    DPLogisticClassifier,
    DPMLPClassifier,
)
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier
from sklearn.base import clone
from sklearn.model_selection import cross_val_score
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import check_estimator

from fedpriv.data import load_synthetic
from fedpriv.errors import DataError
from tests.keys import key_for

# Small and fast; a generous ε (these test the plumbing, not the privacy).
SMALL = {
    DPBoostingClassifier: {"rounds": 6, "depth": 2, "sampling_rate": 0.5},
    DPLogisticClassifier: {"rounds": 30, "sampling_rate": 0.5, "learning_rate": 2.0},
    DPMLPClassifier: {"rounds": 30, "sampling_rate": 0.5, "learning_rate": 2.0, "hidden": 4},
    # ε = 8: its leaf scale is the largest the ledger certifies, a 41-step bisection
    # of PLDs whose support grows as the noise shrinks (a config's first fit: ~12 s at
    # ε = 30, ~2.5 s at ε = 8). At ε = 8 it still clears every bar below by a wide
    # margin (key 1: cross-validated accuracy .93 against .75 and, 3 classes, .93
    # against .7; P(yes) gap .65 against .2), so a swapped column or label still fails.
    LumberjackClassifier: {"trees": 4, "depth": 8, "epsilon": 8.0},
    DPRandomForestClassifier: {"trees": 4, "depth": 4},
    BDPEClassifier: {"trees": 5, "depth": 2},
}
#: Tinier still for check_estimator's ~60 fits per estimator.
TINY = {
    DPBoostingClassifier: {"rounds": 2, "depth": 2},
    DPLogisticClassifier: {"rounds": 5, "sampling_rate": 0.5},
    # On check_estimator's few rows the recalibration's released class rates are
    # mostly noise (its two rounds would decide check_classifiers_one_label).
    DPMLPClassifier: {"rounds": 5, "sampling_rate": 0.5, "recalibrate_share": 0.0},
    LumberjackClassifier: {"trees": 2, "depth": 4},
    DPRandomForestClassifier: {"trees": 2, "depth": 3},
    # Declared (sklearn's check data: ≤ 1,000 rows a client): BDPE spending a budget just
    # off the accountant's grid (ε = 0.99 · 30 after a record count) overshoots it by a
    # PLD grid step on some check data, as BDPEClassifier(epsilon=29.7) does.
    BDPEClassifier: {"trees": 2, "depth": 2, "max_records": 1000},
}
ALL = list(SMALL)
FORESTS = [LumberjackClassifier, DPRandomForestClassifier]
#: Learners of any public label set (softmax for K > 2 classes; forests by class counts).
MULTICLASS = [DPBoostingClassifier, DPLogisticClassifier, DPMLPClassifier, *FORESTS]


def small(cls, **kw):
    return cls(**{"epsilon": 30.0, **SMALL[cls], "num_clients": 2, "secret_key": key_for(1), **kw})


def blobs(n=240, seed=0):
    """Two features in [0, 1]; "yes" iff x0 + x1 > 1 (a margin of 0.1 around the line)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (3 * n, 2))
    X = X[np.abs(X.sum(axis=1) - 1) > 0.1][:n]
    return X, np.where(X.sum(axis=1) > 1, "yes", "no")


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_check_estimator_passes_all_but_the_checks_failing_by_design(cls):
    est = small(cls, **TINY[cls], classes=[0, 1, 2] if cls in MULTICLASS else None)
    expected = expected_failed_checks(est)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, expected_failed_checks=expected, on_fail=None)
    status = {}
    for r in results:
        status.setdefault(r["check_name"], set()).add(r["status"])
    failed = sorted(k for k, v in status.items() if "failed" in v)
    assert failed == []
    # Every listed failure still fails (a stale entry would hide a fixed check), but
    # the rank check of K logits, which may pass or not (expected_failed_checks).
    may_pass = {"check_decision_proba_consistency"} if est._class_logits else set()
    xfailed = {k for k, v in status.items() if "xfail" in v}
    assert set(expected) - may_pass <= xfailed <= set(expected)
    for name in ("check_estimator_repr", "check_fit_idempotent", "check_estimators_pickle"):
        assert status[name] == {"passed"}
    assert len([k for k, v in status.items() if v == {"passed"}]) >= 40


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_cross_val_score_on_string_labels(cls):
    X, y = blobs()
    scores = cross_val_score(small(cls, classes=["no", "yes"]), X, y, cv=3)
    assert scores.shape == (3,)
    assert scores.mean() > 0.75, scores  # chance is ≈ .5


@pytest.mark.parametrize("cls", MULTICLASS, ids=lambda c: c.__name__)
def test_multiclass_learners_take_any_public_label_set(cls):
    X, y = blobs()
    y3 = np.where(X[:, 0] > 0.7, "c", y)
    # "d" never occurs in the rows: the label set is the parameter's, never the rows'.
    clf = small(cls, classes=["d", "c", "b", "a"]).fit(X, np.where(y3 == "yes", "a", "b"))
    assert clf.classes_.tolist() == ["a", "b", "c", "d"]
    proba = clf.predict_proba(X)
    assert proba.shape == (X.shape[0], 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(axis=1)])
    assert cross_val_score(small(cls, classes=["c", "no", "yes"]), X, y3, cv=3).mean() > 0.7


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_predict_and_proba_follow_classes(cls):
    X, y = blobs()
    clf = small(cls, classes=["yes", "no"])
    assert clf.fit(X, y) is clf
    assert clf.classes_.tolist() == ["no", "yes"]  # sorted: "yes" is the positive class
    assert clf.n_features_in_ == 2
    proba, pred = clf.predict_proba(X), clf.predict(X)
    assert set(pred) <= {"no", "yes"}
    np.testing.assert_array_equal(pred, np.where(clf.decision_function(X) > 0, "yes", "no"))
    # Column 1 is P(yes): high on the "yes" side of the line, low on the other.
    assert proba[y == "yes", 1].mean() > proba[y == "no", 1].mean() + 0.2


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_labels_outside_the_public_set_are_refused_by_name(cls):
    X, y = blobs(n=40)
    with pytest.raises(DataError, match=r"label 'maybe' \(row 3\) is outside the label set"):
        small(cls, classes=["no", "yes"]).fit(X, np.where(np.arange(40) == 3, "maybe", y))
    with pytest.raises(DataError, match=r"label 2 \(row 0\) is outside the label set \[0, 1\]"):
        small(cls).fit(X, np.r_[2, np.zeros(39, int)])  # default {0, 1}, as before
    with pytest.raises(DataError, match="label 'no'"):
        small(cls).fit(X, y)  # strings need their label set
    if cls not in MULTICLASS:
        with pytest.raises(ValueError, match=r"classes must hold exactly 2 labels"):
            small(cls, classes=["a", "b", "c"]).fit(X, y)


def test_a_dataset_takes_its_schemas_label_set():
    ds = load_synthetic(n=300)
    clf = small(DPBoostingClassifier).fit(ds)
    assert clf.classes_.tolist() == [0, 1] and clf.n_features_in_ == ds.X.shape[1]
    with pytest.raises(ValueError, match=r"schema's target.classes \[0, 1\]; got \['n', 'y'\]"):
        small(DPBoostingClassifier, classes=["n", "y"]).fit(ds)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_the_secret_key_is_hidden_but_cloned(cls):
    raw = bytes(range(7, 39))
    est = small(cls, secret_key=raw)
    text, html = repr(est), est._repr_html_()
    assert "secret_key=<hidden>" in text and "&lt;hidden&gt;" in html
    for shown in (text, html):  # neither the hex nor the (possibly truncated) bytes repr
        assert raw.hex() not in shown and repr(raw)[2:10] not in shown
    assert "secret_key" not in repr(small(cls, secret_key=None))
    assert clone(est).secret_key is raw  # stored as given: clone() needs the same object
    payload = pickle.dumps(est)
    assert raw not in payload
    assert repr(pickle.loads(payload).secret_key) == "SecretKey(<redacted>)"


def test_raw_key_bytes_are_coerced_in_fit_and_give_the_keys_model():
    X, y = blobs(n=60)
    raw = bytes(range(32))
    a = small(DPBoostingClassifier, secret_key=raw, classes=["no", "yes"]).fit(X, y)
    b = small(DPBoostingClassifier, secret_key=key_for(1), classes=["no", "yes"])
    b.set_params(secret_key=type(key_for(1))(raw)).fit(X, y)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))
    assert a.secret_key is raw  # fit does not rewrite a parameter


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_init_only_stores_and_fit_validates(cls):
    X, y = blobs(n=40)
    y = (y == "yes").astype(int)
    bad_classes, bad_key = small(cls, classes="ab"), small(cls, secret_key=123)
    assert bad_classes.classes == "ab" and bad_key.secret_key == 123
    with pytest.raises(ValueError, match="classes must be a 1-D sequence of labels; got 'ab'"):
        bad_classes.fit(X, y)
    with pytest.raises(TypeError, match="secret_key must be a SecretKey, bytes or None"):
        bad_key.fit(X, y)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_tags(cls):
    tags = get_tags(cls())
    assert tags.estimator_type == "classifier"
    assert tags.non_deterministic and tags.requires_fit and tags.target_tags.required
    assert tags.classifier_tags.multi_class is (cls in MULTICLASS)
    assert not tags.input_tags.allow_nan and not tags.input_tags.sparse
