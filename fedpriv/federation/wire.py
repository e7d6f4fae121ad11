"""Queries and handler state as plain arrays + scalars, for transports that serialise.

Flower-free: the Flower apps wrap these dicts in ``ArrayRecord`` and
``ConfigRecord``. Scalars are cast to Python ``int``/``float``/``str``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.federation.protocol import Query

_HEAD = ("round", "method", "sampling_rate", "reply_length", "record_bound")


def _scalar(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, str):
        return v
    raise TypeError(f"cannot send {type(v).__name__} as a scalar")


def query_to_wire(q: Query) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    # asarray, not ascontiguousarray: that one turns a 0-d array (a model's kind) into 1-d.
    arrays = {k: np.asarray(v, order="C") for k, v in q.arrays.items()}
    config = {f"q.{k}": _scalar(getattr(q, k)) for k in _HEAD}
    config.update({f"c.{k}": _scalar(v) for k, v in q.config.items()})
    return arrays, config


def query_from_wire(arrays: dict[str, np.ndarray], config: dict[str, Any]) -> Query:
    head = {k: config[f"q.{k}"] for k in _HEAD}
    extra = {k[2:]: v for k, v in config.items() if k.startswith("c.")}
    return Query(arrays=dict(arrays), config=extra, **head)


def state_to_wire(state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Split a handler's state dict into arrays and scalars."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: _scalar(v) for k, v in state.items() if not isinstance(v, np.ndarray)}
    return arrays, scalars


def state_from_wire(arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> dict[str, Any]:
    return {**{k: np.array(v) for k, v in arrays.items()}, **scalars}
