"""Evaluation: metrics of released models."""

from fedpriv.evaluation.metrics import binary_metrics

__all__ = ["binary_metrics"]
