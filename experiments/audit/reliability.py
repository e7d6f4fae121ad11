"""How often would a CI-sized audit fail to refute a broken twin? (bootstrap)

CI runs each twin's audit once, with ``n`` trials per side. Its false-failure
probability (ε̂ ≤ ε although the twin is broken) is estimated by resampling
``n`` scores per side, with replacement, from a larger pool of the twin's
scores (the full experiment's trials) and recomputing ε̂ each time.

:func:`epsilon_hats` is :func:`fedpriv.privacy.audit_epsilon` vectorised over
candidate events (one ``beta.ppf`` call per resample instead of 512), so that
thousands of resamples take seconds; it follows the same event order and
tie-breaking, and :func:`bootstrap_failure_rate` checks it against
``audit_epsilon`` on its first resamples.
"""

from __future__ import annotations

import numpy as np
from fedpriv.experiments.audit.auditing import Scores, epsilon_hat
from scipy import stats


def _cp_lower(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    safe = np.maximum(k, 1)
    return np.where(k == 0, 0.0, stats.beta.ppf(alpha, safe, n - safe + 1))


def _cp_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    safe = np.minimum(k, n - 1)
    return np.where(k == n, 1.0, stats.beta.ppf(1.0 - alpha, safe + 1, n - safe))


def _bounds(ka: np.ndarray, kb: np.ndarray, n: int, delta: float, alpha: float) -> np.ndarray:
    lo, hi = _cp_lower(ka, n, alpha), _cp_upper(kb, n, alpha)
    ok = (lo - delta > 0) & (hi > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log(np.where(ok, (lo - delta) / np.where(hi > 0, hi, 1.0), 1.0))
    return np.where(ok, np.maximum(eps, 0.0), 0.0)


def _counts(sel: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(sel)
    at_least = s.size - np.searchsorted(s, thresholds, side="left")
    at_most = np.searchsorted(s, thresholds, side="right")
    return at_least, at_most


def vectorised_epsilon_hat(
    s0: np.ndarray, s1: np.ndarray, *, delta: float, confidence: float = 0.95, n_thresholds=64
) -> float:
    """:func:`audit_epsilon`'s ε̂ from scores ``s0`` (first sampler) and ``s1``."""
    n = s0.size
    half = n // 2
    sel0, ev0, sel1, ev1 = s0[:half], s0[half:], s1[:half], s1[half:]
    alpha = (1.0 - confidence) / 2.0
    cand = np.unique(np.quantile(np.concatenate([sel0, sel1]), np.linspace(0, 1, n_thresholds)))
    up0, lo0 = _counts(sel0, cand)
    up1, lo1 = _counts(sel1, cand)
    # Loop order of audit_epsilon: threshold, then upper/lower tail, then (a, b) / (b, a).
    a = np.stack([up0, lo0], axis=1)
    b = np.stack([up1, lo1], axis=1)
    ka = np.stack([a, b], axis=2).ravel()
    kb = np.stack([b, a], axis=2).ravel()
    best = int(np.argmax(_bounds(ka, kb, half, delta, alpha)))
    t = cand[best // 4]
    upper, swapped = (best // 2) % 2 == 0, best % 2 == 1
    ea = int(np.sum(ev0 >= t) if upper else np.sum(ev0 <= t))
    eb = int(np.sum(ev1 >= t) if upper else np.sum(ev1 <= t))
    if swapped:
        ea, eb = eb, ea
    return float(_bounds(np.array([ea]), np.array([eb]), n - half, delta, alpha)[0])


def bootstrap_failure_rate(
    pool: Scores,
    *,
    n_trials: int,
    epsilon: float,
    delta: float,
    resamples: int,
    rng: np.random.Generator,
    n_checked: int = 5,
) -> tuple[float, np.ndarray]:
    """Fraction of resampled ``n_trials``-trial audits with ε̂ ≤ ``epsilon``, and every ε̂.

    Scores are drawn with replacement from ``pool``; the first ``n_checked``
    resamples are also run through ``audit_epsilon`` and must agree exactly.
    """
    hats = np.empty(resamples)
    for r in range(resamples):
        w = rng.choice(pool.with_, n_trials, replace=True)
        wo = rng.choice(pool.without, n_trials, replace=True)
        hats[r] = vectorised_epsilon_hat(w, wo, delta=delta)
        if r < n_checked:
            reference = epsilon_hat(Scores(without=wo, with_=w), delta=delta).epsilon_lower_bound
            if not np.isclose(hats[r], reference, rtol=1e-12, atol=1e-12):
                raise AssertionError(f"vectorised ε̂ {hats[r]} != audit_epsilon's {reference}")
    return float(np.mean(hats <= epsilon)), hats
