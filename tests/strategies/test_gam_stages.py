"""DP-EBM beyond binary main effects: the softmax GAM (C > 2) and the pair stage."""

import hashlib
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.server.estimators import DPGAMClassifier
from fedpriv.strategies.gam import DPGAMStrategy, GAMConfig

from fedpriv.artefact import load_model
from fedpriv.models.gam import GAMModel
from fedpriv.models.gam_pairs import coarse_map, pair_gain
from fedpriv.models.gam_softmax import intercept_sensitivity, sum_zero, term_sensitivity
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for
from tests.strategies.test_gam import DELTA, _run, private_rng


def _three_classes(n=900, seed=0):
    """Class 2 iff x2 > ½ and x3 > ½ (an interaction); else 0 or 1 by x0."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 4))
    y = np.where((X[:, 2] > 0.5) & (X[:, 3] > 0.5), 2, (X[:, 0] > 0.5).astype(int))
    flip = rng.random(n) < 0.1
    y[flip] = rng.integers(0, 3, flip.sum())
    return X, y


def _clients(X, y):
    from fedpriv.federation.protocol import ClientData

    half = len(y) // 2
    return [ClientData(0, X[:half], y[:half]), ClientData(1, X[half:], y[half:])]


def _start(config, clients, *, ledger=None, n_classes=3):
    strategy = DPGAMStrategy(config, n_records=sum(c.n for c in clients), n_classes=n_classes)
    strategy.begin(
        n_features=clients[0].X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(0),
        secret_rng=private_rng(0),
    )
    return strategy


def test_binary_fits_are_pinned_bit_for_bit():
    # The digest of a binary fit's released model from before the softmax and pair
    # stages were added: binary runs draw and release exactly as they did (smoothing
    # off: it only post-processes the same releases).
    rng = np.random.default_rng(0)
    X = rng.random((600, 4))
    y = (rng.random(600) < 0.2 + 0.6 * X[:, 0]).astype(int)
    # Declared 5 × 120 = the 600 rows: the public n and codec bound the pinned fit used.
    est = DPGAMClassifier(
        rounds=9, bins=6, smooth=0.0, epsilon=1.0, secret_key=key_for(3), max_records=120
    ).fit(X, y)
    h = hashlib.sha256()
    for k, v in sorted(est.model_.to_arrays().items()):
        h.update(k.encode() + np.ascontiguousarray(v).tobytes())
    assert h.hexdigest()[:16] == PINNED


#: Computed on the code before the softmax and pair stages (same data, same key), then
#: once more when round 0's blocks became normalised replies (each divided by its
#: sensitivity, released on that grid: fedpriv.models.gam_sensitivity).
PINNED = "68269869d7481b9c"


def test_softmax_rounds_release_one_gaussian_each_at_the_softmax_sensitivity():
    X, y = _three_classes()
    clients = _clients(X, y.astype(float))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=DELTA))
    strategy = _start(GAMConfig(rounds=6, bins=4), clients, ledger=ledger)
    assert strategy.term_sensitivity == term_sensitivity(3)
    _run(strategy, clients)
    z = strategy.noise_multiplier_
    assert [e.event for e in ledger.entries] == [dp_event.GaussianDpEvent(z)] * 7
    assert not ledger.report().reserved
    model = strategy.model()
    assert model.n_classes == 3 and model.base.shape == (3,)
    assert all(s.shape == (model.terms.n_bins(k), 3) for k, s in enumerate(model.shapes))
    assert max(np.abs(s).max() for s in model.shapes) <= 2.0 * 2  # ≤ max_update per visit


def test_non_private_softmax_intercept_and_step_are_exact_newton_steps():
    X, y = _three_classes()
    clients = _clients(X, y.astype(float))
    cfg = GAMConfig(rounds=2, bins=4, quantile_bins=False, reg_lambda=2.0)
    model = _run(_start(cfg, clients), clients).model()
    n = y.size
    G = n / 3 - np.bincount(y, minlength=3)
    base = -(2 / 3) * sum_zero(G) / (n * 2 / 9 + 2.0)  # steps scaled by (C − 1)/C
    np.testing.assert_allclose(model.base, base, rtol=1e-12)
    p = np.exp(base) / np.exp(base).sum()
    bins = np.minimum((X[:, 0] * 4).astype(int), 3)
    g = np.zeros((4, 3))
    h = np.zeros((4, 3))
    np.add.at(g, bins, p - np.eye(3)[y])
    np.add.at(h, bins, np.broadcast_to(p * (1 - p), (n, 3)))
    step = np.clip(-(2 / 3) * sum_zero(g) / (h + 2.0), -2.0, 2.0)
    np.testing.assert_allclose(model.shapes[0], step, rtol=1e-9, atol=1e-12)


def test_softmax_estimator_predicts_c_columns_and_its_model_file_round_trips(tmp_path):
    X, y = _three_classes()
    labels = np.array(["c", "a", "b"])[y]  # classes_ sorted: a, b, c
    est = DPGAMClassifier(
        rounds=13, bins=4, epsilon=4.0, classes=["c", "a", "b"], secret_key=key_for(5)
    ).fit(X[:600], labels[:600])
    assert est.classes_.tolist() == ["a", "b", "c"]
    P = est.predict_proba(X[600:])
    assert P.shape == (300, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    # The model itself, as the forests' models: class_scores has every class, and
    # predict_proba the column of class 1 (what a binary-only consumer reads).
    np.testing.assert_array_equal(est.model_.class_scores(X[600:]), P)
    np.testing.assert_array_equal(est.model_.predict_proba(X[600:]), P[:, 1])
    assert np.mean(est.predict(X[600:]) == labels[600:]) > 0.6  # majority class ≈ 0.4
    loaded = DPGAMClassifier.load(est.save(tmp_path / "m.npz"))
    np.testing.assert_array_equal(loaded.predict_proba(X[600:]), P)
    assert isinstance(load_model(tmp_path / "m.npz").model, GAMModel)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_pair_stage_selects_from_one_release_and_fits_cells(n_classes):
    X, y = _three_classes(seed=1)
    if n_classes == 2:
        y = (y == 2).astype(int)
    clients = _clients(X, y.astype(float))
    cfg = GAMConfig(
        rounds=14, bins=4, interactions=2, interaction_rounds=5, interaction_candidates=4
    )
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=8.0, delta=DELTA))
    strategy = _run(_start(cfg, clients, ledger=ledger, n_classes=n_classes), clients)
    z = strategy.noise_multiplier_
    assert [e.event for e in ledger.entries] == [dp_event.GaussianDpEvent(z)] * 15
    labels = [e.label for e in ledger.entries][-5:]
    model = strategy.model()
    (a, b), (c, d) = [(p.a, p.b) for p in model.pairs]
    assert labels == [
        "round 9: 6 candidate pairs' cell (Σg, Σh)",
        f"round 10: pair ({a}, {b}) cell (Σg, Σh)",
        f"round 11: pair ({c}, {d}) cell (Σg, Σh)",
        f"round 12: pair ({a}, {b}) cell (Σg, Σh)",
        f"round 13: pair ({c}, {d}) cell (Σg, Σh)",
    ]
    assert (a, b) == (2, 3)  # the planted interaction has the largest released gain
    pair = model.pairs[0]
    assert pair.n_cells == 4 * 4 and np.abs(pair.values).max() <= 3 * cfg.max_update
    again = GAMModel.from_arrays(model.to_arrays())
    np.testing.assert_array_equal(again.decision_function(X), model.decision_function(X))
    # The pair term is used: without it the scores differ.
    plain = GAMModel(base=model.base, terms=model.terms, shapes=model.shapes)
    assert np.abs(plain.decision_function(X) - model.decision_function(X)).max() > 0.1


def test_pair_stage_without_its_selection_keeps_visiting_columns():
    X, y = _three_classes(seed=2)
    clients = _clients(X, (y == 2).astype(float))
    cfg = GAMConfig(rounds=8, bins=4, interactions=1, interaction_rounds=3)
    strategy = _run(_start(cfg, clients, n_classes=2), clients, abort={5})
    assert strategy.model().pairs == ()
    assert np.any(strategy.model().shapes[(7 - 1) % 4] != 0)  # round 7 was a column round


def test_pair_config_ranges_and_coarse_bins():
    with pytest.raises(ValueError, match=r"interaction_rounds must lie in \[2, rounds − 2 = 8\]"):
        GAMConfig(rounds=10, interactions=1, interaction_rounds=9)
    with pytest.raises(ValueError, match=r"interactions must lie in \[0, 3\]"):
        GAMConfig(interactions=4, interaction_candidates=3)
    GAMConfig(rounds=2, interaction_rounds=50)  # unused without interactions
    # 17 fine bins with a missing bin → 7 groups of consecutive bins + the missing one.
    m = coarse_map(17, 8, order=None, missing=True)
    assert m.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 6, 7]
    # One-hot levels grouped by a released order.
    np.testing.assert_array_equal(coarse_map(4, 2, order=np.array([3, 0, 2, 1]), missing=False),
                                  [0, 1, 1, 0])  # fmt: skip
    # The noise's expected share is taken off the gain.
    g, h = np.zeros(4), np.full(4, 9.0)
    assert pair_gain(g, h, 1.0, sigma=2.0) == pytest.approx(-0.5 * 4 * 4 / 10)
    assert intercept_sensitivity(3) < term_sensitivity(3) < math.sqrt(3)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_one_record_moves_the_selection_reply_by_at_most_its_sensitivity(n_classes):
    from fedpriv.clients.gam import GAMClient

    X, y = _three_classes(n=200, seed=3)
    if n_classes == 2:
        y = (y == 2).astype(int)
    clients = _clients(X, y.astype(float))
    cfg = GAMConfig(rounds=8, bins=4, interactions=1, interaction_rounds=2)
    strategy = _start(cfg, clients, n_classes=n_classes)
    handler = GAMClient()
    while (q := strategy.next_query()).config["phase"] != "select":
        replies = [handler.answer(q, c, np.arange(c.n), {}) for c in clients]
        strategy.update(q, np.sum(replies, axis=0))
    n_pairs = len(strategy._cands)
    assert n_pairs == 6  # all pairs of the 4 columns
    # The client divides the candidates' sums by √P: a column round's sensitivity.
    bound = strategy.term_sensitivity
    rng = np.random.default_rng(0)
    c = clients[0]
    full = handler.answer(q, c, np.arange(c.n), {})
    worst = 0.0
    for i in rng.choice(c.n, 20, replace=False):
        keep = np.delete(np.arange(c.n), i)
        drop = type(c)(c.client_id, c.X[keep], c.y[keep])
        worst = max(worst, float(np.linalg.norm(full - handler.answer(q, drop, keep, {}))))
    assert 0.3 * bound < worst <= bound
