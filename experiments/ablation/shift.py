"""Why pooled AUC inflates under covariate shift, checked on the generated data.

The benchmark paper (§5.6) reports pooled AUC rising from .692 to .836 for
boosting as γ goes 0 → 1.2 while within-client macro AUC stays flat, and
attributes it to between-client separability. The argument has two premises
and one consequence, each measured here per γ on the synthetic task
(:func:`fedpriv.data.synthetic.make_synthetic`; no private learner involved):

1. *Membership is predictable from x*: a (non-private) multinomial logistic
   regression trained on the train + val rows predicts a test row's client
   with accuracy ``client_accuracy`` (chance 1/K).
2. *Base rates differ*: the clients' positive rates (``base_rate_min`` …
   ``base_rate_max``; the concept P(y | x) is shared, so they differ only
   because P(x) does).
3. *Between-client pairs carry ranking power that is not within-client
   discrimination*: scoring each test row by nothing but its client's
   train + val base rate gives pooled AUC ``membership_auc`` (its
   within-client AUC is 0.5 by construction); and for the Bayes scorer
   p*(x) = P(y | x), cross-client pairs are ranked better than within-client
   pairs (``oracle_auc_cross_pairs`` vs ``oracle_auc_within_pairs``), so its
   pooled AUC exceeds its within-client macro AUC even though nothing about
   the model changed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from fedpriv.experiments.ablation.cells import auc_decomposition, dataset


def diagnostics(n_rows: int, gammas: tuple[float, ...], n_clients: int) -> pd.DataFrame:
    """One row per γ: the premises and the oracle's AUC split (module docstring).

    Parameters
    ----------
    n_rows : int
        Rows of the synthetic task (the study's).
    gammas : tuple of float
        Covariate shifts γ (benchmark paper §5.6: 0, 0.6, 1.2).
    n_clients : int
        K, the generator's natural clients.

    Returns
    -------
    pandas.DataFrame
        Columns ``covariate_shift``, ``client_accuracy``, ``chance``,
        ``base_rate_min``, ``base_rate_max``, ``base_rate_sd``,
        ``membership_auc``, then for ``oracle`` and ``weak``: ``_auc``,
        ``_auc_macro_within``, ``_auc_within_pairs``, ``_auc_cross_pairs``;
        and ``within_pair_fraction``.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from fedpriv.data.synthetic import concept_probability

    rows = []
    for gamma in gammas:
        ds = dataset(n_rows, float(gamma), n_clients, True)
        tr, te = ds.rows("train+val"), ds.rows("test")
        c_tr, c_te = ds.clients[tr], ds.clients[te]
        y_tr, y_te = ds.y[tr].astype(int), ds.y[te].astype(int)
        clf = LogisticRegression(max_iter=2000).fit(ds.X[tr], c_tr)
        rates = np.array([y_tr[c_tr == k].mean() for k in range(n_clients)])
        scores = {
            "oracle": concept_probability(ds.X[te]),
            "weak": LogisticRegression(max_iter=2000)
            .fit(ds.X[tr], y_tr)
            .predict_proba(ds.X[te])[:, 1],
        }
        row = {}
        for name, p in scores.items():
            split = auc_decomposition(y_te, p, c_te)
            row[f"{name}_auc"] = float(roc_auc_score(y_te, p))
            row.update({f"{name}_{k}": v for k, v in split.items() if k.startswith("auc")})
        rows.append(
            {
                "covariate_shift": float(gamma),
                "client_accuracy": float((clf.predict(ds.X[te]) == c_te).mean()),
                "chance": 1.0 / n_clients,
                "base_rate_min": float(rates.min()),
                "base_rate_max": float(rates.max()),
                "base_rate_sd": float(rates.std(ddof=1)),
                "membership_auc": float(roc_auc_score(y_te, rates[c_te])),
                **row,
                "within_pair_fraction": split["within_pair_fraction"],
            }
        )
    return pd.DataFrame(rows)
