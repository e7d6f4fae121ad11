"""Unit-level audits: neighbouring datasets differ by one whole unit of m records.

The learner audits of :mod:`fedpriv.experiments.audit.learners` add one canary
record; here the canary is a *unit* (a patient) of m identical canary records,
appended to the last client with its own unit code, while every row of D is its
own unit. Each client carries its rows' units (:class:`~fedpriv.federation.protocol.
ClientData` ``units``), so the runtime samples units whole and the handlers see
them, exactly as a node with a schema ``unit_column`` does after bounding
(:mod:`fedpriv.privacy.units`). The honest learner's ε covers the unit; each
broken twin is the record-level learner run on the same unit data:

* ``dp_gam-unit`` (DP-EBM, the intercept and one column round, as
  :func:`~fedpriv.experiments.audit.gam.gam_audit`): honest, the strategy calibrates
  to a unit's sensitivity m·Δ; twin, to one record's Δ (no scaling by m), so the
  canary unit's m gradients stand m times further out of the noise.
* ``dpsgd-logistic-unit`` (T = 3 full-batch steps, as
  :func:`~fedpriv.experiments.audit.learners.dpsgd_audit`): honest, each client
  clips each unit's summed gradient to C; twin, it clips per record (each of the
  unit's m gradients to C), so the unit moves a step by m·C under noise for C.

Statistics as in the record-level audits: the canary bin's shape value; Σ_t of
the released step minus D's own clipped sum, projected on the canary's clipped
direction, over C.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.clients.gam import GAMClient
from fedpriv.experiments.audit.learners import (
    CanaryData,
    LearnerAudit,
    corner_rows,
    random_rows,
    sgd_canary_statistic,
)
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig

from fedpriv.federation.protocol import ClientData
from fedpriv.models.networks import NetworkSpec

#: The canary unit's records (the public bound m every honest learner calibrates to).
UNIT_RECORDS = 20


@dataclass(frozen=True)
class UnitCanaryData(CanaryData):
    """D (each row its own unit) and, in D', a canary unit of ``m`` canary records."""

    m: int = UNIT_RECORDS
    _units: dict = field(default_factory=dict, compare=False, repr=False)

    def clients(self, canary: bool) -> list[ClientData]:
        if canary not in self._units:
            X, y = list(self.X), list(self.y)
            if canary:
                X[-1] = np.vstack([X[-1], np.tile(self.canary_x, (self.m, 1))])
                y[-1] = np.append(y[-1], np.full(self.m, self.canary_y))
            out = []
            for k, (a, b) in enumerate(zip(X, y, strict=True)):
                n_own = len(self.y[k])
                units = np.arange(len(b))  # D's rows: one unit each
                units[n_own:] = n_own  # the canary unit: one code for all m records
                out.append(ClientData(client_id=k, X=a, y=b, units=units))
            self._units[canary] = out
        return self._units[canary]


def unit_data(data: CanaryData, m: int = UNIT_RECORDS) -> UnitCanaryData:
    """``data``'s rows with a canary unit of ``m`` copies of its canary record."""
    return UnitCanaryData(X=data.X, y=data.y, canary_x=data.canary_x, canary_y=data.canary_y, m=m)


@dataclass(frozen=True, kw_only=True)
class UnitAudit(LearnerAudit):
    """A :class:`LearnerAudit` whose twin may also swap the client half."""

    make_twin_handler: Callable[[], Any] | None = None

    def handler(self, twin: bool) -> Any:
        """The twin's client half where it has one (per-record clipping), else the honest one."""
        return (self.make_twin_handler if twin and self.make_twin_handler else self.make_handler)()


def _unit_audit(
    name: str, base: CanaryData, m: int, epsilon: float, delta: float, **parts: Any
) -> UnitAudit:
    """The audit ``name`` on ``base``'s rows with a canary unit of ``m`` records."""
    return UnitAudit(name=name, epsilon=epsilon, delta=delta, data=unit_data(base, m), **parts)


def gam_unit_audit(
    *, m: int = UNIT_RECORDS, epsilon: float = 2.0, delta: float = 1e-5, n_rows: int = 200
) -> UnitAudit:
    """DP-EBM on :func:`~fedpriv.experiments.audit.learners.corner_rows` labelled 0 and a
    canary unit of m records (1, 1) labelled 1, alone in term 0's bin 1; the statistic
    is that bin's shape value. Honest: ``unit_records=m``; twin: ``unit_records=1``."""
    base = corner_rows(n_rows)
    base = replace(base, y=tuple(np.zeros_like(y) for y in base.y), _cache={})
    config = GAMConfig(rounds=2, quantile_bins=False, learning_rate=1.0, lam=17.0,
                       reg_lambda=1.0, max_update=100.0, bins=2)  # fmt: skip

    def make_strategy(twin: bool) -> DPGAMStrategy:
        return DPGAMStrategy(config, unit_records=1 if twin else m)

    return _unit_audit(  # the audit's name, rows, m, ε and δ
        "dp_gam-unit", base, m, epsilon, delta,
        twin="record-level sensitivity (no scaling by m)",
        make_strategy=make_strategy,
        make_handler=GAMClient,
        statistic=lambda run: float(run.model.shapes[0][1]),
    )  # fmt: skip


class PerRecordClipping(DPSGDClient):
    """The broken twin's client: clips each record's gradient, ignoring its unit."""

    def answer(self, query, data, sample, state, key=None):
        plain = ClientData(client_id=data.client_id, X=data.X, y=data.y)
        return super().answer(query, plain, sample, state, key)

    def answer_many(self, query, datas, samples, state, keys=None):
        return np.stack(
            [self.answer(query, d, s, state) for d, s in zip(datas, samples, strict=True)]
        )


def dpsgd_unit_audit(
    *, m: int = UNIT_RECORDS, epsilon: float = 2.0, delta: float = 1e-5, rounds: int = 3,
    n_rows: int = 40,
) -> UnitAudit:  # fmt: skip
    """DP-SGD logistic, T full-batch steps on random rows and a canary unit of m records
    (1, 1) labelled 1. Honest: one clipped sum per unit; twin: per-record clipping."""
    base = random_rows(n_rows, "dpsgd-logistic-unit")
    clip = 0.25
    config = LogisticConfig(rounds=rounds, learning_rate=1.0, clip_norm=clip, sampling_rate=1.0,
                            centre_share=0.0, recalibrate_share=0.0)  # fmt: skip
    # The public bound on the records, the same for D and D': K × (a client's rows + m).
    n_public = len(base.y) * (max(len(y) for y in base.y) + m)
    spec = NetworkSpec(kind="logistic", n_features=base.X[0].shape[1])
    statistic = sgd_canary_statistic(spec, base, config, n_public, clip)

    return _unit_audit(  # the audit's name, rows, m, ε and δ
        "dpsgd-logistic-unit", base, m, epsilon, delta,
        twin="per-record clipping (each of the unit's m gradients to C)",
        # One strategy for both (steps keep Δ = C per unit): only the client differs.
        make_strategy=lambda twin: DPSGDStrategy(config, n_records=n_public, unit_records=m),
        make_handler=DPSGDClient,
        make_twin_handler=PerRecordClipping,
        statistic=statistic,
    )  # fmt: skip


#: Trials per side of each unit audit in CI (tests/privacy/test_unit_audits.py).
UNIT_TRIALS = {"dp_gam-unit": 300, "dpsgd-logistic-unit": 300}
