"""Empirical privacy audits and noise-law tests.

:func:`audit_epsilon` runs a mechanism many times on two neighbouring inputs
and turns a distinguishing test into a high-confidence *lower* bound on ε at
the claimed δ: for any event S, (ε, δ)-DP gives
``P[M(D) ∈ S] ≤ e^ε P[M(D') ∈ S] + δ``, hence
``ε ≥ log((p̲ − δ)/p̄)`` with ``p̲`` a Clopper–Pearson lower bound on
``P[M(D) ∈ S]`` and ``p̄`` an upper bound on ``P[M(D') ∈ S]`` (Jagielski,
Ullman & Oprea 2020, §3; Nasr et al. 2021, Alg. 1). The event is chosen on
one half of the trials and evaluated on the other, so the choice does not
bias the bound. A sound mechanism gives ``ε̂ ≤ ε`` with probability ≥ the
confidence level.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from fedpriv.validation import check_count, check_delta, check_generator, check_open_unit


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided (1 − α) Clopper–Pearson bounds (lower, upper) on a binomial rate."""
    k, n = int(successes), int(trials)
    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))
    return lower, upper


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit_epsilon`.

    ``epsilon_lower_bound`` holds with probability ≥ ``confidence`` if the
    mechanism is (ε, δ)-DP; a value above the claimed ε refutes the claim.
    """

    epsilon_lower_bound: float
    delta: float
    confidence: float
    threshold: float
    upper_tail: bool
    swapped: bool
    hits: int
    hits_neighbour: int
    n_evaluation: int


def _eps_bound(k_a: int, k_b: int, n: int, delta: float, alpha: float) -> float:
    p_lo, _ = clopper_pearson(k_a, n, alpha)
    _, p_hi = clopper_pearson(k_b, n, alpha)
    if p_lo - delta <= 0 or p_hi <= 0:
        return 0.0
    return max(0.0, math.log((p_lo - delta) / p_hi))


def audit_epsilon(
    sample: Callable[[np.random.Generator], Any],
    sample_neighbour: Callable[[np.random.Generator], Any],
    *,
    statistic: Callable[[Any], float] = float,
    n_trials: int,
    delta: float,
    rng: np.random.Generator,
    confidence: float = 0.95,
    n_thresholds: int = 64,
) -> AuditResult:
    """Clopper–Pearson lower bound on ε from ``n_trials`` runs on each input.

    Parameters
    ----------
    sample, sample_neighbour : callable
        ``rng -> output`` of the mechanism on D and on a neighbour D'.
    statistic : callable
        Maps an output to a real score; events are ``{score ≥ t}`` or
        ``{score ≤ t}``.
    n_trials : int
        Runs per input, ≥ 200 (half choose the event, half evaluate it).
    delta : float
        The claimed δ, in [0, 1).
    rng : numpy.random.Generator
        Source of the trials' randomness.
    confidence : float
        In (0, 1); the two CP bounds share the error (union bound).
    """
    n = check_count("n_trials", n_trials, minimum=200)
    dlt = check_delta("delta", delta)
    conf = check_open_unit("confidence", confidence)
    check_generator("rng", rng)
    s0 = np.array([statistic(sample(rng)) for _ in range(n)], dtype=np.float64)
    s1 = np.array([statistic(sample_neighbour(rng)) for _ in range(n)], dtype=np.float64)
    half = n // 2
    sel0, ev0 = s0[:half], s0[half:]
    sel1, ev1 = s1[:half], s1[half:]
    alpha = (1.0 - conf) / 2.0
    candidates = np.unique(
        np.quantile(np.concatenate([sel0, sel1]), np.linspace(0, 1, n_thresholds))
    )

    best = (-1.0, 0.0, True, False)
    for t in candidates:
        for upper_tail in (True, False):
            a = int(np.sum(sel0 >= t) if upper_tail else np.sum(sel0 <= t))
            b = int(np.sum(sel1 >= t) if upper_tail else np.sum(sel1 <= t))
            for swapped, (ka, kb) in ((False, (a, b)), (True, (b, a))):
                score = _eps_bound(ka, kb, half, dlt, alpha)
                if score > best[0]:
                    best = (score, float(t), upper_tail, swapped)
    _, t, upper_tail, swapped = best
    m = ev0.size
    a = int(np.sum(ev0 >= t) if upper_tail else np.sum(ev0 <= t))
    b = int(np.sum(ev1 >= t) if upper_tail else np.sum(ev1 <= t))
    ka, kb = (b, a) if swapped else (a, b)
    return AuditResult(
        epsilon_lower_bound=_eps_bound(ka, kb, m, dlt, alpha),
        delta=dlt,
        confidence=conf,
        threshold=t,
        upper_tail=upper_tail,
        swapped=swapped,
        hits=ka,
        hits_neighbour=kb,
        n_evaluation=m,
    )


def ks_noise_test(noise, law: Any) -> float:
    """p-value of a one-sample Kolmogorov–Smirnov test of ``noise`` against ``law``.

    ``law`` is a frozen ``scipy.stats`` distribution (e.g. ``stats.norm(0, σ)``).
    """
    x = np.asarray(noise, dtype=np.float64).ravel()
    return float(stats.kstest(x, law.cdf).pvalue)


def chi_square_selection_test(selected, probabilities, *, min_expected: float = 5.0) -> float:
    """p-value of a χ² goodness-of-fit of selected indices against ``probabilities``.

    Cells with expected count below ``min_expected`` are pooled into one, as
    the χ² approximation requires (Cochran 1954).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    idx = np.asarray(selected, dtype=np.int64)
    observed = np.bincount(idx, minlength=p.size).astype(np.float64)
    expected = p * idx.size
    big = expected >= min_expected
    obs = list(observed[big])
    exp = list(expected[big])
    if (~big).any():
        obs.append(observed[~big].sum())
        exp.append(expected[~big].sum())
    obs_a, exp_a = np.array(obs), np.array(exp)
    exp_a *= obs_a.sum() / exp_a.sum()
    if obs_a.size < 2:
        return 1.0
    return float(stats.chisquare(obs_a, exp_a).pvalue)
