"""Lumberjack's stages: complete subtrees, the compiled walk, assembly, the staged m."""

import numpy as np
import pytest

from fedpriv.models import _forest_kernels
from fedpriv.models.heavy_hitters import assemble, mark_heavy_hitters
from fedpriv.models.lumberjack import (
    FeatureSpace,
    RowRouter,
    children,
    expand,
    grow_tree,
    lumberjack_rounds,
    root_layer,
    stage_heights,
)
from fedpriv.privacy import queries_per_record, staged_queries_per_record

SPACE = FeatureSpace(np.array([True, True, False, False, False]))


def _data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.random((n, SPACE.n_features))
    X[:, 2:] = rng.random((n, 3)) < 0.4
    return X, (rng.random(n) < 0.5).astype(np.int64)


def _walk(stage, X, entry):
    """Reference walk (numpy): counts per node and each row's last candidate."""
    h, counts = len(stage.key), [np.zeros(stage.n_roots << lv) for lv in range(len(stage.key))]
    node, live = entry.copy(), entry >= 0
    cand = np.full(entry.size, -1)
    for level in range(h):
        np.add.at(counts[level], node[live], 1)
        side = (
            X[np.arange(X.shape[0]), stage.feature[level][np.maximum(node, 0)]]
            > (stage.threshold[level][np.maximum(node, 0)])
        )
        nxt = 2 * node + side
        if level + 1 < h:
            node = np.where(live, nxt, -1)
        else:
            cand = np.where(live, nxt, -1)
    return np.concatenate(counts), cand


def test_stage_heights_rounds_and_the_staged_query_bound():
    assert stage_heights(49) == [7] * 7 and stage_heights(16) == [7, 7, 2]
    assert lumberjack_rounds(49) == 8 and lumberjack_rounds(1, 1) == 2
    assert staged_queries_per_record(30, stage_heights(49)) == 30 * 7 * 3  # 630
    # One stage is Lemma 3 on the whole tree; stages of one level, the top-down check.
    assert staged_queries_per_record(30, [100]) == queries_per_record(30, 100) == 210
    assert staged_queries_per_record(30, stage_heights(100, 1)) == 3000
    with pytest.raises(ValueError, match="heights must hold at least one stage"):
        staged_queries_per_record(3, [])


def test_a_stage_holds_every_node_and_the_splits_of_exact_growth():
    # The complete subtree: 2^l nodes at level l, children in (parent, side) order;
    # every node that exact growth (grow_tree, every non-empty node) reaches has the
    # same key and split in the stage: splits depend on the path key only.
    X, y = _data(300, 1)
    stage = expand(root_layer(7, SPACE, np.zeros(1)), 6, SPACE, 11)
    assert [k.size for k in stage.key] == [1, 2, 4, 8, 16, 32] and stage.size == 63
    layers = grow_tree(depth=5, space=SPACE, key=7, salt=11, counter=RowRouter(X, y, 2))
    for level, layer in enumerate(layers[:5]):  # the layers whose splits were proposed
        pos = np.searchsorted(stage.key[level], layer.key, sorter=np.argsort(stage.key[level]))
        pos = np.argsort(stage.key[level])[pos]
        np.testing.assert_array_equal(stage.key[level][pos], layer.key)
        np.testing.assert_array_equal(stage.feature[level][pos], layer.feature)
        np.testing.assert_array_equal(stage.threshold[level][pos], layer.threshold)
    kids = children(stage.bottom, np.array([0, 5]), SPACE)
    assert kids.size == 4 and stage.bottom.size == 32


def test_the_compiled_walk_counts_every_live_row_once_per_level_and_stops_the_others():
    X, _ = _data(400, 2)
    first = expand(root_layer(3, SPACE, np.zeros(1)), 4, SPACE, 5)
    feat = lambda st: np.concatenate(st.feature)  # noqa: E731
    thr = lambda st: np.concatenate(st.threshold)  # noqa: E731
    cand = np.zeros((1, X.shape[0]), dtype=np.int64)
    out = np.zeros(first.size)
    args = (np.ones(1, np.int64), 4, feat(first), thr(first), np.zeros(1, np.int64), out)
    assert _forest_kernels.route_stage(X, cand, np.full(1, -1), np.zeros(1, np.int64), True, *args)
    want, want_cand = _walk(first, X, np.zeros(X.shape[0], dtype=np.int64))
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(cand[0], want_cand)
    # Second stage: grow bottom nodes 1 and 6 only; rows under the others stop.
    grow = np.zeros(8, dtype=bool)
    grow[[1, 6]] = True
    second = expand(children(first.bottom, np.flatnonzero(grow), SPACE), 3, SPACE, 5)
    rank = np.where(grow, np.cumsum(grow) - 1, -1)
    out2 = np.zeros(second.size)
    ok = _forest_kernels.route_stage(
        X, cand, rank, np.zeros(1, np.int64), False, np.array([4]), 3,
        feat(second), thr(second), np.zeros(1, np.int64), out2,
    )  # fmt: skip
    assert ok
    entry = np.where(grow[want_cand // 2], 2 * rank[want_cand // 2] + want_cand % 2, -1)
    want2, want_cand2 = _walk(second, X, entry)
    np.testing.assert_array_equal(out2, want2)
    np.testing.assert_array_equal(cand[0], want_cand2)
    assert out2.sum() == 3 * np.sum(entry >= 0) < 3 * X.shape[0]


def test_assembled_tree_has_heavy_splits_and_light_leaves():
    # One stage, CheckThreshold = count > 60: the pruned tree is a full binary tree
    # whose splits are the Heavy nodes and whose leaves in the stage are Light (at
    # most 60 rows; the children of Heavy bottom nodes are leaves at any count).
    X, _ = _data(2000, 4)
    stage = expand(root_layer(9, SPACE, np.zeros(1)), 8, SPACE, 13)
    counts, _ = _walk(stage, X, np.zeros(X.shape[0], dtype=np.int64))
    widths = [1 << lv for lv in range(8)]
    levels = np.split(counts, np.cumsum(widths)[:-1])
    parents = [np.zeros(1, np.int64)] + [np.arange(w) // 2 for w in widths[1:]]
    heavy, _ = mark_heavy_hitters(levels, parents, lambda c: c > 60)
    key, feature, threshold = [], [], []
    for lv in range(8):
        kept = np.ones(1, bool) if lv == 0 else heavy[lv - 1][np.arange(widths[lv]) // 2]
        split = heavy[lv][kept]
        key.append(stage.key[lv][kept])
        feature.append(np.where(split, stage.feature[lv][kept], -1))
        threshold.append(np.where(split, stage.threshold[lv][kept], 0.0))
    below = children(stage.bottom, np.flatnonzero(heavy[-1]), SPACE)  # depth-8 leaves
    key.append(below.key)
    feature.append(np.full(below.size, -1))
    threshold.append(np.zeros(below.size))
    tree = assemble(key, feature, threshold)
    n_heavy = sum(int(h.sum()) for h in heavy)
    assert (~tree.is_leaf).sum() == n_heavy > 5 and tree.is_leaf.sum() == n_heavy + 1
    leaf = tree.apply(X)
    assert tree.is_leaf[leaf].all()
    in_stage = leaf < tree.left.size - below.size  # not the depth-8 leaves under the stage
    assert np.bincount(leaf[in_stage]).max() <= 60 < np.bincount(leaf).max()
    node = np.zeros((1, X.shape[0]), dtype=np.int64)
    arrays = (tree.feature, tree.threshold, tree.left, tree.right)
    assert _forest_kernels.apply_forest(X, *arrays, np.array([0, tree.left.size]), node)
    np.testing.assert_array_equal(node[0], leaf)
    with pytest.raises(ValueError, match="depth 0: 1 splits but 0 children"):
        assemble(key[:1], feature[:1], threshold[:1])
