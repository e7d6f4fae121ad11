"""Boundary checks shared by every mechanism, the ledger and calibration.

Each check raises ``ValueError`` naming the parameter, the value found and the
allowed range, so that a misconfigured run fails before anything is released.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    return float(value)


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as float if it lies in (0, inf) (or (0, inf] with ``allow_inf``)."""
    x = _as_float(name, value)
    upper = "inf]" if allow_inf else "inf)"
    if math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{name} must lie in (0, {upper}; got {value!r}")
    return x


def check_delta(name: str, value: object) -> float:
    """Return ``value`` as float if it lies in [0, 1)."""
    x = _as_float(name, value)
    if not 0.0 <= x < 1.0:
        raise ValueError(f"{name} must lie in [0, 1); got {value!r}")
    return x


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as float if it lies in (0, 1]."""
    x = _as_float(name, value)
    if not 0.0 < x <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1]; got {value!r}")
    return x


def check_open_unit(name: str, value: object) -> float:
    """Return ``value`` as float if it lies in (0, 1)."""
    x = _as_float(name, value)
    if not 0.0 < x < 1.0:
        raise ValueError(f"{name} must lie in (0, 1); got {value!r}")
    return x


def check_count(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as int if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_finite_array(name: str, values: object, *, ndim: int | None = None) -> np.ndarray:
    """Return ``values`` as a float64 array after checking every entry is finite."""
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
            f"found {arr[first]!r} at index {first}"
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
