"""Reference values of the benchmark paper, as quoted in ``../shared/docs/TARGETS.md``.

Means are TARGETS.md's; SDs that TARGETS.md leaves out are read from the same
paper tables (``../shared/papers/dp_federated_boosting_vs_dpsgd_benchmark.txt``).
The report prints them in their own column; nothing here is ever fitted.
"""

from __future__ import annotations

PAPER_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)

#: Table 6: test AUC (mean, SD) at ε = 0.5 / 1 / 2 / 4 / 8, 20 seeds.
TABLE6: dict[tuple[str, str], tuple[tuple[float, float], ...]] = {
    ("diabetes130", "boosting"): (
        (0.572, 0.011),
        (0.577, 0.010),
        (0.587, 0.007),
        (0.591, 0.007),
        (0.600, 0.008),
    ),
    ("diabetes130", "logistic"): (
        (0.589, 0.015),
        (0.605, 0.010),
        (0.612, 0.007),
        (0.615, 0.006),
        (0.616, 0.005),
    ),
    ("diabetes130", "mlp"): (
        (0.568, 0.014),
        (0.603, 0.010),
        (0.622, 0.005),
        (0.628, 0.005),
        (0.630, 0.005),
    ),
    ("brfss", "boosting"): (
        (0.796, 0.005),
        (0.802, 0.003),
        (0.811, 0.003),
        (0.813, 0.002),
        (0.814, 0.002),
    ),
    ("brfss", "logistic"): (
        (0.811, 0.003),
        (0.814, 0.002),
        (0.814, 0.002),
        (0.814, 0.002),
        (0.815, 0.002),
    ),
    ("brfss", "mlp"): (
        (0.799, 0.008),
        (0.814, 0.004),
        (0.820, 0.003),
        (0.821, 0.002),
        (0.821, 0.002),
    ),
    ("synthetic", "boosting"): (
        (0.729, 0.024),
        (0.774, 0.024),
        (0.811, 0.019),
        (0.835, 0.017),
        (0.853, 0.016),
    ),
    ("synthetic", "logistic"): (
        (0.677, 0.033),
        (0.709, 0.018),
        (0.723, 0.014),
        (0.727, 0.014),
        (0.729, 0.015),
    ),
    ("synthetic", "mlp"): (
        (0.626, 0.059),
        (0.724, 0.050),
        (0.843, 0.026),
        (0.894, 0.011),
        (0.923, 0.009),
    ),
}

#: Table 8 (ε = 2): test AUC of the tuning-fairness variants.
TABLE8: dict[tuple[str, str], float] = {
    ("diabetes130", "boosting per-ε T"): 0.587,
    ("diabetes130", "boosting fixed T"): 0.590,
    ("diabetes130", "mlp fair"): 0.622,
    ("diabetes130", "mlp few steps"): 0.618,
    ("diabetes130", "mlp wide"): 0.573,
    ("brfss", "boosting per-ε T"): 0.811,
    ("brfss", "boosting fixed T"): 0.789,
    ("brfss", "mlp fair"): 0.820,
    ("brfss", "mlp few steps"): 0.816,
    ("brfss", "mlp wide"): 0.805,
}

#: Table 9: loss-threshold MIA, attack AUC (mean, SD) and advantage at ε = 0.5 / 2 / 8.
MIA_AUC: dict[str, tuple[float, ...]] = {
    "offpath": (0.683, 0.683, 0.683),
    "boosting": (0.509, 0.510, 0.511),
    "logistic": (0.505, 0.502, 0.501),
    "mlp": (0.501, 0.508, 0.515),
}
MIA_ADVANTAGE: dict[str, tuple[float, ...]] = {
    "offpath": (0.344, 0.344, 0.344),
    "boosting": (0.033, 0.037, 0.038),
    "logistic": (0.029, 0.024, 0.022),
    "mlp": (0.016, 0.035, 0.043),
}
MIA_OFFPATH_SD = 0.017
MIA_EPSILONS = (0.5, 2.0, 8.0)

#: Table A1: T* under the exact accountant (δ sweep at q = 0.05; q sweep at δ = 1e-5).
TSTAR: dict[tuple[float, float], tuple[float, ...]] = {
    (1e-6, 0.05): (31.9, 38.6, 44.4, 48.8, 52.7),
    (1e-5, 0.05): (33.3, 40.0, 45.2, 49.1, 53.6),
    (1e-4, 0.05): (35.1, 41.5, 46.6, 50.7, 54.3),
    (1e-5, 0.02): (30.2, 34.8, 37.9, 42.0, 44.7),
    (1e-5, 0.3): (34.2, 41.7, 48.7, 56.4, 63.0),
}
#: Appendix A.4: z_PLD / z_RDP over T ∈ {25, …, 400}.
PLD_RDP_RATIO = (0.909, 0.941)

#: Table 11: uploaded floats per client (boosting range over ε; DP-SGD at 800 steps).
TABLE11: dict[tuple[str, str], str] = {
    ("diabetes130", "boosting"): "1600–9600",
    ("diabetes130", "mlp"): "1,319,200",
    ("diabetes130", "logistic"): "81,600",
    ("brfss", "boosting"): "1600–3200",
    ("brfss", "mlp"): "295,200",
    ("brfss", "logistic"): "17,600",
    ("synthetic", "boosting"): "4800–6400",
    ("synthetic", "mlp"): "218,400",
    ("synthetic", "logistic"): "12,800",
}

#: The paper's selected settings (TARGETS.md; Table 5 and its per-dataset T lists).
BOOSTING_ROUNDS = {
    "diabetes130": (25, 25, 75, 75, 150),
    "brfss": (25, 25, 50, 50, 50),
    "synthetic": (75, 75, 75, 75, 100),
}
SELECTED: dict[str, dict[str, float | int]] = {
    # The paper's algorithm: λ = reg_lambda = 1 (lam 0) and margin 0 (no intercept round).
    "boosting": {
        "depth": 5,
        "learning_rate": 0.4,
        "sampling_rate": 0.05,
        "lam": 0.0,
        "intercept": False,
    },
    "mlp": {
        "hidden": 16,
        "rounds": 800,
        "learning_rate": 3.0,
        "clip_norm": 3.0,
        "sampling_rate": 0.02,
    },
    "logistic": {"rounds": 800, "learning_rate": 2.0, "clip_norm": 3.0, "sampling_rate": 0.02},
}


def nearest_index(epsilon: float) -> int:
    """Index of the paper ε closest to ``epsilon`` (in log scale)."""
    import math

    return min(range(len(PAPER_EPSILONS)), key=lambda i: abs(math.log(PAPER_EPSILONS[i] / epsilon)))


def table6(dataset: str, learner: str, epsilon: float) -> tuple[float, float] | None:
    """Paper (mean, SD) test AUC, or None when the paper has no such cell."""
    if epsilon not in PAPER_EPSILONS or (dataset, learner) not in TABLE6:
        return None
    return TABLE6[(dataset, learner)][PAPER_EPSILONS.index(epsilon)]


def selected(dataset: str, learner: str, epsilon: float) -> dict[str, float | int]:
    """The paper's selected configuration for ``learner`` at ``epsilon`` (nearest paper ε);
    a learner the paper does not have runs at its own defaults."""
    params = dict(SELECTED.get(learner, {}))
    if learner == "boosting":
        params["rounds"] = BOOSTING_ROUNDS[dataset][nearest_index(epsilon)]
    return params


#: §5.6 Table 10 (ε = 2, 10 seeds): test AUC (mean, SD) at ρ = 1 / 0.5 / 0.25, under the
#: paper's ρ·q accounting; DP-SGD rows are "any α" (keyed by α = None).
TABLE10_RHOS = (1.0, 0.5, 0.25)
TABLE10: dict[tuple[str, float | None], tuple[tuple[float, float], ...]] = {
    ("boosting", 0.1): ((0.704, 0.026), (0.660, 0.031), (0.602, 0.044)),
    ("boosting", 0.5): ((0.698, 0.030), (0.658, 0.034), (0.628, 0.038)),
    ("boosting", 10.0): ((0.706, 0.027), (0.682, 0.038), (0.633, 0.038)),
    ("logistic", None): ((0.763, 0.059), (0.767, 0.058), (0.763, 0.058)),
    ("mlp", None): ((0.715, 0.050), (0.724, 0.054), (0.717, 0.053)),
}
#: §5.6 Remark 1: α = 0.1 vs α = 10 at ρ = 1 moves mean AUC by at most this much.
REMARK1_MAX_DIFF = 0.011
#: §5.6 covariate shift (ε = 2): boosting at γ = 0 / 0.6 / 1.2.
SHIFT_GAMMAS = (0.0, 0.6, 1.2)
SHIFT_BOOSTING_MACRO = (0.691, 0.693, 0.707)
SHIFT_BOOSTING_POOLED = {0.0: 0.692, 1.2: 0.836}


def table10(learner: str, alpha: float, rho: float) -> tuple[float, float] | None:
    """Paper Table 10 (mean, SD), or None when the paper has no such cell."""
    ref = TABLE10.get((learner, alpha)) or TABLE10.get((learner, None))
    if ref is None or rho not in TABLE10_RHOS:
        return None
    return ref[TABLE10_RHOS.index(rho)]
