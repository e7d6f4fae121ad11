"""The dp_ebm peer row: interpret's DP-EBM adapter, its config and its skip without interpret."""

import logging
import math
import warnings

import numpy as np
import pytest
from fedpriv.experiments import benchmark
from fedpriv.experiments.bench import dp_ebm
from fedpriv.experiments.bench.config import from_dict
from sklearn.metrics import roc_auc_score

needs_interpret = pytest.mark.skipif(
    not dp_ebm.available(), reason="interpret (the `ebm` extra) is not installed"
)

STUDY = {"name": "t", "datasets": ["synthetic"], "epsilons": [1.0], "delta": 1e-5, "seeds": 2,
         "tune_seeds": 1}  # fmt: skip
LEARNERS = ["logistic", "dp_ebm"]
RAW = {
    "study": {**STUDY, "tuning": "validation", "learners": LEARNERS, "grid_points": 2},
    "grids": {
        "logistic": {"rounds": [100], "learning_rate": [1.0, 2.0]},
        "dp_ebm": {"learning_rate": [0.01, 0.1]},
    },
}


def test_schema_bounds_come_from_the_schema_and_hold_every_encoded_row():
    from fedpriv.data import load_synthetic

    ds = load_synthetic(n=600)
    bounds = dp_ebm.schema_bounds(ds.schema)
    assert bounds.shape == (ds.schema.n_features, 2)
    assert (bounds[:, 0] == 0.0).all() and (bounds[:, 1] == 1.0).all()
    assert (ds.X >= bounds[:, 0]).all() and (ds.X <= bounds[:, 1]).all()


@needs_interpret
def test_adapter_fits_pooled_at_the_budget_with_schema_bounds():
    from fedpriv.data import load_synthetic

    ds = load_synthetic(n=3000)
    clf = dp_ebm.DPEBMLearner(learning_rate=0.1, epsilon=8.0, delta=1e-5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(ds, "train")
    # Bounds and types declared: interpret has nothing to read from the rows, and says so.
    assert not [w for w in caught if "privacy" in str(w.message).lower()]
    np.testing.assert_array_equal(clf.model_.privacy_bounds, dp_ebm.schema_bounds(ds.schema))
    assert clf.epsilon_spent_ == 8.0 and clf.model_.delta == 1e-5
    assert math.isnan(clf.communication_.floats_uploaded.mean())
    X, y = ds.xy("test")
    proba = clf.predict_proba(X)
    assert proba.shape == (len(y), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    assert roc_auc_score(y, proba[:, 1]) > 0.8  # non-private EBMs reach ~0.93 on this task


def test_adapter_refuses_the_non_private_reference():
    with pytest.raises(ValueError, match="finite epsilon"):
        dp_ebm.DPEBMLearner(learning_rate=0.1, epsilon=math.inf, delta=1e-5)


def test_grid_points_are_the_same_for_every_tuned_learner():
    cfg = from_dict(RAW)
    assert cfg.grid_points == 2 and len(cfg.grid("dp_ebm").configs()) == 2
    bad = {**RAW, "grids": {**RAW["grids"], "dp_ebm": {"learning_rate": [0.01, 0.1, 0.2]}}}
    with pytest.raises(ValueError, match=r"grids\.dp_ebm must have grid_points=2 points; got 3"):
        from_dict(bad)


def test_benchmark_skips_dp_ebm_without_interpret_and_says_why(monkeypatch, caplog):
    monkeypatch.setattr(dp_ebm, "available", lambda: False)
    monkeypatch.setattr(logging.getLogger("fedpriv"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        cfg = benchmark.runnable(from_dict(RAW))
    assert cfg.learners == ("logistic",)
    assert "dp_ebm skipped: interpret is not installed" in caplog.text
    monkeypatch.setattr(dp_ebm, "available", lambda: True)
    assert benchmark.runnable(from_dict(RAW)).learners == ("logistic", "dp_ebm")
