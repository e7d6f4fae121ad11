"""Evaluation: metrics of released models (:mod:`fedpriv.evaluation.metrics`) and the
DP federated evaluation's maths (:mod:`fedpriv.evaluation.dp`: the score histogram and
the metrics estimated from its noisy release). Its server and client halves are
:mod:`fedpriv.strategies.evaluation` and :mod:`fedpriv.clients.evaluation`; the
ServerApp runs it through :mod:`fedpriv.server.dp_evaluation`."""

from fedpriv.evaluation.metrics import base_rate_brier, binary_metrics, multiclass_metrics

__all__ = ["base_rate_brier", "binary_metrics", "multiclass_metrics"]
