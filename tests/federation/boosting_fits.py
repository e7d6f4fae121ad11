"""In-process DP boosting fits on a small public toy table, shared by the runtime and
secure-aggregation tests: one generator, one fit, one model comparison."""

import numpy as np
from fedpriv.clients.boosting import BoostingClient
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy

from fedpriv.data import iid
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for


def toy_clients(n_rows: int, n_clients: int):
    """``n_rows`` rows of 6 uniform features, a noisy non-linear label, split i.i.d."""
    rng = np.random.default_rng(0)
    X = rng.random((n_rows, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(0, 0.3, n_rows) > 0.9).astype(float)
    return make_clients(X, y, iid(n_rows, n_clients=n_clients, rng=np.random.default_rng(1)))


def boosting_fit(clients, *, rounds: int, depth: int, sampling_rate: float,
                 epsilon: float | None = 2.0, secret_key=None, **runtime):  # fmt: skip
    """(strategy, runtime, ledger) of one fit; an injected key (``key_for(0)`` unless
    given), so every path and every repeat draws the same noise and coins.
    ``epsilon=None``: no ledger (noise-free sums)."""
    cfg = BoostingConfig(rounds=rounds, depth=depth, sampling_rate=sampling_rate, intercept=False)
    budget = None if epsilon is None else PrivacyBudget(epsilon=epsilon, delta=1e-5)
    ledger = None if budget is None else PrivacyLedger(budget=budget)
    key = key_for(0) if secret_key is None else secret_key
    runtime.setdefault("seed", 7)
    rt = InProcessRuntime(clients=clients, handler=BoostingClient(), secret_key=key, **runtime)
    # The strategy planned for the runtime's ρ: one value (the engine refuses two).
    rho = runtime.get("participation", 1.0)
    return rt.run(DPBoostingStrategy(cfg, participation=rho), ledger=ledger), rt, ledger


def assert_same_model(a, b) -> None:
    """Two tree ensembles equal bit for bit: structure and leaf values."""
    assert len(a.trees) == len(b.trees)
    for ta, tb, va, vb in zip(a.trees, b.trees, a.leaf_values, b.leaf_values, strict=True):
        np.testing.assert_array_equal(ta.feature, tb.feature)
        np.testing.assert_array_equal(ta.threshold, tb.threshold)
        np.testing.assert_array_equal(va, vb)
