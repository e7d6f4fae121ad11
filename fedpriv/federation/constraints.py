"""Each setting's allowed range, declared once beside its field.

A configuration dataclass (a method's, :class:`fedpriv.federation.settings.RunSettings`)
states each numeric field's range in the field's metadata, the shape of
scikit-learn's ``_parameter_constraints``::

    depth: int = setting(5, Interval(1, 12, kind=int))

and every reader derives from that one statement: :func:`check_fields` (called from
``__post_init__``) refuses a value outside it, :mod:`fedpriv.federation.ranges`
states it for ``fedpriv run --help`` and the generated reference page, and a run
config's memory bound (``most``, :data:`fedpriv.federation.limits.SIZE_LIMITS`) is
checked by :func:`fedpriv.federation.limits.check_sizes`. Choices and booleans need
no declaration: they are read off the field's type (an Enum's values, ``true |
false``). Conditions between fields (``rounds ≥`` the stages a plan takes) stay
code in ``__post_init__``; their ``note`` states them for people.

Light (no numpy, no Flower): the strategies' configuration modules import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

#: The metadata key of a field's constraint.
KEY = "range"
_CLOSED = {"both": (True, True), "left": (True, False), "right": (False, True),
           "neither": (False, False)}  # fmt: skip


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else f"{x}"


@dataclass(frozen=True)
class Interval:
    """Values in [``low``, ``high``] (``closed`` says which ends belong; ``None`` is
    unbounded: -inf, inf, never included).

    ``kind``: ``int`` (integers only, never ``True`` nor 2.0) or ``float`` (reals,
    not ``True``; NaN refused). ``zero``: what 0 means where it is also accepted
    (``"0: automatic"``); shown after the interval, with ``or 0`` when 0 lies
    outside it. ``inf``: +inf also accepted (ε's non-private reference).
    ``most``: a run config's tighter upper bound and why, ``(most, why)`` (what fits
    in memory, :data:`fedpriv.federation.limits.SIZE_LIMITS`); the library's own
    check keeps ``high``. ``unit``: after the interval (``s``). ``shown``: the
    interval's text when a bound is another setting (``[0, num-clients − 2]``).
    ``note``: a condition on other fields (checked in code), for ``--help``.
    """

    low: float | None
    high: float | None
    closed: str = "both"
    kind: type = float
    zero: str = ""
    inf: bool = False
    most: tuple[int, str] | None = None
    unit: str = ""
    shown: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.closed not in _CLOSED:
            raise ValueError(f"closed must be one of {list(_CLOSED)}; got {self.closed!r}")

    @property
    def ends(self) -> tuple[bool, bool]:
        """Whether ``low`` and ``high`` belong (an unbounded end never does)."""
        lo, hi = _CLOSED[self.closed]
        return lo and self.low is not None, hi and self.high is not None

    def interval(self, *, run: bool = False) -> str:
        """``[1, 12]``; with ``run``, the upper end a run config allows (``most``)."""
        if self.shown:
            return self.shown
        high = self.most[0] if run and self.most else self.high
        closed_lo, closed_hi = self.ends
        closed_hi = closed_hi or (run and self.most is not None)
        lo = "-inf" if self.low is None else _num(self.low)
        hi = "inf" if high is None else _num(high)
        return f"{'[' if closed_lo else '('}{lo}, {hi}{']' if closed_hi else ')'}"

    def text(self, *, run: bool = False) -> str:
        """The range as messages and ``--help`` state it: ``[0, inf) (0: automatic)``.

        ``run``: a run config's (``most`` as the upper end, and the ``note``)."""
        out = self.interval(run=run)
        if self.inf:
            out += " or inf"
        if self.zero and not self.contains(0):
            out += " or 0"
        if self.unit:
            out += f" {self.unit}"
        said = [s for s in (self.zero, self.note if run else "") if s]
        return out + (f" ({'; '.join(said)})" if said else "")

    def contains(self, x: float) -> bool:
        """Whether the number ``x`` lies in the interval (``zero`` and ``inf`` aside)."""
        closed_lo, closed_hi = self.ends
        above = self.low is None or (x >= self.low if closed_lo else x > self.low)
        below = self.high is None or (x <= self.high if closed_hi else x < self.high)
        return above and below and math.isfinite(x)

    def accepts(self, x: float) -> bool:
        """Whether the number ``x`` is allowed: in the interval, or 0 / inf where declared."""
        return self.contains(x) or (bool(self.zero) and x == 0) or (self.inf and x == math.inf)

    def check(self, name: str, value: object) -> Any:
        """``value`` if allowed, else ``TypeError`` (a wrong type) or ``ValueError``:
        ``depth must be an integer in [1, 12]; got 13``, ``alpha must lie in (0, 1]; got 2.0``."""
        shown = self.text()
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise TypeError(f"{name} must be an integer in {shown}; got "
                                f"{value!r} ({type(value).__name__})")  # fmt: skip
            if not self.accepts(int(value)):
                raise ValueError(f"{name} must be an integer in {shown}; got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(
                f"{name} must be a real number in {shown}; got {value!r} ({type(value).__name__})"
            )
        if not self.accepts(float(value)):
            raise ValueError(f"{name} must lie in {shown}; got {value!r}")
        return value


@dataclass(frozen=True)
class Options:
    """One of ``values`` (strings); an Enum field needs none (its type says it)."""

    values: tuple[str, ...]

    def text(self, *, run: bool = False) -> str:
        return " | ".join(self.values)

    def check(self, name: str, value: object) -> Any:
        if not isinstance(value, str) or value not in self.values:
            raise ValueError(f"{name} must be one of {list(self.values)}; got {value!r}")
        return value


@dataclass(frozen=True)
class Text:
    """A free string (a path, a name) and what it should be, for people only."""

    what: str

    def text(self, *, run: bool = False) -> str:
        return self.what

    def check(self, name: str, value: object) -> Any:
        return value


Constraint = Interval | Options | Text


def setting(default: Any, constraint: Constraint, **kwargs: Any) -> Any:
    """A dataclass field with ``default`` and its declared ``constraint``."""
    return dataclasses.field(default=default, metadata={KEY: constraint}, **kwargs)


def constraint_of(cls: type, name: str) -> Constraint | None:
    """The constraint declared on field ``name`` of dataclass ``cls`` (``None``: none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get(KEY)
    return None


def constraints(cls: type) -> dict[str, Constraint]:
    """Every declared constraint of dataclass ``cls``, by field name."""
    return {f.name: f.metadata[KEY] for f in dataclasses.fields(cls) if KEY in f.metadata}


def check_fields(obj: Any, *, skip: tuple[str, ...] = ()) -> None:
    """Each declared field of dataclass instance ``obj`` inside its constraint (a field
    holding ``None``, "unset", and the fields in ``skip`` aside)."""
    for name, c in constraints(type(obj)).items():
        value = getattr(obj, name)
        if value is not None and name not in skip:
            c.check(name, value)


def integers(low: int | None, high: int | None = None, **kwargs: Any) -> Interval:
    """Integers in [``low``, ``high``] (``high`` ``None``: unbounded); ``kwargs`` as
    :class:`Interval`'s."""
    return Interval(low, high, kind=int, **kwargs)
