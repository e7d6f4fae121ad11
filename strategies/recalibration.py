"""A last round that recalibrates a released model's probabilities: the server half.

The query carries the released model; every client returns
:func:`fedpriv.models.recalibration.record_sums` of its rows under it (all
records, once); the server releases the sum with Gaussian noise of
sensitivity :data:`~fedpriv.models.recalibration.SENSITIVITY`, calibrated
for ``share``·(ε, δ) and reserved before any noise is drawn
(:meth:`~fedpriv.privacy.noise_stage.GaussianRounds.single`), and fits the
Brier-optimal affine map (:func:`fedpriv.models.recalibration.fit`, post-
processing). The learner's other releases take the rest of the budget; the
run's ledger composes them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import Query
from fedpriv.models import recalibration as maths
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.range_guard import sum_bound


class LinearRecalibrationRound:
    """The release and fit of :mod:`fedpriv.models.recalibration` at the end of a run.

    ``n_records``: a public upper bound on the record count behind the sums (the
    honest sums' range bound; the fit reads the count itself from the release);
    ``n_classes``: the public label set's size. One round by default
    (:meth:`plan`); a learner that plans its own noise for several rounds under
    one model (DP-SGD's ``linear`` recalibration) sets :attr:`noise` instead, and
    the map is fitted on the mean of the releases, whose noise std is σ/√k (k
    Gaussian releases of one statistic compose to exactly one at z/√k).
    ``unit_records``: m, the records of one privacy unit: the release's sensitivity
    is m·:data:`~fedpriv.models.recalibration.SENSITIVITY` (:mod:`fedpriv.privacy.units`).
    """

    #: One record's bound on a reply (the codec's range).
    record_bound = maths.SENSITIVITY

    def __init__(
        self, *, n_classes: int, n_records: float, share: float = 1.0, unit_records: int = 1
    ) -> None:
        self.n_classes = n_classes
        self.n_records = n_records
        self.share = share
        self.sensitivity = int(unit_records) * maths.SENSITIVITY  # one unit's (m records)
        self.noise: GaussianRounds | None = None
        self.map_: maths.LinearRecalibration | None = None
        self._totals: list[np.ndarray] = []

    @property
    def reply_length(self) -> int:
        return maths.reply_length(self.n_classes)

    def plan(self, ledger: PrivacyLedger | None, *, rng: np.random.Generator) -> None:
        """Calibrate for ``share``·(ε, δ) and reserve (no ledger: exact sums)."""
        self.noise = GaussianRounds.single(
            ledger,
            share=self.share,
            l2_sensitivity=self.sensitivity,
            rng=rng,
            sum_bound=sum_bound(maths.SENSITIVITY, self.n_records, sampling_rate=1.0),
        )

    def node_stage(
        self, *, method: str, config: Mapping[str, Any] | None = None
    ) -> NodeStage | None:
        """The declared stage of this round's queries (``None`` before :meth:`plan`, or
        in the non-private reference): the queries' settings of :meth:`query` (``config``:
        the method's own sensitivity-setting entries), at the planned noise."""
        if self.noise is None:
            return None
        return self.noise.node_stage(
            name=maths.STAGE,
            method=method,
            reply_length=self.reply_length,
            record_bound=self.record_bound,
            config={**(config or {}), "kind": maths.STAGE, "n_classes": int(self.n_classes)},
        )

    def query(self, *, round: int, method: str, arrays: dict, config: dict) -> Query:
        """The round's query: the released model's ``arrays`` and the method's ``config``."""
        return Query(
            round=round,
            method=method,
            sampling_rate=1.0,  # every record, once
            reply_length=self.reply_length,
            record_bound=self.record_bound,
            arrays=arrays,
            config={**config, "kind": maths.STAGE, "n_classes": self.n_classes},
        )

    def update(
        self, aggregate: np.ndarray, *, label: str, dof: float = 0.0
    ) -> maths.LinearRecalibration:
        """Release the summed reply and fit the map on every release so far (``dof``:
        the model's effective degrees of freedom, :func:`fedpriv.models.recalibration.fit`;
        public)."""
        total, std = aggregate, 0.0
        if self.noise is not None:
            # The aggregate itself: under distributed noise it is a DistributedSum, which
            # np.asarray would strip to a plain (exact-looking) array that release refuses.
            total = self.noise.release(aggregate, label=label)
            std = self.noise.noise_multiplier * self.sensitivity
        self._totals.append(np.asarray(total, dtype=np.float64))
        k = len(self._totals)
        mean = np.mean(self._totals, axis=0)
        self.map_ = maths.fit(mean, self.n_records, std / math.sqrt(k), dof)
        return self.map_

    @property
    def note(self) -> str | None:
        """Why the fitted map says nothing (a degenerate fit, from released values only),
        for the run's status; ``None`` when the map is informative or not fitted yet."""
        m = self.map_
        if m is None or not m.degenerate:
            return None
        return (
            f"the recalibration sums showed no positive association between the model's "
            f"probabilities and the labels above their noise (or a class predicted far "
            f"more often than it occurs): the map's slope is at its "
            f"floor {maths.MIN_SLOPE:g}, so the predictions are nearly the released class "
            f"rates {np.round(m.rates, 3).tolist()} (ranking kept); a larger recalibrate_share "
            f"or ε, or more records, would let the release show the spread"
        )
