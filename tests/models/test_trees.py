"""Random trees: structure in the public box, routing, leaf sums, Newton values."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models import _kernels
from fedpriv.models.trees import (
    RandomTree,
    TreeEnsemble,
    newton_leaf_values,
    route,
    sample_tree,
    sigmoid,
)


def _route_reference(tree, x):
    node = 0
    for _ in range(tree.depth):
        node = 2 * node + (2 if x[tree.feature[node]] > tree.threshold[node] else 1)
    return node - tree.feature.size


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(1, 8), d=st.integers(1, 12), seed=st.integers(0, 2**31))
def test_routing_matches_a_scalar_reference(depth, d, seed):
    rng = np.random.default_rng(seed)
    tree = sample_tree(depth=depth, n_features=d, rng=rng)
    X = rng.random((50, d))
    leaves = route(tree, X)
    assert leaves.min() >= 0 and leaves.max() < tree.n_leaves
    assert leaves.tolist() == [_route_reference(tree, x) for x in X]


def test_tree_structure_is_data_independent_and_in_the_public_box():
    a = sample_tree(depth=5, n_features=7, rng=np.random.default_rng(3))
    b = sample_tree(depth=5, n_features=7, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.feature, b.feature)
    assert a.feature.size == 31 and a.n_leaves == 32 and a.depth == 5
    assert a.feature.min() >= 0 and a.feature.max() < 7
    assert (a.threshold >= 0).all() and (a.threshold < 1).all()


def test_random_thresholds_are_uniform_on_the_box():
    t = sample_tree(depth=12, n_features=3, rng=np.random.default_rng(0)).threshold
    from scipy import stats

    assert stats.kstest(t, "uniform").pvalue > 1e-3


def _leaf_sums(margins, y, leaf, n_leaves):
    # The client's compiled step, one client whose sample is every row.
    out = np.zeros((1, 2 * n_leaves))
    rows = np.arange(y.size)
    ok = _kernels.logistic_leaf_sums(
        margins,
        y,
        leaf.astype(np.uint64),
        rows,
        np.array([0, y.size]),
        np.zeros(1, np.int64),
        np.array([y.size]),
        out,
    )
    assert ok
    return out[0]


def test_grad_hess_bounds_and_values():
    margin = np.array([-50.0, -1.0, 0.0, 2.0, 50.0])
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    stats = _leaf_sums(margin, y, np.arange(5), 8)  # one row per leaf: the sums are g and h
    g, h = stats[:5], stats[8:13]
    p = 1 / (1 + np.exp(-margin))
    np.testing.assert_allclose(g, p - y)
    np.testing.assert_allclose(h, p * (1 - p))
    assert (np.abs(g) <= 1).all() and (h >= 0).all() and (h <= 0.25).all()
    assert sigmoid(np.array([-800.0, 800.0])).tolist() == [0.0, 1.0]


def test_leaf_statistics_and_newton_values():
    leaf = np.array([0, 0, 3, 1])
    margin = np.array([0.0, np.log(3.0), -np.log(4.0), 0.0])  # p = 1/2, 3/4, 1/5, 1/2
    y = np.array([0.0, 1.0, 0.0, 1.0])
    stats = _leaf_sums(margin, y, leaf, 4)
    # g = (.5, -.25, .2, -.5), h = (.25, .1875, .16, .25)
    expected = [0.25, -0.5, 0.0, 0.2, 0.4375, 0.25, 0.0, 0.16]
    np.testing.assert_allclose(stats, expected, atol=1e-15)
    v = newton_leaf_values(stats[:4], stats[4:], learning_rate=0.4, reg_lambda=1.0)
    np.testing.assert_allclose(v, -0.4 * stats[:4] / (stats[4:] + 1.0))
    # A noisy negative hessian sum is floored at 0, not allowed to flip the step.
    assert (
        newton_leaf_values(np.array([1.0]), np.array([-5.0]), learning_rate=1, reg_lambda=1)[0]
        == -1.0
    )


def test_ensemble_sums_base_and_trees():
    rng = np.random.default_rng(1)
    trees = [sample_tree(depth=3, n_features=4, rng=rng) for _ in range(3)]
    values = [rng.normal(size=8) for _ in range(3)]
    model = TreeEnsemble(base=0.3, trees=(), leaf_values=())
    for t, v in zip(trees, values, strict=True):
        model = model.append(t, v)
    X = rng.random((20, 4))
    expected = 0.3 + sum(v[route(t, X)] for t, v in zip(trees, values, strict=True))
    np.testing.assert_allclose(model.decision_function(X), expected)
    np.testing.assert_allclose(
        model.decision_function(X, start=1), expected - 0.3 - values[0][route(trees[0], X)]
    )
    with pytest.raises(ValueError, match="2 trees but 1"):
        TreeEnsemble(base=0.0, trees=tuple(trees[:2]), leaf_values=(values[0],))
    assert isinstance(model.trees[0], RandomTree)


def test_an_ensemble_of_only_a_base_round_trips_binary_and_multiclass():
    # After the intercept round no tree is released yet: (0, 0) tree arrays.
    X = np.random.default_rng(0).random((5, 3))
    for base in (-1.2, np.array([0.5, -0.25, 0.0])):
        back = TreeEnsemble.from_arrays(
            TreeEnsemble(base=base, trees=(), leaf_values=()).to_arrays()
        )
        assert back.trees == () and np.array_equal(back.base, base)
        z = back.decision_function(X)
        np.testing.assert_array_equal(z, np.broadcast_to(base, z.shape))
