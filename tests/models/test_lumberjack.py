"""Lumberjack's tree core: Lemma 3, Lemma 4 and mark consistency, data-independent splits."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.models.heavy_hitters import (
    exponential_labels,
    mark_heavy_hitters,
)
from fedpriv.models.lumberjack import (
    FeatureSpace,
    RowRouter,
    grow_tree,
    next_layer,
    propose_splits,
    root_layer,
    uniform_from,
)
from fedpriv.privacy import chi_square_selection_test
from tests.keys import private_rng

SPACE = FeatureSpace(np.array([True, True, False, False, False]))


def _data(n, seed, space=SPACE):
    rng = np.random.default_rng(seed)
    X = rng.random((n, space.n_features))
    X[:, ~space.numeric] = rng.random((n, int((~space.numeric).sum()))) < 0.4
    y = (rng.random(n) < 0.5).astype(np.int64)
    return X, y


def _grow(X, y, depth, key=7, salt=11):
    router = RowRouter(X, y, 2)
    return grow_tree(depth=depth, space=SPACE, key=key, salt=salt, counter=router), router


def _paths(layers, X, y):
    """Each row's node index at every layer (by re-routing from the root)."""
    router = RowRouter(X, y, 2)
    out = [router.node.copy()]
    for layer in layers[:-1]:
        _, index = next_layer(layer, router.child_counts(layer), SPACE)
        router.advance(index)
        out.append(router.node.copy())
    return out


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 120),
    h=st.integers(1, 24),
    seed=st.integers(0, 2**31),
    mode=st.sampled_from(["random", "threshold"]),
)
def test_lemma_3_each_record_meets_at_most_1_plus_log2_h_queries(n, h, seed, mode):
    X, y = _data(n, seed)
    layers, _ = _grow(X, y, h)
    layers = layers[:h]
    rng = np.random.default_rng(seed)
    if mode == "random":
        check = lambda c: rng.random(c.size) < 0.5  # noqa: E731 - any answers at all
    else:
        tau = rng.integers(1, n + 1)
        check = lambda c: c + rng.normal(0, 2, c.size) > tau  # noqa: E731
    _, queried = mark_heavy_hitters(
        [ly.counts.sum(axis=1) for ly in layers], [ly.parent for ly in layers], check
    )
    paths = _paths(layers, X, y)
    per_row = sum(queried[t][paths[t]].astype(int) for t in range(len(layers)))
    assert per_row.max() <= 1 + int(np.floor(np.log2(len(layers))))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 150), h=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_lemma_4_marks_are_a_rooted_subtree_and_exact_under_an_exact_check(n, h, seed):
    X, y = _data(n, seed)
    layers, _ = _grow(X, y, h)
    layers = layers[:h]
    counts = [ly.counts.sum(axis=1) for ly in layers]
    parents = [ly.parent for ly in layers]
    tau = np.random.default_rng(seed).integers(0, n + 2)
    answers = []

    def exact(c):
        answers.append(c)
        return c > tau

    heavy, queried = mark_heavy_hitters(counts, parents, exact)
    for t in range(1, len(layers)):
        # Heavy is closed under ancestors: a rooted subtree (or empty).
        assert np.all(heavy[t - 1][parents[t][heavy[t]]])
    for t in range(len(layers)):
        # With an error-free CheckThreshold the marks are exactly the heavy hitters.
        np.testing.assert_array_equal(heavy[t], counts[t] > tau)
    assert sum(q.sum() for q in queried) == sum(a.size for a in answers)


def test_splits_depend_only_on_the_node_and_the_seed():
    # A neighbouring dataset (one row fewer) proposes the same split at every shared node.
    X, y = _data(300, 1)
    a, _ = _grow(X, y, 12)
    b, _ = _grow(X[1:], y[1:], 12)
    shared = 0
    for la, lb in zip(a, b, strict=False):
        if la.feature is None or lb.feature is None:
            continue
        common, ia, ib = np.intersect1d(la.key, lb.key, return_indices=True)
        shared += common.size
        np.testing.assert_array_equal(la.feature[ia], lb.feature[ib])
        np.testing.assert_array_equal(la.threshold[ia], lb.threshold[ib])
    assert shared > 100
    # Another seed, other splits.
    c, _ = _grow(X, y, 3, salt=12)
    assert c[0].feature[0] != a[0].feature[0] or c[0].threshold[0] != a[0].threshold[0]


def test_thresholds_stay_in_the_public_range_and_binary_features_are_used_once():
    X, y = _data(400, 2)
    layers, _ = _grow(X, y, 30)
    for la in layers:
        if la.feature is None:
            continue
        num = SPACE.numeric[la.feature]
        col = np.cumsum(SPACE.numeric)[la.feature] - 1
        rows = np.flatnonzero(num)
        assert np.all(la.lo[rows, col[rows]] <= la.threshold[rows])
        assert np.all(la.threshold[rows] <= la.hi[rows, col[rows]])
        bcol = np.cumsum(~SPACE.numeric)[la.feature] - 1
        brows = np.flatnonzero(~num)
        assert not la.used[brows, bcol[brows]].any()  # never an ancestor's category
    # The trees grow until every node is empty or the depth is reached: no stopping rule.
    assert len(layers) == 31


def test_root_features_are_uniform_over_the_available_ones():
    keys = np.arange(20_000, dtype=np.uint64)
    layer = root_layer(0, SPACE, np.array([1, 1]))
    layer.key = keys
    layer.parent = np.zeros(keys.size, dtype=np.int64)
    layer.lo = np.zeros((keys.size, 2))
    layer.hi = np.ones((keys.size, 2))
    layer.used = np.zeros((keys.size, 3), dtype=bool)
    layer.used[:, 0] = True  # feature 2 is used: four left
    layer.n_used = np.ones(keys.size, dtype=np.int64)
    propose_splits(layer, SPACE, 5)
    assert not np.any(layer.feature == 2)
    picked = np.searchsorted([0, 1, 3, 4], layer.feature)  # the four available features
    assert chi_square_selection_test(picked, np.full(4, 0.25)) > 1e-3
    u = uniform_from(keys, 9)
    assert stats.kstest(u, "uniform").pvalue > 1e-3


class _Parties:
    """Several parties' routers; counts are summed (what the shim reveals)."""

    def __init__(self, routers, pooled):
        self.routers, self.pooled = routers, pooled

    def root_counts(self):
        return sum(r.root_counts() for r in self.routers)

    def child_counts(self, layer):
        total = sum(r.child_counts(layer) for r in self.routers)
        np.testing.assert_array_equal(total, self.pooled.child_counts(layer))
        return total

    def advance(self, index):
        for r in (*self.routers, self.pooled):
            r.advance(index)


def test_clients_counts_sum_to_the_pooled_counts():
    # The federated growth: each party routes its own rows; the sum of their
    # candidate counts is the pooled count, layer after layer.
    X, y = _data(500, 3)
    parts = [np.arange(0, 170), np.arange(170, 300), np.arange(300, 500)]
    parties = _Parties([RowRouter(X[p], y[p], 2) for p in parts], RowRouter(X, y, 2))
    layers = grow_tree(depth=15, space=SPACE, key=1, salt=2, counter=parties)
    assert len(layers) == 16 and layers[-1].counts.sum() == 500
    pooled, _ = _grow(X, y, 15, key=1, salt=2)
    for a, b in zip(layers, pooled, strict=True):
        np.testing.assert_array_equal(a.key, b.key)


def test_exponential_labels_follow_exp_eta_counts():
    counts = np.array([[3, 1, 0]] * 30_000)
    eta = 0.7
    labels = exponential_labels(counts, eta, private_rng(0))
    w = np.exp(eta * counts[0])
    assert chi_square_selection_test(labels, w / w.sum()) > 1e-3


def test_column_first_choice_is_uniform_over_columns_then_unused_levels():
    # Columns: two numeric features, and one categorical column of three levels.
    space = FeatureSpace(np.array([True, True, False, False, False]), np.array([0, 1, 2, 2, 2]))
    n = 30_000
    layer = root_layer(0, space, np.array([1, 1]))
    layer.key = np.arange(n, dtype=np.uint64)
    layer.parent = np.zeros(n, dtype=np.int64)
    layer.lo, layer.hi = np.zeros((n, 2)), np.ones((n, 2))
    layer.used = np.zeros((n, 3), dtype=bool)
    layer.used[:, 1] = True  # level 3 taken by an ancestor
    layer.n_used = np.ones(n, dtype=np.int64)
    propose_splits(layer, space, 5)
    assert not np.any(layer.feature == 3)
    column = np.array([0, 1, 2, 2, 2])[layer.feature]
    assert chi_square_selection_test(column, np.full(3, 1 / 3)) > 1e-3
    level = layer.feature[column == 2]
    assert chi_square_selection_test((level == 4).astype(int), np.array([0.5, 0.5])) > 1e-3
    layer.used[:] = True  # no level left: only the numeric columns remain
    propose_splits(layer, space, 5)
    assert set(np.unique(layer.feature)) == {0, 1}


def test_a_forest_of_single_leaves_says_so_in_the_run_status():
    """Every tree one leaf (nothing passed the sparse threshold): a note that degrades
    the run; one split anywhere: no note (the twin)."""
    from fedpriv.strategies.lumberjack import LumberjackStrategy

    from fedpriv.federation.status import RunOutcome, RunStatus, with_notes
    from fedpriv.models.heavy_hitters import PrunedTree

    leaf = PrunedTree(*(np.array([v]) for v in (-1, 0.0, -1, -1, 0)))
    split = PrunedTree(
        np.array([0, -1, -1]), np.array([0.5, 0, 0]), np.array([1, -1, -1]),
        np.array([2, -1, -1]), np.array([0, 1, 2]),
    )  # fmt: skip
    strategy = LumberjackStrategy.__new__(LumberjackStrategy)
    strategy._trees = [leaf, leaf]
    notes = strategy.status_notes()
    assert len(notes) == 1 and "every tree is one leaf" in notes[0]
    done = RunOutcome(status=RunStatus.COMPLETED, rounds_planned=8, rounds_run=8,
                      rounds_released=8, rounds_aborted=0, client_errors=0,
                      max_aborted_share=0.5, reason="all 8 of 8 rounds released")  # fmt: skip
    assert with_notes(done, notes).status is RunStatus.DEGRADED
    strategy._trees = [leaf, split]
    assert strategy.status_notes() == []
