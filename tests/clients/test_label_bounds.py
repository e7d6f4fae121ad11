"""Bad labels cannot exceed the sensitivity, and every entry point refuses them.

The handlers are fed labels directly (bypassing every upstream check): y ∈
{−1, 1} (a common convention), y ∈ {0, 5}, fractions, NaN and ±inf. Each
record's contribution to the reply must stay within the bound the server's
sensitivity assumes: boosting |g| ≤ GRAD_BOUND and 0 ≤ h ≤ HESS_BOUND in one
leaf, DP-SGD ‖∇‖ ≤ C, forests one count per tree in the record's own slot.
Before the kernels clipped, boosting's single-row reply reached |g| = 2 and 5
(true Δ₂ 2.0 and 5.0 against the assumed 1.03), the forests raised with the
label range in the message, and DP-SGD sent NaN.
"""

import math

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.clients.random_forest import RandomForestClient
from fedpriv.server.estimators import DPBoostingClassifier, DPLogisticClassifier
from fedpriv.strategies.boosting import GRAD_BOUND, HESS_BOUND, L2_SENSITIVITY
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig
from fedpriv.strategies.random_forest import RandomForestConfig, RandomForestStrategy
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.data import node
from fedpriv.data.node import DataSource
from fedpriv.errors import DataError
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.settings import RunSettings
from fedpriv.models.lumberjack import FeatureSpace
from fedpriv.models.networks import InputMap
from tests.keys import key_for, private_rng

BAD_LABELS = [-1.0, 1.0, 0.0, 5.0, 0.5, -7.25, math.nan, math.inf, -math.inf, 1e300]
D = 3


def _boosting_query(base: float, leaf_values=None, depth: int = 2) -> Query:
    """Round 1 of a depth-``depth`` boosting run: one released tree, the next to fill."""
    rng = np.random.default_rng(7)
    m, L = (1 << depth) - 1, 1 << depth
    values = np.zeros(L) if leaf_values is None else np.asarray(leaf_values, dtype=float)
    return Query(
        round=1,
        method="boosting",
        sampling_rate=1.0,
        reply_length=2 * L,
        record_bound=max(GRAD_BOUND, HESS_BOUND),
        arrays={
            "feature": rng.integers(0, D, size=(2, m)),
            "threshold": rng.random((2, m)),
            "leaf_values": values[None, :],
            "base": np.array([base]),
        },
        config={"phase": "tree", "n_classes": 2, "depth": depth},
    )


def _one_row(label: float, seed: int = 0) -> ClientData:
    return ClientData(
        client_id=0, X=np.random.default_rng(seed).random((1, D)), y=np.array([label])
    )


@pytest.mark.parametrize("labels", [(-1.0, 1.0), (0.0, 5.0), tuple(BAD_LABELS)])
def test_a_single_record_boosting_reply_stays_within_the_assumed_bounds(labels):
    # Margins from far negative to far positive: p runs over (0, 1), so g = p − y
    # reaches its extremes (2 for y = −1, 5 for y = 0 .. 5) before clipping.
    margins = np.concatenate([np.linspace(-40.0, 40.0, 161), [0.0, -1e3, 1e3]])
    worst = 0.0
    for base in margins:
        q = _boosting_query(float(base))
        L = q.reply_length // 2
        for label in labels:
            data = _one_row(label)
            for reply in (
                BoostingClient().answer(q, data, np.array([0]), {}),
                BoostingClient().answer_many(q, [data], [np.array([0])], {})[0],
            ):
                g, h = reply[:L], reply[L:]
                assert np.isfinite(reply).all()
                assert np.count_nonzero(g) <= 1 and np.count_nonzero(h) <= 1  # one leaf
                assert np.abs(g).max() <= GRAD_BOUND
                assert h.min() >= 0.0 and h.max() <= HESS_BOUND
                worst = max(worst, float(np.linalg.norm(reply)))
    assert worst <= L2_SENSITIVITY
    assert worst > 0.99 * L2_SENSITIVITY  # the clip binds: y = −1 at p = ½ gives (1, ¼)


adversarial_label = st.one_of(
    st.sampled_from(BAD_LABELS),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)


@settings(max_examples=80, deadline=None)
@given(
    labels=st.lists(adversarial_label, min_size=2, max_size=10),
    base=st.floats(-30.0, 30.0),
    leaf_values=st.lists(st.floats(-20.0, 20.0), min_size=4, max_size=4),
    which=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_removing_any_one_record_moves_the_boosting_reply_by_at_most_the_sensitivity(
    labels, base, leaf_values, which, seed
):
    # The empirical true sensitivity over adversarial labels: a client's reply
    # with and without one of its records, every row sampled.
    n, k = len(labels), which % len(labels)
    X = np.random.default_rng(seed).random((n, D))
    y = np.array(labels)
    q = _boosting_query(base, leaf_values)
    full = BoostingClient().answer(q, ClientData(client_id=0, X=X, y=y), np.arange(n), {})
    less = ClientData(client_id=0, X=np.delete(X, k, axis=0), y=np.delete(y, k))
    rest = BoostingClient().answer(q, less, np.arange(n - 1), {})
    # Float sums over n vs n − 1 terms: the tolerance is rounding, ~n ulps.
    assert np.linalg.norm(full - rest) <= L2_SENSITIVITY + 1e-12 * n


def _dpsgd_query(model: str, backend: str = "fast") -> Query:
    cfg = (MLPConfig if model == "mlp" else LogisticConfig)(
        **({"hidden": 4} if model == "mlp" else {}),
        rounds=2,
        backend=backend,
        centre_share=0.0,  # the step's one joint clip (the bias's own: test_softmax)
        recalibrate_share=0.0,
    )
    imap = InputMap(np.full(D, 0.5), np.full(D, np.sqrt(12)))
    strategy = DPSGDStrategy(cfg, n_records=10, input_map=imap)
    strategy.begin(
        n_features=D, ledger=None, rng=np.random.default_rng(3), secret_rng=private_rng(3)
    )
    return strategy.next_query()


@pytest.mark.parametrize(
    ("model", "backend"), [("logistic", "fast"), ("mlp", "fast"), ("logistic", "opacus")]
)
def test_a_single_record_dpsgd_reply_is_clipped_whatever_its_label(model, backend):
    q = _dpsgd_query(model, backend)
    clip = float(q.config["clip_norm"])
    norms = []
    for label in BAD_LABELS:
        reply = DPSGDClient().answer(q, _one_row(label, seed=5), np.array([0]), {})
        assert np.isfinite(reply).all(), label  # a NaN/inf label adds nothing, not NaN
        norms.append(np.linalg.norm(reply))
        assert norms[-1] <= clip * (1 + 1e-12), label
    assert max(norms) > 0.99 * clip  # y = 5 is clipped to exactly C


def _forest_query(mode: str, n_trees: int = 3, depth: int = 2) -> Query:
    cfg = RandomForestConfig(trees=n_trees, depth=depth, mode=mode)
    strategy = RandomForestStrategy(cfg, space=FeatureSpace(np.ones(D, dtype=bool)))
    strategy.begin(
        n_features=D, ledger=None, rng=np.random.default_rng(1), secret_rng=private_rng(1)
    )
    return strategy.next_query()


def _per_record_contributions(answer, X, y):
    """Reply with every row minus reply without row k, for each k."""
    full = answer(X, y)
    return full, [full - answer(np.delete(X, k, axis=0), np.delete(y, k)) for k in range(y.size)]


@pytest.mark.parametrize("mode", ["all", "disjoint"])
def test_forest_counts_never_leave_the_records_own_slot(mode):
    q = _forest_query(mode)
    k, C = 3, int(q.config["n_classes"])
    y = np.array([0.0, 1.0, -1.0, 5.0, 0.5, math.nan, 2.0, 1.0])
    X = np.random.default_rng(2).random((y.size, D))

    def answer(Xs, ys):
        data = ClientData(client_id=4, X=Xs, y=ys)
        return RandomForestClient().answer(q, data, np.arange(ys.size), {}, key_for(4))

    # Appending/removing the last row leaves the others' disjoint trees alone.
    full = answer(X, y)
    for m in range(1, y.size + 1):
        diff = (answer(X[:m], y[:m]) - answer(X[: m - 1], y[: m - 1])).reshape(k, -1, C)
        valid = y[m - 1] in (0.0, 1.0)
        assert set(np.unique(diff)) <= {0.0, 1.0}
        per_tree = diff.sum(axis=(1, 2))
        assert per_tree.max() <= 1  # at most one count per tree
        if not valid:
            assert not diff.any(), y[m - 1]  # not a class: counted nowhere
        else:
            assert diff[..., int(y[m - 1])].sum() == diff.sum() > 0  # in its class slot
    assert full.sum() == (k if mode == "all" else 1) * 3  # the three rows with y ∈ {0, 1}


def test_lumberjack_counts_never_leave_the_records_own_slot():
    # Labels enter Lumberjack only in the leaf round (stage rounds count nodes):
    # a leaf query over two one-split trees, as the strategy sends it.
    C, k = 2, 2
    q = Query(
        round=3,
        method="lumberjack",
        sampling_rate=1.0,
        reply_length=k * 2 * C,
        record_bound=1.0,
        arrays={
            "tree_sizes": np.array([3, 3]),
            "feature": np.array([0, -1, -1, 1, -1, -1]),
            "threshold": np.array([0.5, 0.0, 0.0, 0.5, 0.0, 0.0]),
            "left": np.array([1, -1, -1, 1, -1, -1]),
            "right": np.array([2, -1, -1, 2, -1, -1]),
        },
        config={"kind": "leaves", "n_classes": C, "n_trees": k},
    )
    y = np.array([1.0, -1.0, 5.0, 0.0, 0.5, math.nan, 3.0])
    X = np.random.default_rng(3).random((y.size, D))

    def answer(Xs, ys):
        return LumberjackClient().answer(
            q, ClientData(client_id=0, X=Xs, y=ys), np.arange(ys.size), {}
        )

    full, diffs = _per_record_contributions(answer, X, y)
    for label, diff in zip(y, diffs, strict=True):
        assert set(np.unique(diff)) <= {0.0, 1.0}
        slots = diff.reshape(-1, C)
        if label in (0.0, 1.0):
            assert slots[:, int(label)].sum() == slots.sum() == k  # one per tree
        else:
            assert not slots.any(), label
    assert full.sum() == 2 * k


@pytest.mark.parametrize("bad", [[0, 1, -1, 1], [0, 5, 0, 1], [0, 1, 0.5, 1], [0, np.nan, 1, 0]])
@pytest.mark.parametrize("estimator", [DPBoostingClassifier, DPLogisticClassifier])
def test_estimators_refuse_labels_outside_the_learner_label_set(estimator, bad):
    X = np.random.default_rng(0).random((4, D))
    with pytest.raises(DataError, match=r"outside the label set \[0, 1\]") as err:
        estimator(num_clients=2).fit(X, np.array(bad, dtype=float))
    assert err.value.code == "label_outside_label_set"
    i = next(i for i, v in enumerate(bad) if v not in (0, 1))
    value = "nan" if np.isnan(bad[i]) else repr(int(bad[i]) if bad[i] == int(bad[i]) else bad[i])
    assert f"label {value} (row {i})" in str(err.value)


def test_boosting_estimator_fits_on_its_public_label_set():
    X = np.random.default_rng(0).random((40, D))
    y = (X[:, 0] > 0.5).astype(float)
    clf = DPBoostingClassifier(rounds=2, depth=2, epsilon=math.inf, num_clients=2).fit(X, y)
    assert clf.predict(X).shape == (40,)


def test_the_clientapp_checks_its_rows_labels_against_the_schema(monkeypatch):
    import fedpriv.clients.app as client_app

    from fedpriv.data import load_synthetic

    ds = load_synthetic(n=300)
    X, y = ds.xy("train")

    class Tampered:  # a corpus whose rows carry labels outside the schema's set
        schema = ds.schema

        def xy(self, part):
            return X, np.where(np.arange(y.size) == 11, 5.0, y)

        def client_partition(self, n):
            return ds.client_partition(n)

    monkeypatch.setattr(node, "bundled_run_data", lambda *a: Tampered())
    client_app._source_data.cache_clear()
    source = DataSource.of(RunSettings(dataset="synthetic", num_clients=2, split_seed=0))
    try:
        with pytest.raises(DataError, match=r"label 5 \(row 11\)") as err:
            client_app._source_data(source, "", 0)
        assert err.value.code == "label_outside_label_set"
    finally:
        client_app._source_data.cache_clear()
