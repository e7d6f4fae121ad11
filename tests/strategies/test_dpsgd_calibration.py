"""DP-SGD on wide public bounds: the mean prediction stays at the base rate.

The toy is the public-bounds-skewed table of the calibration analysis
(:mod:`fedpriv.strategies.dpsgd`, "Calibration"): amounts with the public box
[0, 1e6] whose values sit near 1e4 (≈ −1.7 after the box map, on every row)
and one-hot columns. Without the centring round and the separately clipped
bias, logistic regression's last iterate predicted a mean of 0.001 without
noise (base rate 0.23).
"""

import math

import numpy as np
import pytest
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig

from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.models.networks import InputMap
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for

N = 10_000
ROUNDS = 400  # half the default's steps: the symptom and the fix show as clearly


def _skewed(seed=0):
    rng = np.random.default_rng(seed)
    amounts = rng.lognormal(math.log(1e4), 0.8, size=(N, 6)).clip(0, 1e6) / 1e6  # min-max
    levels = (7, 4, 3)
    cats = [rng.integers(0, k, N) for k in levels]
    X = np.column_stack([amounts, *(np.eye(k)[c] for k, c in zip(levels, cats, strict=True))])
    logit = -1.6 + 80 * (amounts[:, 0] - 0.01) + 0.8 * (cats[0] == 2) - 0.6 * (cats[1] == 0)
    y = (rng.random(N) < 1 / (1 + np.exp(-logit))).astype(float)
    d_cat = sum(levels)
    box = InputMap(  # the schema's box map: √12 (x − ½) for amounts, one-hots as 0/1
        np.r_[np.full(6, 0.5), np.zeros(d_cat)], np.r_[np.full(6, math.sqrt(12)), np.ones(d_cat)]
    )
    return X, y, box


def _fit(config, epsilon):
    X, y, box = _skewed()
    parts = np.array_split(np.arange(N), 4)
    runtime = InProcessRuntime(
        clients=make_clients(X, y, parts), handler=DPSGDClient(), seed=0, secret_key=key_for(11)
    )
    ledger = None
    if epsilon != math.inf:
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    strategy = DPSGDStrategy(config, n_records=N, input_map=box)
    runtime.run(strategy, ledger=ledger)
    p = strategy.model().predict_proba(X)
    return y.mean(), p.mean(), np.mean((p - y) ** 2)


@pytest.mark.parametrize(("epsilon", "clip"), [(math.inf, 3.0), (8.0, 3.0), (8.0, 1.0)])
def test_logistic_mean_prediction_is_the_base_rate(epsilon, clip):
    base, mean, brier = _fit(LogisticConfig(clip_norm=clip, rounds=ROUNDS), epsilon)
    assert abs(mean - base) <= 0.03, (mean, base)
    assert brier <= base * (1 - base), (brier, base * (1 - base))


def test_without_centring_the_toy_shows_the_miscalibration():
    # The same fit with one joint clip and the box map alone: the test above can fail.
    plain = LogisticConfig(centre_share=0.0, recalibrate_share=0.0, rounds=ROUNDS)
    base, mean, brier = _fit(plain, math.inf)
    assert abs(mean - base) > 0.1, (mean, base)
    assert brier > base * (1 - base)
