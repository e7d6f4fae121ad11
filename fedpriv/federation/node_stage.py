"""What a run declares to each hospital's node, stage by stage, before any row is read.

A node that trusts no coordinator cannot take a server's word for ε. It accounts
only what it enforces itself, so a plan is declared as **stages**, each naming
every parameter the node checks on the queries it then answers:

- ``method`` and ``name``: which client half answers, and which of its query
  kinds (the handler's :meth:`reply_sensitivity` names the stage of a query);
- ``sampling_rate`` q: the node draws its own Poisson coins at exactly this rate;
- ``reply_length`` (the longest reply), ``record_bound`` and ``config`` (every
  query setting that fixes how much one record can move a reply: clip norms,
  bounds, group sizes): from these the node derives the per-record sensitivity
  itself, through the method's own maths
  (``handler.reply_sensitivity(stage.template())``), never from a server's Δ;
- ``rounds``: how many queries of this stage it answers;
- ``mechanism`` and ``noise``: the noise the release adds, in absolute units at
  ``reply_length`` (a Gaussian std, a Laplace scale), from which the node derives
  the noise multiplier with *its own* sensitivity. Under central noise the server
  adds it (the node's ε then rests on that: trust model); under distributed noise
  each node adds its own share and checks every query's share against it;
- ``participation`` ρ and its ``accounting`` (public client coins).

Mechanisms whose noise is not a scale of the reply (the exponential mechanism's
bounded range, a pure-DP selection, Lumberjack's sparse threshold) declare their
per-use ε (and δ) with ``unit``, the reply's L1 sensitivity they were calibrated
for: the node refuses the plan if its own derived sensitivity exceeds it. Such a
stage's event is composed ``uses`` times (default: once per round), since one
round's reply may feed several selections (a forest's leaves) or a whole
forest's rounds one analysis (Lumberjack's Theorem 6: ``uses`` = 1).

A round's sum may feed more than one release (bdpe's last level: the split
selection and the Laplace leaves from the same sums). The stage's own fields
describe the first; ``extra`` lists the others (:class:`StageRelease`), each on
the whole reply or on a named ``part`` of it, whose sensitivity the handler
states too (``ReplySensitivity.parts``) and whose length is public.

This module only describes; the node's checks and accountant are
:mod:`fedpriv.privacy.node_plan`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fedpriv.federation.protocol import Query


class StageMechanism(StrEnum):
    """The release a stage's rounds feed."""

    GAUSSIAN = "gaussian"  # noise: std σ per coordinate (value units, at reply_length)
    LAPLACE = "laplace"  # noise: scale b per coordinate (value units, at reply_length)
    BOUNDED_RANGE = "bounded_range"  # noise: ε per use of an ε-bounded-range mechanism
    PURE = "pure"  # noise: ε per use of a pure ε-DP mechanism
    APPROX = "approx"  # noise: ε per use, with ``delta`` per use (basic composition)
    NONE = "none"  # no release: a query of this stage that reads rows is refused


#: Mechanisms whose ``noise`` is a scale of the reply (the node derives z = noise / Δ).
SCALED = (StageMechanism.GAUSSIAN, StageMechanism.LAPLACE)
#: The scalar types a stage's ``config`` may hold (what crosses the wire as JSON).
SCALARS = (str, int, float, bool)


@dataclass(frozen=True, kw_only=True)
class StageRelease:
    """One more release from each round's sum of a stage (module docstring).

    ``part``: the named part of the reply it releases (``None``: all of it) and
    ``length`` that part's length (the rounding margin's d; default the reply's).
    ``mechanism``, ``noise``, ``unit``, ``uses`` and ``delta`` as on :class:`NodeStage`.
    """

    mechanism: StageMechanism
    noise: float
    unit: float | None = None
    uses: int | None = None
    delta: float = 0.0
    part: str | None = None
    length: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", StageMechanism(self.mechanism))
        if self.mechanism is StageMechanism.NONE:
            raise ValueError("an extra release needs a mechanism; got 'none'")
        _real_in("noise", self.noise, 0.0, math.inf, open_low=True)
        _real_in("delta", self.delta, 0.0, 1.0)
        if self.uses is not None:
            _int_in("uses", self.uses, 0)
        if self.length is not None:
            _int_in("length", self.length, 1)
        if self.unit is not None:
            _real_in("unit", self.unit, 0.0, math.inf, open_low=True)
        if self.mechanism not in SCALED and self.unit is None:
            raise ValueError(f"a {self.mechanism} release needs its unit")
        if self.part is not None and (not isinstance(self.part, str) or not self.part):
            raise ValueError(f"part must be a non-empty string; got {self.part!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": str(self.mechanism),
            "noise": float(self.noise),
            "unit": None if self.unit is None else float(self.unit),
            "uses": None if self.uses is None else int(self.uses),
            "delta": float(self.delta),
            "part": self.part,
            "length": None if self.length is None else int(self.length),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StageRelease:
        """A release from its wire form; unknown keys are refused."""
        return _from_wire(cls, raw, "release")


@dataclass(frozen=True, kw_only=True)
class NodeStage:
    """One stage of a declared plan (module docstring): every field public."""

    name: str
    method: str
    mechanism: StageMechanism
    rounds: int
    sampling_rate: float
    reply_length: int
    record_bound: float
    config: Mapping[str, Any] = field(default_factory=dict)
    noise: float = 0.0
    delta: float = 0.0
    unit: float | None = None
    uses: int | None = None
    participation: float = 1.0
    accounting: str = "valid"
    extra: tuple[StageRelease, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", StageMechanism(self.mechanism))
        object.__setattr__(self, "config", dict(self.config))
        object.__setattr__(
            self,
            "extra",
            tuple(r if isinstance(r, StageRelease) else StageRelease.from_dict(r)
                  for r in self.extra),
        )  # fmt: skip
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"stage name must be a non-empty string; got {self.name!r}")
        _int_in("rounds", self.rounds, 0)
        _int_in("reply_length", self.reply_length, 1)
        _real_in("sampling_rate", self.sampling_rate, 0.0, 1.0, open_low=True)
        _real_in("participation", self.participation, 0.0, 1.0, open_low=True)
        _real_in("record_bound", self.record_bound, 0.0, math.inf)
        _real_in("noise", self.noise, 0.0, math.inf)
        _real_in("delta", self.delta, 0.0, 1.0)
        if self.uses is not None:
            _int_in("uses", self.uses, 0)
        if self.unit is not None:
            _real_in("unit", self.unit, 0.0, math.inf, open_low=True)
        if self.mechanism in SCALED and not self.noise > 0:
            raise ValueError(f"stage {self.name!r}: a {self.mechanism} stage needs noise > 0")
        if self.mechanism not in (*SCALED, StageMechanism.NONE) and self.unit is None:
            raise ValueError(f"stage {self.name!r}: a {self.mechanism} stage needs its unit")
        for k, v in self.config.items():
            if not isinstance(k, str) or not isinstance(v, SCALARS):
                raise ValueError(
                    f"stage {self.name!r}: config entries must map names to scalars; "
                    f"got {k!r}: {v!r}"
                )

    @property
    def own_release(self) -> StageRelease | None:
        """The stage's own release as a :class:`StageRelease` (``None``: no mechanism)."""
        if self.mechanism is StageMechanism.NONE:
            return None
        return StageRelease(
            mechanism=self.mechanism, noise=self.noise, unit=self.unit, uses=self.uses,
            delta=self.delta,
        )  # fmt: skip

    def template(self) -> Query:
        """A query carrying exactly the stage's declared settings (no arrays): what the
        node derives the stage's sensitivity from."""
        return Query(
            round=0,
            method=self.method,
            sampling_rate=self.sampling_rate,
            reply_length=self.reply_length,
            record_bound=self.record_bound,
            config=dict(self.config),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "mechanism": str(self.mechanism),
            "rounds": int(self.rounds),
            "sampling_rate": float(self.sampling_rate),
            "reply_length": int(self.reply_length),
            "record_bound": float(self.record_bound),
            "config": dict(self.config),
            "noise": float(self.noise),
            "delta": float(self.delta),
            "unit": None if self.unit is None else float(self.unit),
            "uses": None if self.uses is None else int(self.uses),
            "participation": float(self.participation),
            "accounting": str(self.accounting),
            "extra": [r.to_dict() for r in self.extra],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> NodeStage:
        """A stage from its wire form; unknown or missing keys are refused."""
        return _from_wire(cls, raw, "stage")


def _from_wire(cls: type, raw: Any, what: str) -> Any:
    """``cls(**raw)``, refusing what is not a mapping of ``cls``'s fields."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"a {what} must be a mapping; got {type(raw).__name__}")
    allowed = set(cls.__dataclass_fields__)
    if extra := sorted(set(raw) - allowed):
        raise ValueError(f"unknown {what} keys {extra}; allowed: {sorted(allowed)}")
    return cls(**raw)


def _int_in(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"stage {name} must be an integer in [{low}, inf); got {value!r}")


def _real_in(name: str, value: object, low: float, high: float, *, open_low: bool = False) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (value > low if open_low else value >= low)
        and value <= high
    )
    if not ok:
        bracket = "(" if open_low else "["
        raise ValueError(f"stage {name} must lie in {bracket}{low}, {high}]; got {value!r}")
