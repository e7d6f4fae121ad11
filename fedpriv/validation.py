"""Boundary checks for parameters: counts, rates, probabilities, choices, arrays.

Every check returns the value in its canonical type or raises an error whose
message names the parameter, the value found and the allowed range, e.g.
``rounds must be an integer in [1, inf); got 2.7 (float)``, so that a
misconfigured run fails before anything is computed or released.

The checks are strict on purpose: ``True`` is not the integer 1 nor the rate
1.0 (a flag passed in the wrong slot), a float is never an integer (2.7 rounds
would silently become 2), and NaN or infinity pass only where a check says so.
A value of the wrong type raises ``TypeError``; one outside the range raises
``ValueError``.

Flower-free and light (numpy only): the federation core, the data layer and
the Flower ClientApp import it without loading :mod:`fedpriv.privacy`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from numbers import Integral, Real
from typing import TypeVar

import numpy as np

__all__ = [
    "check_choice",
    "check_count",
    "check_delta",
    "check_finite",
    "check_finite_array",
    "check_generator",
    "check_int",
    "check_open_unit",
    "check_positive",
    "check_probability",
]

T = TypeVar("T")


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _as_float(name: str, value: object, allowed: str) -> float:
    # bool is a Real (and an Integral) in Python; refuse it explicitly.
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number in {allowed}; got {_shown(value)}")
    return float(value)


def _in_range(name: str, value: object, x: float, ok: bool, allowed: str) -> float:
    # ``ok`` is computed by the caller with comparisons that are False for NaN.
    if not ok:
        raise ValueError(f"{name} must lie in {allowed}; got {value!r}")
    return x


def check_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` as ``int`` if it is an integer in [``minimum``, ``maximum``].

    Python and numpy integers pass; ``bool`` and every float (even 3.0) are refused
    with ``TypeError``. ``None`` bounds are unbounded.
    """
    lo = "(-inf" if minimum is None else f"[{minimum}"
    hi = "inf)" if maximum is None else f"{maximum}]"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer in {lo}, {hi}; got {_shown(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer in {lo}, {hi}; got {value!r}")
    return int(value)


def check_count(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as ``int`` if it is an integer in [``minimum``, inf) (strict, see
    :func:`check_int`)."""
    return check_int(name, value, minimum=minimum)


def check_finite(name: str, value: object) -> float:
    """Return ``value`` as ``float`` if it is a real number other than NaN and ±inf."""
    allowed = "(-inf, inf)"
    x = _as_float(name, value, allowed)
    return _in_range(name, value, x, math.isfinite(x), allowed)


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as ``float`` if it lies in (0, inf) (or (0, inf] with ``allow_inf``)."""
    allowed = "(0, inf]" if allow_inf else "(0, inf)"
    x = _as_float(name, value, allowed)
    return _in_range(name, value, x, x > 0 and (allow_inf or x < math.inf), allowed)


def check_delta(name: str, value: object) -> float:
    """Return ``value`` as ``float`` if it lies in [0, 1)."""
    x = _as_float(name, value, "[0, 1)")
    return _in_range(name, value, x, 0.0 <= x < 1.0, "[0, 1)")


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as ``float`` if it lies in (0, 1]."""
    x = _as_float(name, value, "(0, 1]")
    return _in_range(name, value, x, 0.0 < x <= 1.0, "(0, 1]")


def check_open_unit(name: str, value: object) -> float:
    """Return ``value`` as ``float`` if it lies in (0, 1)."""
    x = _as_float(name, value, "(0, 1)")
    return _in_range(name, value, x, 0.0 < x < 1.0, "(0, 1)")


def _same_kind(value: object, allowed: object) -> bool:
    return isinstance(value, type(allowed)) and isinstance(value, bool) == isinstance(allowed, bool)


def check_choice(name: str, value: T, allowed: Collection[T]) -> T:
    """Return ``value`` if it equals one of ``allowed`` and is an instance of its type.

    The type check keeps ``True`` from passing for 1 and 1.0 for 1 (``==`` alone
    would let both through).
    """
    if not any(_same_kind(value, a) and value == a for a in allowed):
        raise ValueError(f"{name} must be one of {list(allowed)!r}; got {value!r}")
    return value


def check_finite_array(name: str, values: object, *, ndim: int | None = None) -> np.ndarray:
    """Return ``values`` as a non-empty float64 array after checking every entry is finite."""
    arr = np.asarray(values, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional; got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must be non-empty; got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} must be finite everywhere (allowed range (-inf, inf)); "
            f"found {float(arr[first])!r} at index {first}"
        )
    return arr


def check_generator(name: str, rng: object) -> np.random.Generator:
    """Insist on an injected ``np.random.Generator`` (never the global RNG)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be an injected numpy.random.Generator derived from the run seed; "
            f"got {type(rng).__name__}"
        )
    return rng
