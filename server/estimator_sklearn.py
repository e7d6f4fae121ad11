"""The estimators' scikit-learn plumbing: tags, parameter checks, a repr without the key.

:class:`SklearnPlumbing` is mixed into :class:`fedpriv.server.estimator_base.Estimator`
ahead of scikit-learn's own classes: the tags the DP learners declare, ``set_params``
refusing unknown names, and the repr, HTML view and pickle that never show a
secret key. Apart from the estimator's fit and prediction, which are what the
privacy rules bear on.
"""

from __future__ import annotations

from typing import Any

from sklearn.base import BaseEstimator

from fedpriv.privacy.randomness import SecretKey


class _Hidden:
    """What the repr shows for a secret key."""

    def __repr__(self) -> str:
        return "<hidden>"


_HIDDEN = _Hidden()


class SklearnPlumbing:
    """Mixin of :class:`~fedpriv.server.estimator_base.Estimator` (before
    ``ClassifierMixin``): reads its ``_multi_class`` and ``secret_key``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True  # fresh noise at every fit without a secret_key
        tags.requires_fit = True
        tags.input_tags.allow_nan = False
        tags.classifier_tags.multi_class = self._multi_class
        tags.classifier_tags.poor_score = True  # DP noise swamps the checks' tiny data
        return tags

    def _public_view(self) -> SklearnPlumbing:
        """This estimator with its secret key replaced by a ``<hidden>`` marker (for display)."""
        if getattr(self, "secret_key", None) is None:
            return self
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__, secret_key=_HIDDEN)
        return view

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        return BaseEstimator.__repr__(self._public_view(), N_CHAR_MAX)

    def _get_params_html(self, deep: bool = True, doc_link: str = ""):
        return BaseEstimator._get_params_html(self._public_view(), deep, doc_link)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        key = state.get("secret_key")
        if isinstance(key, (bytes, bytearray)):
            # A SecretKey pickles as a redacted placeholder; raw bytes would be stored as is.
            state = {**state, "secret_key": SecretKey.coerce(key)}
        return state

    def set_params(self, **params: Any) -> SklearnPlumbing:
        allowed = self.get_params(deep=False)
        for k in params:
            if k.split("__", 1)[0] not in allowed:
                raise ValueError(
                    f"unknown parameter {k!r} of {type(self).__name__}; allowed: {sorted(allowed)}"
                )
        return super().set_params(**params)
