"""The forests' calibrations (analytic Gaussian, sparse threshold, largest_certified) at
extreme accepted budgets: each fit stays within the PLD point budget or is refused."""

import numpy as np
import pytest
from fedpriv.server.estimators import DPRandomForestClassifier, LumberjackClassifier

from fedpriv.privacy import pld_size
from tests.keys import key_for

RNG = np.random.default_rng(0)
X = RNG.random((120, 3))
Y = (X[:, 0] > 0.5).astype(int)


FOREST = {"trees": 2, "depth": 2, "secret_key": key_for(2)}
LUMBERJACK = {"trees": 2, "depth": 4, "secret_key": key_for(2)}

CASES = {
    # old: MemoryError (150 GiB) in the ledger's PLD of z = 7e-4; now certified by RDP
    "forest-epsilon=1e6": (DPRandomForestClassifier, {**FOREST, "epsilon": 1e6}),
    # old: the analytic Gaussian's bracket ended at z = 1e4 < 4e4 (a brentq sign error)
    "forest-epsilon=1e-6": (DPRandomForestClassifier, {**FOREST, "epsilon": 1e-6}),
    # old: δ(z) underflowed and z = 1e4 came back; now z ≈ 39
    "forest-delta=1e-300": (DPRandomForestClassifier, {**FOREST, "epsilon": 1.0, "delta": 1e-300}),
    # old: MemoryError (1.4 GiB of a 1.9e8-point Gaussian PLD) after 17 s
    "lumberjack-epsilon=1e6": (LumberjackClassifier, {**LUMBERJACK, "epsilon": 1e6}),
    "lumberjack-epsilon=1e-6": (LumberjackClassifier, {**LUMBERJACK, "epsilon": 1e-6}),
    # certified through the zCDP leaves' RDP (a PLD certifies no δ below 1e-15)
    "lumberjack-delta=1e-300": (
        LumberjackClassifier,
        {**LUMBERJACK, "epsilon": 1.0, "delta": 1e-300},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_forest_fits_at_extreme_budgets_stay_within_the_point_budget(case, largest_pld):
    cls, params = CASES[case]
    est = cls(**params).fit(X, Y)
    assert largest_pld[0] <= pld_size.MAX_PLD_POINTS
    assert est.epsilon_spent_ <= params["epsilon"]
    if case == "forest-delta=1e-300":
        assert 30.0 < est.noise_multiplier_ < 45.0
