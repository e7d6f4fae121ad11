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


def multiclass_metrics(y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Macro one-vs-rest AUC, multiclass Brier score and accuracy of class probabilities.

    ``proba`` has one column per class, in class order. The Brier score is
    Brier's (1950) original form, the mean over rows of Σ_k (p_k − 1[y = k])²;
    for two classes it is twice :func:`binary_metrics`' ``brier``.
    """
    y = np.asarray(y_true).astype(np.int64)
    p = np.asarray(proba, dtype=np.float64)
    onehot = np.eye(p.shape[1])[y]
    return {
        "auc": float(skm.roc_auc_score(y, p, multi_class="ovr", average="macro")),
        "brier": float(np.mean(np.sum((p - onehot) ** 2, axis=1))),
        "accuracy": float((np.argmax(p, axis=1) == y).mean()),
    }


def base_rate_brier(y_train: np.ndarray, y_eval: np.ndarray, n_classes: int = 2) -> float:
    """Brier score on ``y_eval`` of the constant predictor of ``y_train``'s class rates.

    The benchmark's floor for calibration: a learner whose Brier score exceeds
    it predicts worse probabilities than the base rate alone. Binary (two
    classes): the score of ``binary_metrics`` (the positive class only);
    otherwise that of :func:`multiclass_metrics`.
    """
    rates = np.bincount(np.asarray(y_train, dtype=np.int64), minlength=n_classes) / len(y_train)
    y = np.asarray(y_eval, dtype=np.int64)
    if n_classes == 2:
        return float(np.mean((rates[1] - y) ** 2))
    onehot = np.eye(n_classes)[y]
    return float(np.mean(np.sum((rates - onehot) ** 2, axis=1)))
