"""Reading a query's sensitivity-setting values for ``reply_sensitivity``, failing closed.

A node derives each reply's sensitivity from the query's public settings only
(:meth:`~fedpriv.federation.protocol.ClientHandler.reply_sensitivity`); a
missing key, a value of the wrong type or out of range must refuse the query
(``ValueError``, naming key, value and allowed range), never fall back to a default.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fedpriv.federation.protocol import Query


def setting_int(query: Query, key: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``query.config[key]`` as an int in [minimum, maximum] (a bool or float is refused)."""
    hi = "inf)" if maximum is None else f"{maximum}]"
    if key not in query.config:
        raise ValueError(f"query config lacks {key!r} (an integer in [{minimum}, {hi})")
    value = query.config[key]
    ok = (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, np.integer)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{key} must be an integer in [{minimum}, {hi}; got {value!r}")
    return int(value)


def setting_choice(query: Query, key: str, allowed: Iterable[str]) -> str:
    """``query.config[key]`` as one of ``allowed`` (strings)."""
    allowed = list(allowed)
    value = query.config.get(key)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{key} must be one of {allowed}; got {value!r}")
    return str(value)


def require_rate(query: Query, rate: float = 1.0) -> None:
    """Refuse a query whose sampling rate is not ``rate`` (a method that counts every
    record in every round: its sensitivity assumes q = 1)."""
    if query.sampling_rate != rate:
        raise ValueError(f"sampling_rate must be {rate}; got {query.sampling_rate!r}")
