"""The learner audits' shared check: the honest learner holds ε, its broken twin is refuted."""

from fedpriv.experiments.audit.auditing import audit_learner

from tests.keys import key_for


def honest_and_twin(audit, *, trials: int, base: int, shift: tuple[float, float], twin_trials=None,
                    twin_secure: bool = False):  # fmt: skip
    """Audit ``audit`` honest (keys from ``base``) and broken (keys from ``base + 50``).

    Asserts ε̂ ≤ ε for the honest learner, ε̂ > ε for the twin (``twin_trials`` trials,
    default ``trials``; on secure sums iff ``twin_secure``) and the honest statistic's
    shift inside ``shift`` (the audit sees the canary about as strongly as the noise
    allows, not a statistic blind to it). Returns both audits' plain-score results.
    """
    honest = audit_learner(audit, n_trials=trials, keys="injected", base_key=key_for(base))
    twin = audit_learner(audit, n_trials=twin_trials or trials, twin=True, keys="injected",
                         base_key=key_for(base + 50), secure_aggregation=twin_secure)  # fmt: skip
    h, t = honest["plain"], twin["plain"]
    assert h.epsilon_hat <= audit.epsilon, (audit.name, h.result)
    assert t.epsilon_hat > audit.epsilon, (audit.name, t.result)
    lo, hi = shift
    assert lo < h.scores.shift() < hi, (audit.name, h.scores.shift())
    return h, t
