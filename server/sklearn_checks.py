"""Which of scikit-learn's estimator checks a DP learner fails by design, and why.

scikit-learn's ``check_estimator`` (1.9; ``tests/server/test_sklearn_contract.py``
runs every check on every estimator, with an injected ``secret_key`` so that
two fits can be compared). The API checks pass (clone, repr, no attributes
set in ``__init__``, parameters not overwritten, fit returns self,
``NotFittedError``, ``n_features_in_``, mixin order, tags), as do the
input-validation checks (dtypes, NaN/inf, complex, object, sparse refused,
empty data, one sample, 2-D ``y``, read-only memmaps, lists), pickling,
``check_fit_idempotent`` (same key, same model) and, for the binary
learners, ``check_classifier_not_supporting_multiclass`` and
``check_classifiers_train``. :func:`expected_failed_checks` lists the
failures by design and why; they share one cause: the checks read the label
set off the data (``np.unique(y)``), which a DP learner must not do.

The sample-order and subset invariance checks are not run
(``non_deterministic``); there is no ``sample_weight`` (a weight would scale
a record's contribution beyond its sensitivity).

Kept apart from :mod:`fedpriv.server.estimator_base` (the contract itself):
this is what the contract test (``tests/server/test_sklearn_contract.py``)
passes to ``check_estimator``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedpriv.server.estimator_base import Estimator

_FROM_DATA = "the check reads the label set off the data; a DP learner takes it from `classes`"
_NOT_BINARY = "the check's labels {0, 1, 2} are not the binary learner's public label set {0, 1}"


def expected_failed_checks(estimator: Estimator) -> dict[str, str]:
    """scikit-learn checks ``estimator`` fails by design, and why (``check_estimator``'s
    ``expected_failed_checks``). For a multiclass learner, with ``classes=[0, 1, 2]``
    (the checks' multiclass labels); for a binary learner, with the default {0, 1}.
    ``check_decision_proba_consistency`` (listed for K-logit models) may also pass:
    on two of three classes it compares P(class 1) with the mean of each row's
    three logits, whose order is up to the fit."""
    out = {
        "check_classifiers_classes": f"string labels: {_FROM_DATA}",
        "check_classifiers_regression_target": (
            "a continuous target is refused label by label against the public label set "
            "(DataError naming the first), not typed from the private rows"
        ),
    }
    if estimator._multi_class:
        out |= {
            "check_classifiers_train": f"binary and 3-class problems alike: {_FROM_DATA}",
            "check_dtype_object": f"labels 0..3 against classes [0, 1, 2]: {_FROM_DATA}",
        }
        if estimator._class_logits:
            out["check_decision_proba_consistency"] = (
                "it ranks decision_function as one binary score; with the public classes "
                "[0, 1, 2] it is the (n, 3) logits of the softmax model"
            )
        return out
    return out | {
        "check_estimators_dtypes": _NOT_BINARY,
        "check_classifier_data_not_an_array": _NOT_BINARY,
        "check_fit2d_1feature": _NOT_BINARY,
    }
