"""The compiled kernels against plain numpy references (fedpriv/models/_kernels.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models import _kernels
from fedpriv.models.trees import (
    RandomTree,
    TreeEnsemble,
    route,
    sample_tree,
)


def leaf_sums_numpy(margins, y, leaf, n_leaves):
    """Independent reference: [Σg | Σh] with g = σ(m) − y, h = σ(m)(1 − σ(m)) (paper §3.4)."""
    p = 1.0 / (1.0 + np.exp(-margins))
    g, h = p - y, np.clip(p * (1.0 - p), 0.0, 0.25)
    return np.concatenate(
        [
            np.bincount(leaf, weights=g, minlength=n_leaves),
            np.bincount(leaf, weights=h, minlength=n_leaves),
        ]
    )


def _route_numpy(tree, X):
    # Independent reference: one feature gather per record per level.
    node = np.zeros(X.shape[0], dtype=np.int64)
    for _ in range(tree.depth):
        node = 2 * node + 1 + (X[np.arange(X.shape[0]), tree.feature[node]] > tree.threshold[node])
    return node - tree.feature.size


@settings(max_examples=20, deadline=None)
@given(
    depth=st.integers(1, 10),
    d=st.integers(1, 30),
    n=st.integers(0, 300),
    seed=st.integers(0, 2**31),
)
def test_router_matches_the_numpy_reference(depth, d, n, seed):
    rng = np.random.default_rng(seed)
    tree = sample_tree(depth=depth, n_features=d, rng=rng)
    # Values on the thresholds themselves exercise the "x > thr goes right" tie rule.
    X = rng.random((n, d))
    if n:
        X[0, tree.feature[0]] = tree.threshold[0]
    np.testing.assert_array_equal(route(tree, X), _route_numpy(tree, X))


def test_settle_and_route_is_add_then_route():
    rng = np.random.default_rng(0)
    X = rng.random((500, 6))
    old, new = (sample_tree(depth=4, n_features=6, rng=rng) for _ in range(2))
    values = rng.normal(size=16)
    margins = rng.normal(size=500)
    expected = margins + values[route(old, X)]
    leaf = route(old, X).view(np.uint64).copy()
    _kernels.settle_and_route(np.ascontiguousarray(X.T), leaf, values, *new.kernel_args, margins)
    np.testing.assert_array_equal(margins, expected)
    np.testing.assert_array_equal(leaf.view(np.int64), route(new, X))


def test_leaf_sums_match_the_numpy_formulas_per_client():
    rng = np.random.default_rng(1)
    n, L = 400, 8
    margins = rng.normal(scale=3, size=n)
    y = (rng.random(n) < 0.3).astype(float)
    leaf = rng.integers(0, L, n).astype(np.uint64)
    sizes = np.array([150, 250])
    offsets = np.array([0, 150])
    samples = [
        np.sort(rng.choice(150, 40, replace=False)),
        np.sort(rng.choice(250, 60, replace=False)),
    ]
    rows = np.concatenate(samples)
    starts = np.array([0, 40, 100])
    out = np.zeros((2, 2 * L))
    assert _kernels.logistic_leaf_sums(margins, y, leaf, rows, starts, offsets, sizes, out)
    for o, s in enumerate(samples):
        idx = s + offsets[o]
        expected = leaf_sums_numpy(margins[idx], y[idx], leaf[idx].astype(np.int64), L)
        np.testing.assert_allclose(out[o], expected, rtol=1e-12, atol=1e-12)


def test_leaf_sums_refuse_out_of_range_rows_and_touch_nothing():
    out = np.zeros((1, 4))
    ok = _kernels.logistic_leaf_sums(
        np.zeros(3),
        np.zeros(3),
        np.zeros(3, dtype=np.uint64),
        np.array([0, 3]),
        np.array([0, 2]),
        np.array([0]),
        np.array([3]),
        out,
    )
    assert not ok and not out.any()


def test_trees_refuse_shapes_and_features_the_router_cannot_take():
    with pytest.raises(ValueError, match="2\\^D − 1"):
        RandomTree(np.zeros(4, dtype=np.int64), np.zeros(4))
    with pytest.raises(ValueError, match="2\\^D − 1"):
        RandomTree(np.zeros(3, dtype=np.int64), np.zeros(2))
    tree = RandomTree(np.array([0, 5, 1]), np.full(3, 0.5))
    with pytest.raises(ValueError, match=r"features 0\.\.4"):
        route(tree, np.zeros((2, 5)))
    model = TreeEnsemble(base=0.0, trees=(tree,), leaf_values=(np.zeros(3),))
    with pytest.raises(ValueError, match=r"features 0\.\.4"):
        model.decision_function(np.zeros((2, 5)))
    ok = TreeEnsemble(base=0.0, trees=(tree,), leaf_values=(np.zeros(3),))
    with pytest.raises(ValueError, match="4 leaf values"):
        ok.decision_function(np.zeros((2, 6)))


def test_ensemble_round_trips_through_arrays():
    rng = np.random.default_rng(2)
    trees = tuple(sample_tree(depth=3, n_features=4, rng=rng) for _ in range(3))
    model = TreeEnsemble(base=-0.7, trees=trees, leaf_values=tuple(rng.normal(size=(3, 8))))
    back = TreeEnsemble.from_arrays(model.to_arrays())
    X = rng.random((50, 4))
    np.testing.assert_array_equal(back.decision_function(X), model.decision_function(X))
    assert back.base == model.base and len(back.trees) == 3
