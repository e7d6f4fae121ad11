"""Readers of a query's public settings, shared by a handler's ``answer`` and ``reply_sensitivity``.

A node derives a query's sensitivity from exactly the settings
``reply_sensitivity`` reads, so ``answer`` must clip by the very same values:
both call these readers, and a missing, mistyped, non-finite or out-of-range
setting raises :class:`ValueError` (the node then refuses the query before any
row is read) instead of falling back to a default.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np

from fedpriv.federation.protocol import Query


def setting(query: Query, key: str) -> Any:
    """``query.config[key]``; a missing key raises ``ValueError`` naming it."""
    try:
        return query.config[key]
    except KeyError:
        raise ValueError(f"query config lacks {key!r} (method {query.method!r})") from None


def choice_setting(query: Query, key: str, allowed: Collection[str], *, default: str) -> str:
    """The string ``query.config[key]`` (``default`` when absent), one of ``allowed``."""
    value = query.config.get(key, default)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"query config {key} must be one of {sorted(allowed)}; got {value!r}")
    return value


def count_setting(query: Query, key: str, *, minimum: int) -> int:
    """The integer ``query.config[key]`` in [``minimum``, inf)."""
    value = setting(query, key)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"query config {key} must be an integer in [{minimum}, inf); got {value!r}"
        )
    return int(value)


def bound_setting(query: Query, key: str, *, zero: bool = False) -> float:
    """The finite real ``query.config[key]`` in (0, inf), or [0, inf) with ``zero``."""
    value = setting(query, key)
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float | np.integer | np.floating)
        and math.isfinite(value)
        and (value >= 0 if zero else value > 0)
    )
    if not ok:
        allowed = "[0, inf)" if zero else "(0, inf)"
        raise ValueError(f"query config {key} must be a finite number in {allowed}; got {value!r}")
    return float(value)
