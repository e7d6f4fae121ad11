"""Checks shared by the histogram learners' ``answer_many`` tests.

:func:`drive` runs a strategy to its end against one handler, asking every query
twice: client by client through ``answer`` (each its own state) and all at once
through ``answer_many`` (one shared state), and compares each row with the
client's own reply, bit for bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from fedpriv.federation.protocol import ClientData
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for, private_rng

#: Clients' row counts: K from 1 to 5, a client may hold no rows.
SIZES = st.lists(st.integers(0, 60), min_size=1, max_size=5)


def graded_labels(rng: np.random.Generator, X: np.ndarray, n_classes: int) -> np.ndarray:
    """Class codes (as floats) that grow with feature 0, so trees and terms have signal."""
    return np.minimum(rng.random(len(X)) * n_classes * (0.5 + X[:, 0]), n_classes - 1) // 1


def mixed_rows(n: int, n_classes: int, seed: int, numeric: np.ndarray):
    """n rows in [0, 1]: the ``numeric`` columns uniform, the others binary (P = 0.4)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, numeric.size))
    X[:, ~numeric] = X[:, ~numeric] < 0.4
    return X, graded_labels(rng, X, n_classes)


def split(X: np.ndarray, y: np.ndarray, sizes: Sequence[int], first_id: int = 7):
    """Consecutive blocks of ``sizes`` rows, one client each (ids from ``first_id``:
    not their positions)."""
    bounds = np.cumsum([0, *sizes])
    return [
        ClientData(client_id=first_id + i, X=X[a:b], y=y[a:b])
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def drive(
    strategy,
    handler,
    clients: list[ClientData],
    *,
    epsilon: float | None = None,
    seed: int = 0,
    asked: Callable[[int, int], bool] = lambda r, i: True,
    drop_cache: bool = False,
    answered: list[ClientData] | None = None,
) -> list[str]:
    """Run ``strategy`` to its end; every round, ``answer_many``'s rows must equal each
    client's ``answer`` exactly (a client ``asked(round, i)`` says no to gets an empty
    sample, and a row of zeros). ``drop_cache``: the per-client states lose their
    cache entries every round (as over Flower). ``answered``: the clients ``answer``
    sees (default: ``clients``; a twin gives one client other rows). Returns the
    rounds' phases."""
    answered = clients if answered is None else answered
    ledger = None
    if epsilon is not None:
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    strategy.begin(
        n_features=clients[0].X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(seed),
        secret_rng=private_rng(seed),
    )
    keys = [key_for(100 + c.client_id) for c in clients]
    shared: dict = {}
    states: list[dict] = [{} for _ in clients]
    phases = []
    while (q := strategy.next_query()) is not None:
        who = [asked(q.round, i) for i in range(len(clients))]
        samples = [
            np.arange(c.n) if w else np.zeros(0, dtype=np.int64)
            for c, w in zip(clients, who, strict=True)
        ]
        many = handler.answer_many(q, clients, samples, shared, keys)
        # float64, as a node uploads (a client without rows too: not a dropout).
        assert many.shape == (len(clients), q.reply_length) and many.dtype == np.float64
        total = np.zeros(q.reply_length)
        for i in range(len(clients)):
            if not who[i]:
                np.testing.assert_array_equal(many[i], 0.0)
                continue
            one = handler.answer(q, answered[i], samples[i], states[i], keys[i])
            np.testing.assert_array_equal(many[i], one, err_msg=f"round {q.round}, client {i}")
            assert one.dtype == np.float64, f"round {q.round}, client {i}: {one.dtype}"
            total += one
            if drop_cache:
                for name in getattr(handler, "cache_keys", ()):
                    states[i].pop(name, None)
        phases.append(str(q.config.get("phase", q.config.get("kind", "counts"))))
        strategy.update(q, total)
    return phases


def begun(strategy, n_features: int, seed: int = 0):
    """``strategy`` begun without a ledger (non-private), public seed ``seed``."""
    strategy.begin(n_features=n_features, ledger=None, rng=np.random.default_rng(seed),
                   secret_rng=private_rng(seed))  # fmt: skip
    return strategy


def fit_arrays(model) -> dict[str, np.ndarray]:
    """A released model's arrays (``to_arrays``), for bit-for-bit comparisons."""
    return {k: np.asarray(v) for k, v in model.to_arrays().items()}


def assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def run_fit(
    make_strategy: Callable[[], object],
    handler,
    clients: list[ClientData],
    *,
    vectorised: bool,
    secure: bool,
    participation: float | None = None,
    epsilon: float = 2.0,
) -> dict[str, np.ndarray]:
    """The released model's arrays of one in-process fit (a fixed key: the same noise
    and coins whatever the path)."""
    from fedpriv.federation.runtime import InProcessRuntime

    runtime = InProcessRuntime(
        clients=clients,
        handler=handler,
        seed=3,
        secret_key=key_for(5),
        participation=participation,
        secure_aggregation=secure,
        vectorised=vectorised,
    )
    assert runtime.vectorised == vectorised  # the handler has the fast path
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    return fit_arrays(runtime.run(make_strategy(), ledger=ledger).model())


def assert_paths_agree(make_strategy, make_handler, clients, **kw) -> dict[str, np.ndarray]:
    """All at once = per client (the reference), under plain and under secure sums (with
    ρ < 1 these two differ: a round with too few participants for the secure
    aggregation's threshold releases nothing). Returns the plain fit's arrays."""
    fits = {}
    for secure in (True, False):
        ref = run_fit(make_strategy, make_handler(), clients, vectorised=False, secure=secure, **kw)
        got = run_fit(make_strategy, make_handler(), clients, vectorised=True, secure=secure, **kw)
        assert_same_arrays(got, ref)
        fits[secure] = ref
    return fits[False]
