"""Evaluation: metrics of released models."""

from fedpriv.evaluation.metrics import base_rate_brier, binary_metrics, multiclass_metrics

__all__ = ["base_rate_brier", "binary_metrics", "multiclass_metrics"]
