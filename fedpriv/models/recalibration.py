"""The Brier-optimal affine recalibration of a model's class probabilities, from one release.

Why. DP noise in a model's parameters (DP-SGD's weights, a forest's leaf
counts) spreads its predictions wider than the signal warrants: on a
3,072-row task at ε = 0.5 a DP-SGD MLP's logits have a standard deviation of
about 7, so it predicts near 0 or 1 where the truth is near the base rate,
and its Brier score is worse than the constant base-rate predictor's
although it ranks well (AUC 0.7). Shifting the bias cannot fix that;
shrinking the spread can.

The map. For class probabilities p_i on the simplex (two classes:
[1 − p, p]) and one-hot labels e_i, the affine map

    p' = ȳ + β (p − p̄),    ȳ = Σ_i e_i / N,  p̄ = Σ_i p_i / N,

has the in-sample Brier score Σ_i ‖p'_i − e_i‖², minimised over β at the
least-squares slope

    β* = Σ_i ⟨p_i − p̄, e_i − ȳ⟩ / Σ_i ‖p_i − p̄‖²
       = (S_pe / N − ⟨p̄, ȳ⟩) / (S_pp / N − ‖p̄‖²),

the probability-scale calibration slope (Cox 1958 fits it on the logit
scale; by Murphy 1973's partition of the Brier score it cannot lose to the
constant ȳ in sample, which is β = 0). The map keeps Σ_c p'_c = 1 and is
increasing in each p_c when β > 0, so every one-vs-rest ranking and AUC is
unchanged; it stays in the simplex when β ≤ min_c ȳ_c / p̄_c (the largest
slope with p'_c ≥ 0 for every p_c ≥ 0). One slope for all classes suits a
model that is calibrated in the large, or has two classes: with C > 2 a
class the model over-predicts caps the common slope (measured on BRFSS
3-class at ε = 0.5, where the output-bias shift of
:mod:`fedpriv.models.sgd_recalibration` does better).

Privacy. Each record contributes

    v_i = [e_i (C) | p_i (C) | ⟨p_i, e_i⟩ | ‖p_i‖²],

and ‖v_i‖² = 1 + ‖p_i‖² + ⟨p_i, e_i⟩² + ‖p_i‖⁴ ≤ 4 on the simplex
(‖p‖ ≤ 1), so the sum's L2 sensitivity is :data:`SENSITIVITY` = 2. The
client puts each row's probabilities back on the simplex and clips v_i to 2
where it computes it (:func:`record_sums`), whatever the model returned.
The server adds N(0, (2z)²) per coordinate through the run's ledger; the
map is post-processing of that release and the public record count N.

The count. N is read from the same release (each record adds 1 to Σ_c e_c and
to Σ_c p_c; :func:`released_count`), never taken from a public bound: a bound
above the count shrinks S_pe/N and S_pp/N but not the renormalised rates, and
the slope falls to its floor for any model (:func:`fit`).

Noise. The estimate is regularised towards the base-rate predictor: ȳ and
p̄ are put back on the simplex (each rate at least :data:`RATE_FLOOR`), the
denominator gets a ridge λ = 2σ/N (about the noise std of the variance
estimate, σ the noise std per coordinate), and β is clipped to
[:data:`MIN_SLOPE`, min(:data:`MAX_SLOPE`, min_c ȳ_c / p̄_c)]. A
noise-dominated release therefore shrinks the model to (nearly) the released
class rates; ``MIN_SLOPE`` > 0 keeps the ranking, and such a fit says so
(:attr:`LinearRecalibration.degenerate`: the run's status turns degraded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv.models.gam_softmax import clip_rows

#: Query ``config`` stage (or kind) of a round that asks for :func:`record_sums`.
STAGE = "recalibrate_linear"
#: L2 sensitivity of one record's :func:`record_sums` contribution.
SENSITIVITY = 2.0
#: Its L1 sensitivity: e (L1 ≤ 1), p on the simplex (L1 = 1), ⟨p, e⟩ and ‖p‖² in [0, 1]
#: whatever the model returned (:func:`as_class_probabilities`); the clip only shrinks.
L1_SENSITIVITY = 4.0
#: Released class rates are floored here before they enter the slope's bound.
RATE_FLOOR = 1e-4
#: The slope's range: > 0 keeps every ranking; ≤ 2 bounds how far noise can stretch.
MIN_SLOPE, MAX_SLOPE = 1e-3, 2.0


def as_class_probabilities(P: np.ndarray) -> np.ndarray:
    """(n, C) rows on the simplex: a 1-D ``P`` is P(y = 1) of two classes; NaN → uniform."""
    P = np.asarray(P, dtype=np.float64)
    if P.ndim == 1:
        p = np.clip(np.nan_to_num(P, nan=0.5), 0.0, 1.0)
        return np.column_stack([1.0 - p, p])
    P = np.clip(np.nan_to_num(P, nan=0.0), 0.0, None)
    mass = P.sum(axis=1, keepdims=True)
    return np.where(mass > 0, P / np.where(mass > 0, mass, 1.0), 1.0 / P.shape[1])


def reply_length(n_classes: int) -> int:
    """Floats of one reply: [Σe (C) | Σp (C) | Σ⟨p, e⟩ | Σ‖p‖²]."""
    return 2 * n_classes + 2


def record_sums(P: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The sums [Σe | Σp | Σ⟨p, e⟩ | Σ‖p‖²] over one client's rows.

    ``P``: the model's probabilities (1-D: P(y = 1) of two classes; else
    (n, C)); ``codes``: class indices (anything outside [0, C) counts as no
    class: e = 0). Each record's vector is clipped to :data:`SENSITIVITY`
    where it is computed.
    """
    P = as_class_probabilities(P)
    n, C = P.shape
    codes = np.asarray(codes).reshape(-1)
    if codes.size != n:
        raise ValueError(f"{n} rows of probabilities but {codes.size} labels")
    E = np.zeros_like(P)
    ok = (codes >= 0) & (codes < C)
    E[np.flatnonzero(ok), codes[ok].astype(np.int64)] = 1.0
    V = np.column_stack([E, P, (P * E).sum(axis=1), (P * P).sum(axis=1)])
    return clip_rows(V, SENSITIVITY).sum(axis=0)


@dataclass(frozen=True)
class LinearRecalibration:
    """The fitted map p' = ȳ + β (p − p̄) (released values only).

    Attributes
    ----------
    slope : float
        β.
    rates, mean : (C,) float64
        ȳ and p̄, on the simplex.
    """

    slope: float
    rates: np.ndarray
    mean: np.ndarray

    def __post_init__(self) -> None:
        rates = np.asarray(self.rates, dtype=np.float64).reshape(-1)
        mean = np.asarray(self.mean, dtype=np.float64).reshape(-1)
        if rates.shape != mean.shape or rates.size < 2:
            raise ValueError(f"rates and mean need the same C ≥ 2 entries; got {rates}, {mean}")
        for name, a in (("rates", rates), ("mean", mean)):
            if not (((a >= 0) & (a <= 1)).all() and abs(a.sum() - 1) < 1e-9):
                raise ValueError(f"{name} must be class rates summing to 1; got {a}")
        if not (np.isfinite(self.slope) and 0 < self.slope <= MAX_SLOPE):
            raise ValueError(f"slope must lie in (0, {MAX_SLOPE}]; got {self.slope!r}")
        object.__setattr__(self, "slope", float(self.slope))
        object.__setattr__(self, "rates", rates)
        object.__setattr__(self, "mean", mean)

    @property
    def n_classes(self) -> int:
        return int(self.rates.size)

    @property
    def degenerate(self) -> bool:
        """Whether the slope sits at its floor :data:`MIN_SLOPE`: the release showed no
        positive covariance between the probabilities and the labels above its noise
        (or a class rate far below its mean prediction capped it), so the map is
        nearly the constant ``rates`` (the ranking is kept, the spread is gone)."""
        return self.slope <= MIN_SLOPE

    def apply(self, P: np.ndarray) -> np.ndarray:
        """The recalibrated probabilities, in ``P``'s shape (1-D: P(y = 1))."""
        Q = np.clip(self.rates + self.slope * (as_class_probabilities(P) - self.mean), 0.0, 1.0)
        Q /= Q.sum(axis=1, keepdims=True)  # a no-op within the slope's bound
        return Q[:, 1] if np.ndim(P) == 1 else Q

    def to_array(self) -> np.ndarray:
        return np.concatenate([[self.slope], self.rates, self.mean])

    @classmethod
    def from_array(cls, a: np.ndarray) -> LinearRecalibration:
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        C = (a.size - 1) // 2
        if a.size != 1 + 2 * C or C < 2:
            raise ValueError(f"a recalibration array holds 1 + 2C floats, C ≥ 2; got {a.size}")
        return cls(float(a[0]), a[1 : 1 + C], a[1 + C :])


def _on_simplex(v: np.ndarray) -> np.ndarray:
    v = np.clip(v, RATE_FLOOR, None)
    return v / v.sum()


def released_count(released: np.ndarray, noise_std: float = 0.0) -> tuple[float, float]:
    """N̂, the record count behind a released :func:`record_sums` total, and its noise std.

    Every record adds 1 to Σ_c e_c (a valid label) and 1 to Σ_c p_c (its row on the
    simplex), so each half of [Σe | Σp] sums to the count; N̂ is their mean, with
    noise std σ·√(C/2) (2C coordinates of std σ, halved). Post-processing only.
    """
    s = np.asarray(released, dtype=np.float64).reshape(-1)
    C = (s.size - 2) // 2
    return 0.5 * float(s[: 2 * C].sum()), noise_std * float(np.sqrt(C / 2.0))


def fit(
    released: np.ndarray, n_records: float, noise_std: float = 0.0, dof: float = 0.0
) -> LinearRecalibration:
    """The map from a released :func:`record_sums` total (post-processing).

    ``n_records``: a public upper bound on the record count behind the sums
    (a declared bound, a released count's upper bound, ρ·n); the count N itself
    is estimated from the release (:func:`released_count`), clipped to
    [2·its noise std, ``n_records``]. Dividing by the bound instead biases every
    moment towards 0 while the class rates, renormalised on the simplex, are not:
    with a bound twice the count, S_pe/N − ⟨ȳ, p̄⟩ ≈ ½·0.8 − 0.8 < 0 for a base
    rate of 0.11, and the slope sits at its floor whatever the model (measured:
    a DP-SGD MLP on 2,893 rows at ε 0.5 and 2, bound 6,585 and 3,816). ``noise_std``:
    the noise std σ on each released coordinate (0 for exact sums), which sets the
    ridge λ = 2σ/N (module docstring); ``dof``: the model's effective degrees
    of freedom on its own training rows, Σ_i ∂p_i/∂e_i (a forest: about its
    leaves per tree). The sums are in-sample, and a row's own label moves its
    prediction, so the in-sample covariance overstates the out-of-sample one
    by Σ_c ȳ_c(1 − ȳ_c)·dof/N (Efron 2004, "The estimation of prediction
    error", eq. 2.11, the covariance penalty); it is subtracted.
    """
    s = np.asarray(released, dtype=np.float64).reshape(-1)
    C = (s.size - 2) // 2
    if s.size != 2 * C + 2 or C < 2:
        raise ValueError(f"a release holds 2C + 2 floats with C ≥ 2; got {s.size}")
    if not (n_records > 0 and noise_std >= 0 and dof >= 0):
        raise ValueError(
            f"need n_records > 0, noise_std ≥ 0 and dof ≥ 0; got {n_records}, {noise_std}, {dof}"
        )
    count, count_std = released_count(s, noise_std)
    n = float(np.clip(count, min(max(2.0 * count_std, 1.0), n_records), n_records))
    rates = _on_simplex(s[:C] / n)
    mean = _on_simplex(s[C : 2 * C] / n)
    optimism = float(rates @ (1 - rates)) * dof / n
    cov = s[2 * C] / n - float(rates @ mean) - optimism
    ridge = 2.0 * noise_std / n
    var = max(s[2 * C + 1] / n - float(mean @ mean), 0.0) + ridge
    slope = cov / var if var > 0 and np.isfinite(cov / var) else 0.0
    top = max(MIN_SLOPE, min(MAX_SLOPE, float(np.min(rates / mean))))
    return LinearRecalibration(float(np.clip(slope, MIN_SLOPE, top)), rates, mean)
