"""Lumberjack's Gaussian sparse threshold: Theorem 6, Lemma 7, calibration, audit, ledger."""

import math

import numpy as np
import pytest
from scipy import stats

from fedpriv.privacy import (
    ApproxDpEvent,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
    SparseThreshold,
    audit_epsilon,
    calibrate_sparse_threshold,
    largest_rho,
    lemma7_parameters,
    queries_per_record,
    theorem6_delta,
    two_sided_delta,
    zcdp_delta,
)
from tests.keys import private_rng


def test_queries_per_record_is_lemma_3s_bound():
    assert queries_per_record(30, 100) == 30 * 7  # 1 + ⌊log₂ 100⌋ = 7
    assert [queries_per_record(1, h) for h in (1, 2, 3, 4, 7, 8, 1000)] == [1, 2, 2, 3, 3, 4, 10]


@pytest.mark.parametrize("m", [1, 7, 210, 350])
@pytest.mark.parametrize("eps", [0.1, 0.375, 0.75, 0.99])
@pytest.mark.parametrize("delta", [1e-6, 7.5e-7, 1e-9])
def test_lemma_7_closed_form_satisfies_theorem_6(m, eps, delta):
    sigma, gap = lemma7_parameters(epsilon=eps, delta=delta, m=m)
    assert theorem6_delta(epsilon=eps, sigma=sigma, gap=gap, m=m) <= delta
    # ... and the exact calibration needs a smaller threshold for the same target.
    assert calibrate_sparse_threshold(epsilon=eps, delta=delta, m=m).tau < 1 + gap


def _gsh_delta(eps, sigma, gap, counts_d, counts_dp):
    """δ(ε) of Algorithm 2 on m ≤ 2 queries releasing noisy counts, D vs D'.

    Independent of Theorem 6. Each query outputs ⊥ or its noisy count v > τ
    (τ = 1 + Δ, gate 0). Outputs are binned into fine cells with exact normal
    masses (binning is post-processing, so this never exceeds the true δ; at
    the boundary, where D has no value outputs, it is exact), and the
    hockey-stick divergence Σ max(0, P_D − e^ε P_D') is summed over the
    product of the per-query output laws.
    """
    tau = 1.0 + gap
    edges = np.append(np.linspace(tau, tau + 12 * sigma + 8, 4_001), np.inf)

    def law(count):
        if count <= 0:
            return np.concatenate([[1.0], np.zeros(edges.size - 1)])
        cdf = stats.norm.cdf(edges, count, sigma)
        return np.concatenate([[cdf[0]], np.diff(cdf)])  # [⊥, cells]

    c = math.exp(eps)
    (p1, *p_rest), (q1, *q_rest) = map(law, counts_d), map(law, counts_dp)
    if not p_rest:
        return float(np.sum(np.maximum(0.0, p1 - c * q1)))
    (p2,), (q2,) = p_rest, q_rest
    # m = 2: the product laws' 4,002² cells, a block of rows at a time (the same sum,
    # without the 16M-cell temporaries: ~40× faster).
    total = 0.0
    for i in range(0, p1.size, 256):
        block = np.outer(p1[i : i + 256], p2) - c * np.outer(q1[i : i + 256], q2)
        total += float(np.maximum(block, 0.0).sum())
    return total


@pytest.mark.parametrize("m", [1, 2])
def test_theorem_6_bounds_an_independent_computation_for_small_m(m):
    eps, sigma, gap = 1.0, 1.5, 3.0
    bound = theorem6_delta(epsilon=eps, sigma=sigma, gap=gap, m=m)
    worst = 0.0
    # The record adds 1 to each of its m counts; scan where the counts sit,
    # including the deterministic boundary (0 on one side, 1 on the other).
    for base in [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]:
        for other in [0.0, 2.0, 4.0] if m == 2 else [None]:
            d = [base] if m == 1 else [base, other]
            dp = [c + 1.0 for c in d]
            worst = max(
                worst, _gsh_delta(eps, sigma, gap, d, dp), _gsh_delta(eps, sigma, gap, dp, d)
            )
    assert worst <= bound * (1 + 1e-6)
    # Theorem 6 is exact in the pure boundary case: 1 − Φ(Δ/σ)^m.
    boundary = _gsh_delta(eps, sigma, gap, [1.0] * m, [0.0] * m)
    assert boundary == pytest.approx(1 - stats.norm.cdf(gap / sigma) ** m, rel=1e-4)
    assert worst >= 0.5 * bound  # and not loose by much here


@pytest.mark.parametrize("two_sided", [False, True])
@pytest.mark.parametrize(
    ("eps", "delta", "m"), [(0.375, 7.5e-7, 210), (3.0, 7.5e-7, 210), (1.0, 1e-5, 7)]
)
def test_calibration_never_overshoots_and_sets_tau_to_one_plus_gap(eps, delta, m, two_sided):
    cal = calibrate_sparse_threshold(epsilon=eps, delta=delta, m=m, two_sided=two_sided)
    check = two_sided_delta if two_sided else theorem6_delta
    assert check(epsilon=eps, sigma=cal.sigma, gap=cal.gap, m=m) <= delta
    assert cal.delta_certified <= delta and cal.delta_certified > 0.9 * delta  # tight
    assert cal.tau == 1 + cal.gap and cal.mechanism().gate == 0.0
    assert cal.mechanism().tau == cal.tau
    # A slightly smaller gap at the same σ would overshoot: the search is tight.
    assert check(epsilon=eps, sigma=cal.sigma, gap=cal.gap * 0.99, m=m) > delta


def test_calibration_matches_an_independent_reference():
    # Adult, 30 trees, depth 100, ε₁ = 0.75 (ε = 1), δ₁ = 7.5e-7: σ_min solves
    # G(ε, m) = δ₁ (the analytic Gaussian with sensitivity √m), and Δ solves
    # 1 − Φ(Δ/σ)^m = δ₁ (values computed separately with scipy).
    cal = calibrate_sparse_threshold(epsilon=0.75, delta=7.5e-7, m=210)
    assert cal.sigma == pytest.approx(81.14, abs=0.01)
    assert cal.tau == pytest.approx(470.6, abs=0.1)


def test_the_mechanism_gates_deterministically_and_adds_noise_otherwise():
    mech = SparseThreshold(sigma=2.0, gap=5.0)  # τ = 6
    rng = private_rng(0)
    assert not mech.check(np.zeros(10_000), rng=rng).any()  # empty: never ⊤
    hits = mech.check(np.full(20_000, 6.0), rng=rng)  # q = τ: ⊤ w.p. ½
    assert hits.mean() == pytest.approx(0.5, abs=0.015)
    big = mech.check(np.full(20_000, 1.0), rng=rng)  # q = 1: ⊤ w.p. 1 − Φ(Δ/σ)
    assert big.mean() == pytest.approx(1 - stats.norm.cdf(2.5), abs=0.004)
    two = SparseThreshold(sigma=2.0, gap=5.0, two_sided=True)
    assert two.check(np.full(100, 12.0), rng=rng).all()  # q ≥ τ + Δ + 1: surely ⊤
    # Draws per call depend only on the number of counts, never on their values.
    a, b = private_rng(1), private_rng(1)
    mech.check(np.zeros(5), rng=a)
    mech.check(np.full(5, 100.0), rng=b)
    assert a.random() == b.random()


@pytest.mark.parametrize("case", ["boundary", "interior", "broken"])
def test_audit_of_the_sparse_threshold(case):
    # A record adds 1 to each of its m counts. "boundary": 0 on D (⊥ surely)
    # vs 1 on D'; "interior": τ − ½ vs τ + ½, both noisy. Claimed: Theorem 6's
    # (ε, δ), with a large δ so that boundary ⊤s are frequent enough to see.
    # "broken": the gap halved (the gate too permissive for the accounting),
    # which the same audit must refute.
    eps, delta, m = 1.0, 0.02, 3
    cal = calibrate_sparse_threshold(epsilon=eps, delta=delta, m=m)
    gap = cal.gap / 2 if case == "broken" else cal.gap
    mech = SparseThreshold(sigma=cal.sigma, gap=gap)
    lo, hi = (mech.tau - 0.5, mech.tau + 0.5) if case == "interior" else (0.0, 1.0)
    res = audit_epsilon(
        lambda rng: mech.check(np.full(m, hi), rng=rng).sum(),
        lambda rng: mech.check(np.full(m, lo), rng=rng).sum(),
        n_trials=20_000,
        delta=delta,
        rng=private_rng(5),
    )
    if case == "broken":
        assert res.epsilon_lower_bound > eps
    else:
        assert res.epsilon_lower_bound <= eps
    if case == "interior":
        assert res.epsilon_lower_bound > 0.05  # the audit sees the Gaussian part


def test_ledger_composes_the_structure_pair_by_basic_composition():
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-6))
    ledger.spend(ApproxDpEvent(0.75, 7.5e-7, "lumberjack-thm6"), label="structure")
    report = ledger.report()
    assert report.epsilon == pytest.approx(0.75)
    assert report.accounting.pld_method == "pld+basic"
    with pytest.raises(PrivacyBudgetExceededError):
        ledger.spend(ApproxDpEvent(0.3, 1e-7, "x"), label="too much ε")
    with pytest.raises(PrivacyBudgetExceededError):
        ledger.spend(ApproxDpEvent(0.01, 3e-7, "x"), label="too much δ")
    assert json_round_trip(report)


def json_round_trip(report):
    import json

    from fedpriv.privacy import event_from_dict

    events = json.loads(report.to_json())["events"]
    return event_from_dict(events[0]["event"]) == ApproxDpEvent(0.75, 7.5e-7, "lumberjack-thm6")


def test_zcdp_conversion_and_largest_rho():
    rho = largest_rho(epsilon=0.25, delta=2.5e-7)
    assert rho == pytest.approx(0.00144, rel=0.01)  # Adult leaves at ε = 1
    assert zcdp_delta(rho=rho, epsilon=0.25) <= 2.5e-7
    assert zcdp_delta(rho=rho * 1.01, epsilon=0.25) > 2.5e-7
    # Lemma 9 is sound: for the Gaussian mechanism (ρ = 1/(2z²)) it is above the exact δ.
    z = 1 / math.sqrt(2 * rho)
    exact = stats.norm.cdf(1 / (2 * z) - 0.25 * z) - math.exp(0.25) * stats.norm.cdf(
        -1 / (2 * z) - 0.25 * z
    )
    assert exact <= zcdp_delta(rho=rho, epsilon=0.25)
