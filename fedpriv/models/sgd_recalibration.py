"""Recalibration of a DP-SGD model's output bias from released sums (calibration in the large).

DP-SGD's clipping changes the problem it solves: with the whole gradient
clipped jointly to C, an example's bias part becomes C·sign(r)/‖x̃‖, so the
bias settles where the *counts* of clipped positives and negatives balance,
not where Σ(p − y) = 0 (:mod:`fedpriv.strategies.dpsgd`, "Calibration"). The MLP keeps
that joint clip (its ReLU units are uncentred intercepts, against which a
separately clipped output bias drifts), and at C = 1 its mean prediction on
BRFSS is 0.05 for a base rate of 0.16.

The remedy is the last rounds of the run. Each of them asks every client for
Σ_i [p_i − e_{y_i}, p_i] over all its rows under the current model (p the
predicted class probabilities; one value each for two classes), released
with Gaussian noise; the server shifts the output bias by

    Δ_k = log ȳ_k − log p̄_k   (two classes: logit ȳ − logit p̄),

p̄ = Σp / N and ȳ = (Σp − Σ(p − e_y)) / N, N = ρ·n the public record count:
the shift that would make the mean prediction equal the released class
rates if every row had the same logit (Cox 1958's calibration intercept);
:data:`ROUNDS` rounds of it close the gap left by the rows' spread. A shift
changes no ranking (one bias per class), so it costs no AUC.

Privacy. Per record ‖p − e_y‖₂ ≤ √2 (two classes: |p − y| ≤ 1) and
‖p‖₂ ≤ 1, so one reply has L2 sensitivity √3 (two classes √2); the client
clips each record's parts to these bounds where it computes them.
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.models.gam_softmax import clip_rows
from fedpriv.models.networks import NetworkSpec
from fedpriv.models.recalibration import RATE_FLOOR
from fedpriv.models.recalibration import STAGE as linear_stage
from fedpriv.records import class_codes

#: Query ``config["stage"]`` of a recalibration round (bias shift) and of the
#: ``linear`` recalibration's round (:mod:`fedpriv.models.recalibration`).
RECALIBRATE, LINEAR = "recalibrate", linear_stage
STAGES = (RECALIBRATE, LINEAR)
#: Recalibration rounds at the end of a run that has them.
ROUNDS = 2
#: Largest bias shift of one round (logits): a public bound, so noise in a
#: tiny class cannot move the model far.
MAX_SHIFT = 4.0
# Class rates are clipped to [RATE_FLOOR, 1 − RATE_FLOOR] before the logarithm (the
# linear recalibration's floor, one constant for both: fedpriv.models.recalibration).


def sensitivity(n_outputs: int) -> float:
    """L2 sensitivity of one reply: √2 with one logit, √3 with K."""
    return math.sqrt(2.0) if n_outputs == 1 else math.sqrt(3.0)


def l1_sensitivity(n_outputs: int) -> float:
    """L1 sensitivity of one reply, as :func:`record_sums` clips whatever the model returns.

    One logit: |p − y| ≤ 1 and 0 ≤ p ≤ 1, so 2. K logits: each coordinate of
    p − e_y lies in [−1, 1] and its norm is clipped to √2, each of p in [0, 1]
    with norm ≤ 1; the largest L1 of a K-vector in a box of half-width a and a
    ball of radius r is min(K·a, √K·r): min(K, √(2K)) + √K.
    """
    if n_outputs == 1:
        return 2.0
    return min(n_outputs, math.sqrt(2.0 * n_outputs)) + math.sqrt(n_outputs)


def reply_length(n_outputs: int) -> int:
    return 2 * n_outputs


def record_sums(spec: NetworkSpec, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[Σ(p − e_y) | Σp]`` over the (mapped) rows ``X``, each record clipped to its bounds."""
    model = spec.model(params)
    p = np.asarray(model.predict_proba(X), dtype=np.float64)
    if spec.n_outputs == 1:
        p = np.clip(np.nan_to_num(p, nan=0.5), 0.0, 1.0)
        r = np.clip(np.nan_to_num(p - np.asarray(y, dtype=np.float64)), -1.0, 1.0)
        return np.array([r.sum(), p.sum()])
    codes = class_codes(y, spec.n_outputs)
    onehot = np.zeros_like(p)
    ok = codes >= 0
    onehot[np.flatnonzero(ok), codes[ok]] = 1.0
    r = clip_rows(p - onehot, math.sqrt(2.0))
    p = clip_rows(np.clip(p, 0.0, 1.0), 1.0)
    return np.concatenate([r.sum(axis=0), p.sum(axis=0)])


def bias_shift(
    released: np.ndarray, n_records: float, n_outputs: int, *, noise_std: float = 0.0
) -> np.ndarray:
    """The output bias shift Δ from a released ``[Σ(p − e_y) | Σp]`` (post-processing).

    ``noise_std`` σ: the noise std on each released coordinate. A rate is not
    estimable below its noise, so p̄ and ȳ are floored at max(:data:`RATE_FLOOR`,
    2σ/N) before the logarithm: a rare class whose noisy mean prediction comes
    out near 0 would otherwise get the largest shift (measured: a BRFSS 3-class
    MLP at ε = 0.5 predicting the 2 % class for 37 % of the mass).
    """
    released = np.asarray(released, dtype=np.float64)
    resid, total = released[:n_outputs], released[n_outputs:]
    floor = min(max(RATE_FLOOR, 2.0 * noise_std / n_records), 0.5)
    p_bar = np.clip(total / n_records, floor, 1.0 - floor)
    y_bar = np.clip((total - resid) / n_records, floor, 1.0 - floor)
    if n_outputs == 1:
        shift = np.log(y_bar / (1 - y_bar)) - np.log(p_bar / (1 - p_bar))
    else:
        shift = np.log(y_bar) - np.log(p_bar)
        shift = shift - shift.mean()  # softmax: only differences between classes count
    return np.clip(shift, -MAX_SHIFT, MAX_SHIFT)


def shift_output_bias(spec: NetworkSpec, params: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """A copy of ``params`` with ``shift`` added to the output bias (its last entries)."""
    out = np.array(params, dtype=np.float64)
    out[out.size - spec.n_outputs :] += shift
    return out
