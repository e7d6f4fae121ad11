"""Helpers of the release-boundary tests: run a learner on D and D + 1, keep what leaves.

The "release-boundary test" runs one learner on a dataset D and on D plus
one record appended last to client 0, with the same injected secret key (so
every existing row keeps its coins and the server's noise stream is the
same), and with every released value of the D + 1 run forced to equal the D
run's (replayed; the real mechanism still runs, so the noise streams stay
aligned). Then everything that leaves the curator — every query each client
receives, every reply length, the communication figures, the ledger, the
fitted model and its pickle — must be identical: whatever still differs is
a function of the exact data that no mechanism released.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for


def snapshot(query: Query) -> dict[str, Any]:
    """Everything a client receives in ``query`` (deep copies: strategies reuse buffers)."""
    return {
        "round": query.round,
        "method": query.method,
        "sampling_rate": query.sampling_rate,
        "reply_length": query.reply_length,
        "record_bound": query.record_bound,
        "arrays": {k: np.array(v, copy=True) for k, v in query.arrays.items()},
        "config": dict(query.config),
    }


class Recorder:
    """Wraps a client handler and records every (client, query) it is asked."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.method, self.log = inner, inner.method, []

    def answer(self, query, data: ClientData, sample, state, key=None):
        self.log.append((data.client_id, snapshot(query)))
        return self.inner.answer(query, data, sample, state, key)


class ReplayLedger(PrivacyLedger):
    """A ledger whose releases are recorded (``replay=None``) or replayed from a list.

    The mechanism always runs (same accounting, same noise draws); in replay
    mode its output is replaced by the recorded one of the same shape.
    """

    def __init__(self, *, replay: list[np.ndarray] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.replay, self.released = replay, []

    def release(self, mechanism, value, *, rng, **kw):
        out = super().release(mechanism, value, rng=rng, **kw)
        if self.replay is not None:
            want = self.replay[len(self.released)]
            if np.shape(want) == np.shape(out):
                out = np.array(want, copy=True)
        self.released.append(np.array(out, copy=True))
        return out


def with_canary(clients: list[ClientData], x: np.ndarray, y: float) -> list[ClientData]:
    """The same clients, client 0 holding one more record, appended last."""
    first = clients[0]
    grown = ClientData(
        client_id=first.client_id, X=np.vstack([first.X, x[None, :]]), y=np.append(first.y, y)
    )
    return [grown, *clients[1:]]


def run(
    strategy: Any,
    handler: Any,
    clients: list[ClientData],
    *,
    epsilon: float | None,
    delta: float,
    replay: list[np.ndarray] | None = None,
    key: int = 11,
    seed: int = 3,
) -> dict[str, Any]:
    """One in-process run; returns what left the curator and what was released."""
    recorder = Recorder(handler)
    runtime = InProcessRuntime(
        clients=clients, handler=recorder, seed=seed, secret_key=key_for(key)
    )
    ledger = None
    if epsilon is not None:
        ledger = ReplayLedger(replay=replay, budget=PrivacyBudget(epsilon=epsilon, delta=delta))
    strategy = runtime.run(strategy, ledger=ledger)
    return {
        "received": recorder.log,
        "communication": runtime.communication.to_dict(),
        "ledger": [] if ledger is None else [(e.label, repr(e.event)) for e in ledger.entries],
        "model": strategy.model().to_arrays(),
        "released": [] if ledger is None else ledger.released,
        "strategy": strategy,
    }


def flatten(obj: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every leaf value reachable from ``obj`` (arrays, scalars, strings) by its path."""
    out = {} if out is None else out
    if isinstance(obj, np.ndarray):
        out[path] = obj
    elif isinstance(obj, (bool, int, float, str, bytes, type(None), np.generic)):
        out[path] = obj
    elif isinstance(obj, enum.Enum):
        out[path] = str(obj)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=repr):
            flatten(obj[k], f"{path}[{k!r}]", out)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        for i, v in enumerate(items):
            flatten(v, f"{path}[{i}]", out)
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        fields = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        for f in dataclasses.fields(obj) if dataclasses.is_dataclass(obj) else ():
            fields.setdefault(f.name, getattr(obj, f.name))
        out[f"{path}<type>"] = type(obj).__qualname__
        for k in sorted(fields):
            flatten(fields[k], f"{path}.{k}", out)
    else:
        out[path] = repr(obj)
    return out


def differences(a: Any, b: Any, *, allowed: tuple[str, ...] = ()) -> list[str]:
    """Paths where ``a`` and ``b`` differ, except those containing one of ``allowed``."""
    fa, fb = flatten(a), flatten(b)
    diffs = []
    for path in sorted(set(fa) | set(fb)):
        if any(s in path for s in allowed):
            continue
        if path not in fa or path not in fb:
            diffs.append(f"{path}: only in {'D + 1' if path in fb else 'D'}")
            continue
        x, y = fa[path], fb[path]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            same = (
                np.shape(x) == np.shape(y)
                and np.asarray(x).dtype == np.asarray(y).dtype
                and np.array_equal(x, y)
            )
        else:
            same = type(x) is type(y) and x == y
        if not same:
            diffs.append(f"{path}: {_short(x)} != {_short(y)}")
    return diffs


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."
