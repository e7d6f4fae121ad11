"""Empirical ε̂ of a whole learner: many independent fits on D and D' = D + canary.

Trial t of a side runs one end-to-end fit (:meth:`LearnerAudit.fit`) with a
public seed of its own and a secret key that is

* ``"fresh"``: drawn from OS entropy (the estimators' default ``None``);
* ``"injected"``: ``base_key.derive("trial", t)`` (deterministic CI);
* ``"debug"``: ``SecretKey.from_public_seed(seed)``, the old behaviour.

Every statistic is evaluated on the same fits, then each gets its own
Clopper–Pearson lower bound (:func:`fedpriv.privacy.audit_epsilon`; the event
is chosen on half of the trials and evaluated on the other half).

The attacker of docs/explanation/architecture.md §1 (:func:`section1_statistic`)
knows the public seed of every fit. It replays the fit on D under the key the old code
derived from that seed and subtracts the replay's statistic, i.e. the replayed
noise: in debug mode the replay is the released run itself whenever the
canary is absent, so the two datasets separate perfectly; with a secret key
the replay's noise is independent of the real one and only adds variance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from fedpriv.experiments.audit.learners import LearnerAudit
from fedpriv.experiments.audit.runs import Run

from fedpriv.privacy import audit_epsilon
from fedpriv.privacy.audit import AuditResult
from fedpriv.privacy.randomness import SecretKey

KEY_MODES = ("fresh", "injected", "debug")


def section1_statistic(
    audit: LearnerAudit, replays: dict[int, float] | None = None
) -> Callable[[Run], float]:
    """The statistic of the §1 attacker: released minus its seed replay on D.

    The replay is a function of the public seed alone (D, the key the old code
    derived from the seed), so ``replays`` (seed → the replay's statistic) may be
    shared by every audit of ``audit`` that attacks the same seeds. It runs on plain
    sums where they release the same (:meth:`LearnerAudit.fit`).
    """
    memo: dict[int, float] = {} if replays is None else replays

    def statistic(run: Run) -> float:
        if run.seed not in memo:
            replay = audit.fit(
                canary=False,
                seed=run.seed,
                key=SecretKey.from_public_seed(run.seed),
                secure_aggregation=not audit.plain_sums_release_the_same,
            )
            memo[run.seed] = audit.statistic(replay)
        return audit.statistic(run) - memo[run.seed]

    return statistic


def trial_key(mode: str, t: int, seed: int, base_key: SecretKey | None) -> SecretKey | None:
    """The secret key of trial ``t`` (public seed ``seed``) under key ``mode``."""
    if mode == "fresh":
        return None
    if mode == "injected":
        if base_key is None:
            raise ValueError("keys='injected' needs base_key")
        return base_key.derive("trial", t)
    if mode == "debug":
        return SecretKey.from_public_seed(seed)
    raise ValueError(f"keys must be one of {list(KEY_MODES)}; got {mode!r}")


@dataclass(frozen=True)
class Scores:
    """A statistic's values on the D trials (``without``) and the D' trials (``with_``)."""

    without: np.ndarray
    with_: np.ndarray

    @property
    def n_trials(self) -> int:
        return int(self.without.size)

    def shift(self) -> float:
        """Standardised mean shift (the Gaussian μ a perfect Gaussian audit would face)."""
        sd = np.sqrt(0.5 * (self.without.var() + self.with_.var()))
        return float((self.with_.mean() - self.without.mean()) / sd) if sd > 0 else np.inf


def collect_scores(
    audit: LearnerAudit,
    statistics: Mapping[str, Callable[[Run], float]],
    *,
    n_trials: int,
    twin: bool = False,
    keys: str = "fresh",
    base_key: SecretKey | None = None,
    secure_aggregation: bool = True,
) -> dict[str, Scores]:
    """Run ``n_trials`` fits per side; every statistic on every fit.

    Public seeds are 0 .. n−1 on D and n .. 2n−1 on D' (trial index = seed).
    ``secure_aggregation=False``: plain sums (:meth:`LearnerAudit.fit`).
    """
    values: dict[str, list[list[float]]] = {name: [[], []] for name in statistics}
    for side, canary in enumerate((False, True)):
        for i in range(n_trials):
            t = side * n_trials + i
            run = audit.fit(
                canary=canary,
                seed=t,
                key=trial_key(keys, t, t, base_key),
                twin=twin,
                secure_aggregation=secure_aggregation,
            )
            for name, stat in statistics.items():
                values[name][side].append(stat(run))
    return {
        name: Scores(np.array(v[0], dtype=np.float64), np.array(v[1], dtype=np.float64))
        for name, v in values.items()
    }


def epsilon_hat(scores: Scores, *, delta: float, confidence: float = 0.95) -> AuditResult:
    """Clopper–Pearson lower bound on ε from precomputed scores (see :func:`audit_epsilon`)."""
    draws = [iter(scores.with_), iter(scores.without)]
    return audit_epsilon(
        lambda rng: next(draws[0]),
        lambda rng: next(draws[1]),
        n_trials=scores.n_trials,
        delta=delta,
        rng=np.random.default_rng(0),  # unused: the trials are already drawn
        confidence=confidence,
    )


@dataclass(frozen=True)
class AuditOutcome:
    """One ε̂ of one learner under one attack."""

    learner: str
    column: str
    epsilon: float
    delta: float
    result: AuditResult
    scores: Scores
    keys: str
    seconds: float

    @property
    def epsilon_hat(self) -> float:
        return self.result.epsilon_lower_bound

    @property
    def refuted(self) -> bool:
        return self.epsilon_hat > self.epsilon


def audit_learner(
    audit: LearnerAudit,
    *,
    n_trials: int,
    twin: bool = False,
    keys: str = "fresh",
    base_key: SecretKey | None = None,
    section1: bool = False,
    replays: dict[int, float] | None = None,
    extra: Mapping[str, Callable[[Run], float]] | None = None,
    confidence: float = 0.95,
    secure_aggregation: bool = True,
) -> dict[str, AuditOutcome]:
    """ε̂ of the plain statistic (with ``section1``, also of the §1 attacker; and of any
    ``extra`` statistics), all on one set of fits.

    ``replays``: the §1 attacker's replays, shared between audits of the same seeds
    (:func:`section1_statistic`); ``secure_aggregation=False``: the fits on plain sums
    (:meth:`LearnerAudit.fit`)."""
    stats: dict[str, Callable[[Run], float]] = {"plain": audit.statistic}
    if section1:
        stats["section1"] = section1_statistic(audit, replays)
    stats.update(extra or {})
    t0 = time.perf_counter()
    scores = collect_scores(
        audit,
        stats,
        n_trials=n_trials,
        twin=twin,
        keys=keys,
        base_key=base_key,
        secure_aggregation=secure_aggregation,
    )
    seconds = time.perf_counter() - t0
    return {
        name: AuditOutcome(
            learner=audit.name,
            column=name,
            epsilon=audit.epsilon,
            delta=audit.delta,
            result=epsilon_hat(s, delta=audit.delta, confidence=confidence),
            scores=s,
            keys=keys,
            seconds=seconds,
        )
        for name, s in scores.items()
    }
