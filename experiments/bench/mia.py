"""Off-path vs on-path privatisation and the loss-threshold membership attack (paper §5.1, §5.5).

*Off-path.* A boosted ensemble is trained **without** privacy; the budget is
spent only on a released feature-importance vector, through a
:class:`fedpriv.privacy.PrivacyLedger`. The importance of feature j is the
share of (record, tree, level) routing steps that test j. Our trees' splits
are random and data-independent, so one record adds a vector of L1 norm 1 (its
T·D steps, normalised) and the count vector has L2 sensitivity ≤ 1 under
add/remove: a single Gaussian release at (ε, δ) covers it. The predictor never
reads the vector (paper Lemma 1), so its test AUC is the same at every ε,
while the attack below succeeds at every ε.

*Attack.* The adversary scores each queried record by its negative log loss
under the released model (Yeom et al. 2018); members are ``members`` training
records, non-members as many held-out records of the same synthetic task,
regenerated per seed (paper §5.5). We report the threshold-free attack AUC and
the advantage max_t (TPR − FPR).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve


def attack_scores(member_loss: np.ndarray, nonmember_loss: np.ndarray) -> dict[str, float]:
    """Loss-threshold attack AUC and max(TPR − FPR); lower loss means "member"."""
    losses = np.concatenate([member_loss, nonmember_loss])
    truth = np.concatenate([np.ones(member_loss.size), np.zeros(nonmember_loss.size)])
    score = -losses
    fpr, tpr, _ = roc_curve(truth, score)
    return {
        "attack_auc": float(roc_auc_score(truth, score)),
        "attack_advantage": float(np.max(tpr - fpr)),
    }


def record_losses(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-record binary log loss, probabilities clipped to [1e-12, 1 − 1e-12]."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return -(y * np.log(p) + (1.0 - y) * np.log1p(-p))


def membership_dataset(seed: int, members: int):
    """A fresh synthetic task for ``seed``: ``members`` training rows, as many held out.

    The rows are split by a generator derived from the seed; the held-out rows
    are the ``test`` part, the ``val`` part is empty.
    """
    from fedpriv.data import Split, load_synthetic
    from fedpriv.seeding import derive_generator

    ds = load_synthetic(n=2 * members, seed=seed)
    order = derive_generator(seed, "mia", "members").permutation(2 * members)
    split = Split(
        train=np.sort(order[:members]),
        val=np.array([], dtype=np.int64),
        test=np.sort(order[members:]),
        seed=seed,
        rule=f"membership inference: {members} members / {members} non-members",
    )
    return dataclasses.replace(ds, split=split)


def _attack(clf, ds) -> dict[str, Any]:
    X_in, y_in = ds.xy("train")
    X_out, y_out = ds.xy("test")
    p_in = clf.predict_proba(X_in)[:, 1]
    p_out = clf.predict_proba(X_out)[:, 1]
    out = attack_scores(record_losses(p_in, y_in), record_losses(p_out, y_out))
    out["test_auc"] = float(roc_auc_score(y_out, p_out))
    out["train_auc"] = float(roc_auc_score(y_in, p_in))
    return out


def _fit(cell, epsilon: float):
    import time

    from fedpriv.experiments.bench.learners import make_estimator
    from fedpriv.experiments.keys import secret_key_for

    ds = membership_dataset(cell.seed, cell.members)
    partition = ds.client_partition(cell.n_clients, "train", alpha=0.5)
    clf = make_estimator(
        cell.learner,
        cell.param_dict,
        epsilon=epsilon,
        delta=cell.delta,
        seed=cell.seed,
        n_clients=cell.n_clients,
        secure_aggregation=cell.secure_aggregation,
        secret_key=secret_key_for("cell", cell.key),
    )
    t0 = time.perf_counter()
    clf.fit(ds, part="train", partition=partition)
    clf.fit_seconds_ = time.perf_counter() - t0
    return clf, ds


def attack_cell(cell) -> dict[str, Any]:
    """The attack against an on-path learner trained at ``cell.epsilon``."""
    clf, ds = _fit(cell, cell.epsilon)
    out = _attack(clf, ds)
    out.update(epsilon_spent=clf.epsilon_spent_, seconds=clf.fit_seconds_)
    return out


def routing_counts(ensemble, X: np.ndarray) -> np.ndarray:
    """Per-feature count of routing steps, each record's T·D steps summing to 1."""
    from fedpriv.models.trees import route

    n_features = X.shape[1]
    counts = np.zeros(n_features)
    steps = 0
    for tree in ensemble.trees:
        depth = tree.depth
        leaf = route(tree, X)
        node = leaf + (1 << depth) - 1  # heap index of the leaf; walk up to the root
        for _ in range(depth):
            node = (node - 1) // 2
            counts += np.bincount(tree.feature[node], minlength=n_features)
        steps += depth
    return counts / max(steps, 1)


def offpath_cell(cell) -> dict[str, Any]:
    """Non-private ensemble + importance vector released at ``cell.epsilon`` (paper §5.1)."""
    from fedpriv.experiments.keys import secret_key_for
    from scipy.stats import spearmanr

    from fedpriv.privacy import GaussianMechanism, PrivacyBudget, PrivacyLedger

    clf, ds = _fit(cell, math.inf)  # the predictor: no noise at all
    out = _attack(clf, ds)
    X_in, _ = ds.xy("train")
    clean = routing_counts(clf.model_, X_in)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=cell.epsilon, delta=cell.delta))
    mech = GaussianMechanism.for_budget(epsilon=cell.epsilon, delta=cell.delta, l2_sensitivity=1.0)
    # Private noise: the cell's own key (its content holds ε), never its public seed.
    rng = secret_key_for("cell", cell.key).generator("offpath", "importance")
    noisy = ledger.release(mech, clean, rng=rng, label="feature importance")
    rho = spearmanr(clean, noisy).statistic
    out.update(
        epsilon_spent=ledger.epsilon(),
        seconds=clf.fit_seconds_,
        importance_fidelity=float(rho) if np.isfinite(rho) else 0.0,
    )
    return out
