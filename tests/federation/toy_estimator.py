"""The toy plugin's scikit-learn estimator (``toy_method.py``).

Its own module: a :class:`~fedpriv.server.method_estimator.MethodEstimator`
subclass derives its parameters from the registered record when the class is
defined, so this module is imported once the record is registered (by the
registration's check, which resolves every part).
"""

from fedpriv.server.estimators import MethodEstimator

from tests.federation.toy_method import NAME


class ToyClassifier(MethodEstimator):
    """The toy's scikit-learn estimator: every parameter derived from the registry."""

    method = NAME
