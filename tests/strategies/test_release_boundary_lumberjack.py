"""Lumberjack's release boundary: clients, reply lengths, reports, model and pickle.

D = heart's training rows over three clients; D + 1 appends one canary
record to client 0. With the same injected key and the sparse threshold's
Heavy/⊥ outcomes of the D + 1 run forced to the D run's (the mechanism
still draws its noise, so the streams stay aligned), everything that leaves
the curator must be identical, and the Gaussian leaf scores may differ only
by the canary's own count (1 in one class of one leaf per tree): the
released value itself. The old design grew nodes by exact counts; its broken
twin below (exact growth restored) fails the same comparison.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from fedpriv.clients.lumberjack import LumberjackClient
from fedpriv.server.forest_estimators import LumberjackClassifier, _fit_forest
from fedpriv.strategies.lumberjack import LumberjackConfig, LumberjackStrategy

from fedpriv.data import load_heart
from fedpriv.federation.protocol import make_clients
from fedpriv.models.lumberjack import FeatureSpace
from tests.keys import key_for
from tests.strategies.release_boundary import differences, flatten, run, with_canary

EPS, DELTA = 4.0, 1e-6
CFG = LumberjackConfig(trees=4, depth=16)  # stages 7, 7, 2


class Forced(LumberjackStrategy):
    """Records every CheckThreshold outcome, or replays recorded ones (same noise drawn)."""

    def __init__(self, config, *, space, bits=None):
        super().__init__(config, space=space)
        self.bits, self.log = bits, []

    def _check(self):
        real = super()._check()

        def check(counts):
            out = np.asarray(real(counts), dtype=bool)  # the draws happen either way
            i, bits = len(self.log), self.bits or []
            if i < len(bits) and bits[i].shape == out.shape:
                out = bits[i]
            self.log.append(out.copy())
            return out

        return check


class ExactGrowth(Forced):
    """Broken twin: the old behaviour, every node holding more than the gate's rows grows."""

    def _heavy(self, stage, block, check):
        super()._heavy(stage, block, check)  # the mechanism still runs; its bits are ignored
        widths = [stage.n_roots << level for level in range(len(stage.key))]
        return [c > self.gate_ for c in np.split(block, np.cumsum(widths)[:-1])]


class KeepsLeafCounts(Forced):
    """Broken twin: the old model, which kept the exact leaf counts."""

    def _release_leaves(self, counts):
        super()._release_leaves(counts)
        object.__setattr__(self._model, "leaf_counts", counts.copy())


@pytest.fixture(scope="module")
def data():
    heart = load_heart()
    X, y = heart.xy("train")
    parts = np.array_split(np.arange(y.size), 3)
    space = FeatureSpace.from_schema(heart.schema, "columns")
    canary = np.ones(X.shape[1])  # the top of every public range: an outlier
    return X, y, parts, space, canary


def _pair(data, cls):
    X, y, parts, space, canary = data
    clients = make_clients(X, y, parts)
    d = run(cls(CFG, space=space), LumberjackClient(), clients, epsilon=EPS, delta=DELTA)
    bits = d["strategy"].log
    d1 = run(
        cls(CFG, space=space, bits=bits),
        LumberjackClient(),
        with_canary(clients, canary, 1.0),
        epsilon=EPS,
        delta=DELTA,
    )
    return d, d1


def _canary_only(scores_d, scores_d1, tree_sizes):
    """The leaf scores differ by exactly one count (1.0) in one entry per tree."""
    diff = scores_d1 - scores_d
    for part in np.split(diff, np.cumsum(tree_sizes)[:-1]):
        assert np.count_nonzero(part) == 1 and part.sum() == 1.0


def test_everything_sent_to_clients_is_a_function_of_the_released_bits(data):
    d, d1 = _pair(data, Forced)
    # Meaningful: several stages grew, and the canary changed exact counts.
    grown = [q["arrays"]["grow"].sum() for _, q in d["received"] if "grow" in q["arrays"]]
    assert len(grown) >= 2 * 3 and min(grown) > 0
    for _, q in d["received"]:
        assert set(q["arrays"]) <= {
            "roots", "feature", "threshold", "grow", "grow_sizes",  # stage rounds
            "tree_sizes", "left", "right",  # the leaf round: the released structure
        }  # fmt: skip
    assert differences(d["received"], d1["received"]) == []  # queries and reply lengths
    assert differences(d["communication"], d1["communication"]) == []
    assert differences(d["ledger"], d1["ledger"]) == []
    assert differences(d["model"], d1["model"], allowed=("leaf_scores",)) == []
    _canary_only(d["model"]["leaf_scores"], d1["model"]["leaf_scores"], d["model"]["tree_sizes"])


def test_the_old_exact_growth_fails_the_same_comparison(data):
    d, d1 = _pair(data, ExactGrowth)
    leaks = differences(d["received"], d1["received"])
    assert any("reply_length" in p for p in leaks) and any("grow" in p for p in leaks)


def _saved(est, path):
    """The model file's contents: its arrays (``model.`` dropped) and its JSON, less the
    manifest's checksum of the leaf scores (which differ by the canary, by design)."""
    est.save(path)
    z = dict(np.load(path))
    meta = json.loads(str(z.pop("__meta__")))
    z.pop("__checksum__")
    meta["arrays"]["model.leaf_scores"].pop("sha256")
    return {**{k.removeprefix("model."): v for k, v in z.items()}, "meta": meta}


def _estimator_pair(data, cls, tmp_path):
    X, y, parts, space, canary = data
    bits, fitted = None, []
    for rows, labels in ((X, y), (np.vstack([X, canary]), np.append(y, 1.0))):
        partition = list(parts)
        if rows.shape[0] > X.shape[0]:
            partition[0] = np.append(parts[0], X.shape[0])  # the canary, client 0's last row
        est = LumberjackClassifier(
            trees=CFG.trees, depth=CFG.depth, epsilon=EPS, seed=3, secret_key=key_for(5)
        )
        strategy = cls(CFG, space=space, bits=bits)
        _fit_forest(est, rows, labels, partition, "train", strategy, LumberjackClient())
        bits = strategy.log
        saved = _saved(est, tmp_path / f"model{len(fitted)}.fedpriv.npz")
        fitted.append((pickle.loads(pickle.dumps(est)), saved))
    return fitted


def test_pickle_and_saved_model_hold_released_values_only(data, tmp_path):
    (est, npz), (est1, npz1) = _estimator_pair(data, Forced, tmp_path)
    assert differences(est, est1, allowed=("leaf_scores",)) == []
    assert differences(npz, npz1, allowed=("leaf_scores",)) == []
    _canary_only(npz["leaf_scores"], npz1["leaf_scores"], npz["tree_sizes"])
    names = {p.rsplit(".", 1)[-1] for p in flatten(est)}
    assert not any(n.endswith("counts") for n in names)  # the old PrunedTree.leaf_counts


def test_a_model_keeping_exact_leaf_counts_fails_the_pickle_comparison(data, tmp_path):
    (est, _), (est1, _) = _estimator_pair(data, KeepsLeafCounts, tmp_path)
    assert any("leaf_counts" in p for p in differences(est, est1, allowed=("leaf_scores",)))
