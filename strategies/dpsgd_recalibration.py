"""The recalibration rounds at the end of a DP-SGD run (the server's side).

Two rounds, each releasing one Gaussian sum over every record under the
final model, one stage of the run's joint plan whose noise is set by
``recalibrate_share`` (:mod:`fedpriv.privacy.noise_plan`):

* ``bias``: each round shifts the output bias to the released class rates
  (:mod:`fedpriv.models.sgd_recalibration`);
* ``linear``: both rounds release the sums of the Brier-optimal affine map
  of the same model's probabilities (:mod:`fedpriv.models.recalibration`);
  the map is fitted on their mean, whose noise is 1/√2 of one round's (two
  Gaussian releases of one statistic compose to exactly one at z/√2).

``auto`` picks ``linear`` when the noise the steps leave in the weights is
large. A step adds N(0, (ηzC/(ρqn))²) to each parameter, so after T steps a
weight carries noise of standard deviation up to

    w = √T · η z C / (ρ q n)     (the noise walk; public: it depends on the plan only),

less where the loss pulls it back. From w ≈ :data:`WALK_LIMIT` on, the
logits of a wide model are mostly noise and their spread, not their mean,
is what ruins the probabilities. Measured with the MLP (64 hidden units, 400
steps, C = 1, q = 0.02) on the 4,800-row synthetic task, Brier score with
``bias`` → ``linear`` (base rate 0.209): ε = 0.5, w ≈ 0.7: 0.214 → 0.181;
ε = 1, w ≈ 0.4: 0.159 → 0.144; ε = 2, w ≈ 0.2: 0.122 → 0.123. On BRFSS at
ε = 0.5 (w ≈ 0.1) the map's slope is not estimable from the small share:
0.109 → 0.118. Below the limit the bias shift is the better choice.
"""

from __future__ import annotations

import math

import numpy as np
from fedpriv.strategies.recalibration import LinearRecalibrationRound

from fedpriv.models import recalibration as linear_recal
from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import NetworkSpec
from fedpriv.options import Recalibration
from fedpriv.privacy.noise_plan import StagePlan
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.range_guard import sum_bound

#: ``auto`` turns ``linear`` at this noise walk (module docstring).
WALK_LIMIT = 0.3


def noise_walk(*, steps: int, learning_rate: float, noise_std: float, batch: float) -> float:
    """w = √T · η · (zC) / (ρqn): the noise std a weight can gather over the steps."""
    return math.sqrt(steps) * learning_rate * noise_std / batch


def resolve(mode: Recalibration, walk: float) -> Recalibration:
    """The mode a run uses: ``auto`` is ``linear`` iff ``walk`` ≥ :data:`WALK_LIMIT`."""
    mode = Recalibration.parse(mode)
    if mode is Recalibration.AUTO:
        return Recalibration.LINEAR if walk >= WALK_LIMIT else Recalibration.BIAS
    return mode


class RecalibrationRounds:
    """The last :data:`~fedpriv.models.sgd_recalibration.ROUNDS` rounds of a run."""

    def __init__(self, mode: Recalibration, spec: NetworkSpec, n_records: float, *,
                 n_bound: float = 0.0, unit_records: int = 1) -> None:  # fmt: skip
        self.mode = Recalibration.parse(mode)
        if self.mode is Recalibration.AUTO:
            raise ValueError("resolve 'auto' before the rounds are planned")
        self.spec = spec
        self.n_records = n_records  # ρ·n: public, the steps' denominator
        # m: a unit's records each add their bounded sums (no per-unit clip here): m·Δ.
        self.unit_records = int(unit_records)
        # ``linear`` estimates the count behind its sums from the release itself and
        # clips it to the public bound on all records (n ≥ ρ·n; a round may see more).
        self.noise: GaussianRounds | None = None
        # ``linear``: the shared release and fit of the affine map.
        self._map = (
            LinearRecalibrationRound(
                n_classes=spec.n_classes,
                n_records=max(n_bound, n_records),
                unit_records=self.unit_records,
            )
            if self.mode is Recalibration.LINEAR
            else None
        )

    @property
    def map(self) -> linear_recal.LinearRecalibration | None:
        """The fitted affine map (``linear``, once a round is in), else ``None``."""
        return None if self._map is None else self._map.map_

    @property
    def note(self) -> str | None:
        """Why the fitted map says nothing (``linear``, a degenerate fit), else ``None``."""
        return None if self._map is None else self._map.note

    @property
    def stage(self) -> str:
        return recal.RECALIBRATE if self._map is None else recal.LINEAR

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of one reply: one unit's (m records')."""
        if self._map is None:
            return self.unit_records * recal.sensitivity(self.spec.n_outputs)
        return self._map.sensitivity

    @property
    def reply_length(self) -> int:
        if self._map is None:
            return recal.reply_length(self.spec.n_outputs)
        return self._map.reply_length

    def stage_plan(self, *, share: float, n_bound: int) -> StagePlan:
        """The rounds as one stage of the run's joint plan (:mod:`fedpriv.privacy.noise_plan`)."""
        return StagePlan(
            share=share,
            l2_sensitivity=self.sensitivity,
            sampling_rate=1.0,
            rounds=recal.ROUNDS,
            sum_bound=sum_bound(self.sensitivity, n_bound, sampling_rate=1.0),
            dims=self.reply_length,
        )

    def use(self, noise: GaussianRounds | None) -> None:
        """The rounds' planned noise (``None``: the non-private reference's exact sums)."""
        self.noise = noise
        if self._map is not None:
            self._map.noise = noise

    def update(self, t: int, aggregate: np.ndarray, params: np.ndarray) -> np.ndarray:
        """Release round ``t``'s sum; the parameters after it (``bias``: shifted)."""
        label = f"round {t}: recalibration sums"
        if self._map is not None:
            self._map.update(aggregate, label=label)
            return params
        total, std = aggregate, 0.0
        if self.noise is not None:
            total = self.noise.release(aggregate, label=label)
            std = self.noise.noise_multiplier * self.sensitivity
        shift = recal.bias_shift(total, self.n_records, self.spec.n_outputs, noise_std=std)
        return recal.shift_output_bias(self.spec, params, shift)
