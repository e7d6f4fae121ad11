"""Binary-classification metrics of a released model (post-processing: no privacy cost)."""

from __future__ import annotations

import numpy as np
from sklearn import metrics as skm


def binary_metrics(y_true: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """AUC, AUPRC, Brier score, accuracy at 0.5 and sensitivity/specificity at prevalence.

    The prevalence threshold is the (1 − prevalence) quantile of the scores,
    so that as many rows are flagged as there are positives (benchmark paper §4.3).
    """
    y = np.asarray(y_true).astype(np.int64)
    p = np.asarray(p, dtype=np.float64)
    thr = np.quantile(p, 1.0 - y.mean())
    flag = p >= thr
    tp, fn = int((flag & (y == 1)).sum()), int((~flag & (y == 1)).sum())
    tn, fp = int((~flag & (y == 0)).sum()), int((flag & (y == 0)).sum())
    return {
        "auc": float(skm.roc_auc_score(y, p)),
        "auprc": float(skm.average_precision_score(y, p)),
        "brier": float(skm.brier_score_loss(y, p)),
        "accuracy": float(((p >= 0.5) == y).mean()),
        "sensitivity_at_prevalence": tp / max(tp + fn, 1),
        "specificity_at_prevalence": tn / max(tn + fp, 1),
    }
