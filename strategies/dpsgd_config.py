"""DP-SGD's settings: logistic regression's and the one-hidden-layer MLP's.

The defaults are the paper's selected settings (Table 5); ``rounds``,
``sampling_rate`` and ``learning_rate`` are automatic (0) and follow the
public record bound n (:mod:`fedpriv.strategies.dpsgd_schedule`): the paper's q =
0.02, T = 800 and learning rate on tables of 25,000 records and more. The
strategy (:mod:`fedpriv.strategies.dpsgd`) resolves them once, at construction
(:meth:`LogisticConfig.for_records`), and every reader sees its config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from fedpriv.strategies.dpsgd_schedule import AUTO, schedule

from fedpriv.federation.constraints import Interval, check_fields, integers, setting
from fedpriv.federation.limits import SIZE_LIMITS
from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import ModelKind
from fedpriv.options import Backend, Recalibration
from fedpriv.privacy.participation import ParticipationAccounting, parse_accounting
from fedpriv.validation import check_count

#: ``rounds`` / ``sampling_rate`` / ``learning_rate`` of 0: automatic
#: (:mod:`fedpriv.strategies.dpsgd_schedule`).
AUTO_ROUNDS, AUTO_RATE = AUTO, float(AUTO)
_AUTO = "0: automatic"
_SCHEDULE = "from the public record bound, fedpriv.strategies.dpsgd_schedule"
_ROUNDS = integers(
    1, zero=_AUTO, most=SIZE_LIMITS["logistic"]["rounds"],
    note=f"{_SCHEDULE}; and at least a step plus the centring and recalibration rounds, "
    "4 at the defaults",
)  # fmt: skip
_RECALIBRATE_SHARE = Interval(0, 1, closed="left", note="and below 1 − centre-share")


@dataclass(frozen=True, kw_only=True)
class LogisticConfig:
    """DP-SGD logistic regression; defaults are the paper's selected settings
    (Table 5: C 3.0; q 0.02, 800 steps and learning rate 2.0 where the table is large).

    ``rounds`` is the number of federated rounds (the DP-SGD steps, the centring
    and recalibration rounds), ``sampling_rate`` the steps' Poisson rate q. Each
    of them and ``learning_rate`` left at 0 (the default) is automatic:
    :meth:`for_records` resolves it from the public record bound n, keeping an
    expected batch q·n of at least 500 records, the paper's 16 epochs and a
    step's parameter noise (q = max(0.02, 500/n), T = 16/q, learning rate
    2.0·√(0.02/q); :mod:`fedpriv.strategies.dpsgd_schedule`): the paper's q 0.02, T 800
    and learning rate from n = 25,000 on. The privacy budget is the run
    ledger's, not a setting here; without a ledger
    (the non-private reference) gradients are still clipped to C, which
    bounds every step. ``backend`` picks how clients compute per-example
    gradients (:class:`~fedpriv.options.Backend`). ``standardise`` maps the
    numeric features by the public schema's box (never by data statistics).
    ``participation_accounting`` is ``valid`` (default), ``tight`` or
    ``paper`` (not a valid guarantee; :mod:`fedpriv.strategies.dpsgd`). ``centre_share`` s:
    round 0 releases the features' mean, the T − 1 steps have the rest (the
    shares set the stages' relative noise, one scale spends the whole ε:
    :mod:`fedpriv.strategies.dpsgd_plan`), and the output bias is clipped on its own
    (:mod:`fedpriv.strategies.dpsgd`, "Calibration"); 0: no centring round, one joint clip to C.
    ``recalibrate_share`` r: the last two rounds recalibrate the model with the
    share r, as ``recalibration`` says (:mod:`fedpriv.strategies.dpsgd_recalibration`):
    ``bias`` (logistic regression's default) releases the mean prediction and
    the class rates and shifts the output bias to match
    (:mod:`fedpriv.models.sgd_recalibration`); ``linear`` fits the Brier-optimal
    affine map of the probabilities, which also shrinks the spread noise in
    the weights adds (:mod:`fedpriv.models.recalibration`); ``auto`` (the
    MLP's) is ``linear`` when that noise is large. The steps clip jointly to C.
    With r = 0 (and centring) logistic regression clips its bias on its own
    instead, at √(C² + B²) noise (:mod:`fedpriv.strategies.dpsgd`, "Calibration").
    """

    model: ClassVar[ModelKind] = ModelKind.LOGISTIC
    #: The paper's learning rate (Table 5), η₀ of the automatic one.
    paper_learning_rate: ClassVar[float] = 2.0
    rounds: int = setting(AUTO_ROUNDS, _ROUNDS)
    learning_rate: float = setting(
        AUTO_RATE, Interval(0, None, closed="neither", zero=_AUTO, note=_SCHEDULE)
    )
    sampling_rate: float = setting(
        AUTO_RATE, Interval(0, 1, closed="right", zero=_AUTO, note=_SCHEDULE)
    )
    clip_norm: float = setting(3.0, Interval(0, None, closed="neither"))
    backend: Backend = Backend.FAST
    standardise: bool = True
    participation_accounting: ParticipationAccounting = ParticipationAccounting.VALID
    centre_share: float = setting(0.05, Interval(0, 1, closed="left"))
    recalibrate_share: float = setting(0.05, _RECALIBRATE_SHARE)
    recalibration: Recalibration = Recalibration.BIAS

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "participation_accounting", parse_accounting(self.participation_accounting)
        )
        object.__setattr__(self, "backend", Backend.parse(self.backend))
        object.__setattr__(self, "recalibration", Recalibration.parse(self.recalibration))
        check_fields(self)
        share, rs = self.centre_share, self.recalibrate_share
        if not rs < 1 - share:
            raise ValueError(f"recalibrate_share must lie in [0, 1 − centre_share); got {rs!r}")
        least = self.least_rounds
        takes = [f"centre_share={share} takes the first" if share > 0 else ""]
        takes.append(f"recalibrate_share={rs} the last {recal.ROUNDS}" if rs > 0 else "")
        why = " and ".join(t for t in takes if t)
        _auto_or(
            lambda name, v: check_count(name, v, minimum=least), "rounds", self.rounds,
            f"[{least}, inf)" + (f" ({why} of the rounds, and a step)" if why else ""),
        )  # fmt: skip

    @property
    def least_rounds(self) -> int:
        """The fewest rounds the plan takes: the centring round, the recalibration
        rounds and one step."""
        recalibrating = self.recalibrate_share > 0
        return int(self.centre_share > 0) + recal.ROUNDS * int(recalibrating) + 1

    @property
    def automatic(self) -> bool:
        """Whether a setting awaits :meth:`for_records` (``rounds``, ``sampling_rate`` or
        ``learning_rate`` left at 0, automatic)."""
        return AUTO in (self.rounds, self.sampling_rate, self.learning_rate)

    def for_records(self, n_records: int) -> LogisticConfig:
        """This configuration with its automatic ``rounds``, ``sampling_rate`` and
        ``learning_rate`` resolved from the public record bound ``n_records``
        (:func:`fedpriv.strategies.dpsgd_schedule.schedule`); explicit values are kept. The
        caller's n is the strategy's public bound, never the exact private count."""
        if not self.automatic:
            return self
        rounds, rate, lr = schedule(
            check_count("n_records", n_records), rounds=self.rounds,
            sampling_rate=self.sampling_rate, learning_rate=self.learning_rate,
            paper_learning_rate=self.paper_learning_rate, least=self.least_rounds,
        )  # fmt: skip
        return dataclasses.replace(self, rounds=rounds, sampling_rate=rate, learning_rate=lr)

    def resolved(
        self, *, epsilon: float | None = None, delta: float | None = None, n_records: int
    ) -> LogisticConfig:
        """:meth:`for_records` under the registry's one resolution
        (:meth:`fedpriv.methods.Method.resolve_config`): the schedule follows n only."""
        return self.for_records(n_records)

    @property
    def hidden(self) -> int:
        return 1  # no hidden layer; MLPConfig makes it a setting


@dataclass(frozen=True, kw_only=True)
class MLPConfig(LogisticConfig):
    """DP-SGD one-hidden-layer MLP (paper Table 5: h 16, learning rate 3.0, the automatic
    one's η₀).

    Its recalibration is ``auto`` with a share of 0.1: on small data the noise in
    its hidden and output weights spreads its logits (standard deviation about
    7 on a 3,072-row task at ε = 0.5), which a bias shift cannot undo, and the
    affine map's slope needs the larger share (measured there: Brier 0.210 at
    0.05, 0.204 at 0.1, base rate 0.210; :mod:`fedpriv.strategies.dpsgd_recalibration`).
    """

    model: ClassVar[ModelKind] = ModelKind.MLP
    paper_learning_rate: ClassVar[float] = 3.0
    hidden: int = setting(16, integers(1, most=SIZE_LIMITS["mlp"]["hidden"]))
    recalibrate_share: float = setting(0.1, _RECALIBRATE_SHARE)
    recalibration: Recalibration = Recalibration.AUTO


def _auto_or(check, name: str, value: object, allowed: str) -> None:
    """``value`` 0 (automatic) or in what ``check`` accepts; the error names both."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == AUTO:
        return
    try:
        check(name, value)
    except (TypeError, ValueError) as exc:
        why = f"{name} must be 0 (automatic) or lie in {allowed}; got {value!r}"
        raise type(exc)(why) from None
