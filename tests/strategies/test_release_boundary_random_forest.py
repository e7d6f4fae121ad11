"""Disjoint random forest: one record moves one pre-noise count, in distribution.

Regression test of 5a50443's fix. Each row's tree is drawn i.i.d. uniformly
by its client from the client's secret key, independently of the rows:

* removing the *last* row leaves every other row's tree as it was (row i's
  tree is the i-th draw), so the exact count vector moves by exactly 1 in L1
  for a fixed key;
* removing *row 0* is, in distribution, the same as moving it last and then
  removing it (the assignment's law does not depend on the rows' order), so
  there is a coupling of the secret draws under which the counts again move
  by exactly 1 — which is what the Gaussian's sensitivity 1 needs.

The broken twin is the old assignment, a public hash of (client id, row
position, public salt): no secret draw to couple over, and removing row 0
moves every later row's tree.

Laplace leaves (RF-L) get the release-boundary test of
``test_release_boundary_learners.py``: with the one Laplace release replayed,
nothing else that leaves the curator depends on the canary.
"""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.clients.random_forest import RandomForestClient, tree_of_rows
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy

from fedpriv.data import load_heart
from fedpriv.federation.protocol import ClientData, make_clients
from fedpriv.models.lumberjack import FeatureSpace, splitmix64
from fedpriv.models.trees import RandomTree, route
from fedpriv.privacy import chi_square_selection_test
from tests.keys import key_for, private_rng
from tests.strategies.release_boundary import differences, run, with_canary

K, DEPTH = 5, 4


def old_tree_of_rows(client_id: int, n: int, n_trees: int, salt: int) -> np.ndarray:
    """The assignment before 5a50443 (broken twin): a public hash of the row's position."""
    pos = (np.uint64(client_id) << np.uint64(40)) | np.arange(n, dtype=np.uint64)
    return (splitmix64(pos ^ np.uint64(salt)) % np.uint64(n_trees)).astype(np.int64)


@pytest.fixture(scope="module")
def setup():
    ds = load_heart()
    X, y = ds.xy("train")
    rows = ds.client_partition(5, "train")[0]  # heart's first hospital: 160 rows
    space = FeatureSpace.from_schema(ds.schema, "columns")
    cfg = RandomForestConfig(trees=K, depth=DEPTH, mode="disjoint")
    strategy = RandomForestStrategy(cfg, space=space)
    strategy.begin(
        n_features=X.shape[1], ledger=None, rng=np.random.default_rng(3), secret_rng=private_rng()
    )
    return X[rows], y[rows], strategy.next_query()


def _counts(query, X, y, owner=None, key=None):
    """The client's exact (pre-noise) count vector: its handler with its own key, or the
    same counts under a given assignment ``owner`` (a row's tree)."""
    if owner is None:
        data = ClientData(client_id=0, X=X, y=y)
        return RandomForestClient().answer(query, data, np.arange(y.size), {}, key)
    out = []
    for t in range(K):
        tree = RandomTree(query.arrays["feature"][t], query.arrays["threshold"][t])
        leaf = route(tree, X).astype(np.int64)
        mine = owner == t
        out.append(np.bincount(leaf[mine] * 2 + y[mine].astype(np.int64), minlength=2 << DEPTH))
    return np.concatenate(out).astype(np.float64)


def test_removing_a_row_moves_one_pre_noise_count_in_distribution(setup):
    X, y, query = setup
    n = y.size
    for i in range(5):
        key = key_for(i)
        full = _counts(query, X, y, key=key)
        # The last row: for a fixed key nobody else moves.
        assert np.abs(full - _counts(query, X[:-1], y[:-1], key=key)).sum() == 1
        # Row 0, coupled: the remaining rows keep their own draws A[1:] ...
        draws = tree_of_rows(key, n, K)
        np.testing.assert_array_equal(tree_of_rows(key, n - 1, K), draws[:-1])  # a prefix
        coupled = _counts(query, X[1:], y[1:], owner=draws[1:])
        assert np.abs(full - coupled).sum() == 1
        np.testing.assert_array_equal(full, _counts(query, X, y, owner=draws))
    # ... which has the law of the draws D[1:] gets, A[:n − 1]: i.i.d. uniform over the
    # trees whatever the position (chi-square over 400 keys at the first and last rows).
    first, last = np.array([tree_of_rows(key_for(s), n, K)[[0, -1]] for s in range(400)]).T
    for pos in (first, last):
        assert chi_square_selection_test(pos, np.full(K, 1 / K)) > 1e-3


def test_the_old_position_hash_moves_many_counts(setup):
    X, y, query = setup
    n, salt = y.size, 12345  # the salt was public (from the public seed)
    full = _counts(query, X, y, owner=old_tree_of_rows(0, n, K, salt))
    fewer = _counts(query, X[1:], y[1:], owner=old_tree_of_rows(0, n - 1, K, salt))
    moved = np.abs(full - fewer).sum()
    assert moved >= 40  # 81 here; 1,133 on Adult's first client at 10 trees × depth 8
    # And no coupling saves it: the assignment is public and not a prefix of itself shifted.
    assert np.mean(old_tree_of_rows(0, n, K, salt)[1:] != old_tree_of_rows(0, n - 1, K, salt)) > 0.5
    # The last row, for comparison: the old hash too moves exactly 1 there.
    last = _counts(query, X[:-1], y[:-1], owner=old_tree_of_rows(0, n - 1, K, salt))
    assert np.abs(full - last).sum() == 1


@pytest.mark.parametrize("mode", ["all", "disjoint"])
def test_laplace_leaves_depend_on_the_canary_only_through_their_release(mode):
    ds = load_heart()
    X, y = ds.xy("train")
    clients = make_clients(X, y, np.array_split(np.arange(y.size), 3))
    canary = with_canary(clients, X[200], y[200])
    space = FeatureSpace.from_schema(ds.schema, "columns")
    cfg = RandomForestConfig(trees=3, depth=3, mode=mode, leaf_mechanism="laplace")

    def fit(data, replay=None):
        strategy = RandomForestStrategy(cfg, space=space, n_records=y.size + 1)
        return run(strategy, RandomForestClient(), data, epsilon=2.0, delta=1e-5, replay=replay)

    d = fit(clients)
    d1 = fit(canary, replay=d["released"])
    assert len(d["released"]) == 1 and len(d["received"]) == 3  # one round, three clients
    for part in ("received", "communication", "ledger", "model"):
        assert differences(d[part], d1[part]) == [], part
    # Meaningful: unreplayed, the canary moves the release (same key, same noise).
    moved = fit(canary)["released"][0] - d["released"][0]
    assert np.abs(moved).sum() == pytest.approx(3.0 if mode == "all" else 1.0)
