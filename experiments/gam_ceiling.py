"""Non-private references on Diabetes 130-US: boosted trees against a linear model.

Fits, without any noise, on the benchmark's training split of Diabetes 130-US
(K = 5) and scores test AUC: scikit-learn's histogram gradient boosting (500
rounds of η = 0.05; its default early stopping ends the additive variant
early, at 0.641), and an L2-penalised logistic regression (C = 1) on the
one-hot encoding (the model class of DP-SGD logistic regression), next to
``dp_gam`` itself without noise (ε = ∞, 16 equal-width bins, η = 0.3,
λ = 0, one round per column) after 122 and 400 rounds, fitted as the matched
benchmark fits it (:func:`fedpriv.experiments.bench.cells.fit_cell`, train + val).

Usage::

    python -m fedpriv.experiments.gam_ceiling
"""

from __future__ import annotations

import logging
import math

from fedpriv.experiments.bench.cells import Cell, fit_cell
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from fedpriv.data import load_diabetes130

log = logging.getLogger(__name__)


def ceilings() -> dict[str, float]:
    """Test AUC of each non-private reference model."""
    d = load_diabetes130(n_clients=5)
    tr, te = d.split.train, d.split.test
    models = {
        "trees (HGB)": HistGradientBoostingClassifier(
            learning_rate=0.05, max_iter=500, random_state=0
        ),
        "logistic regression (C = 1)": LogisticRegression(C=1.0, max_iter=2000),
    }
    out = {}
    for name, model in models.items():
        model.fit(d.X[tr], d.y[tr])
        out[name] = float(roc_auc_score(d.y[te], model.predict_proba(d.X[te])[:, 1]))
    for rounds in (122, 400):
        params = dict(rounds=rounds, bins=16, quantile_bins=False, learning_rate=0.3, lam=0.0,
                      binary_group=0)  # fmt: skip
        cell = Cell.make("fit", "diabetes130", "dp_gam", params, epsilon=math.inf, delta=1e-5,
                         seed=0)  # fmt: skip
        out[f"dp_gam, ε = ∞, {rounds} rounds"] = fit_cell(cell)["auc"]
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, auc in ceilings().items():
        log.info("%-40s test AUC %.4f", name, auc)


if __name__ == "__main__":
    main()
