"""DP-EBM's group round of binary columns, server and client: the pass's units, the
ledger's events, exact non-private steps, the gain of the group as a unit, refusals."""

import numpy as np
import pytest
from dp_accounting import dp_event
from fedpriv.clients.gam import GAMClient
from fedpriv.strategies.gam import GROUP, DPGAMStrategy, GAMConfig

from fedpriv.federation.protocol import ClientData
from fedpriv.models.gam import Terms, bin_sums, newton_bin_updates
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import private_rng

DELTA = 1e-5
#: Term 0 numeric (4 equal bins of feature 0); terms 1..m binary (features 1..m, cut at ½).
N_BINARY = 6


def _terms(m=N_BINARY):
    return Terms(
        np.arange(m + 1),
        np.zeros(m + 1),
        np.full(m + 1, -1),
        [True] + [False] * m,
        ([0.25, 0.5, 0.75], *([0.5],) * m),
    )


def _clients(n=600, m=N_BINARY, seed=0):
    """Only the numeric column 0 carries signal; the binary columns are coin flips."""
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.random((n, 1)), (rng.random((n, m)) < 0.3).astype(float)])
    y = (rng.random(n) < 0.1 + 0.6 * X[:, 0]).astype(float)
    half = n // 2
    return [ClientData(client_id=0, X=X[:half], y=y[:half]), ClientData(1, X[half:], y[half:])]


def _run(config, clients, *, ledger=None, n_classes=2, seed=0):
    strategy = DPGAMStrategy(
        config, terms=_terms(), n_records=sum(c.n for c in clients), n_classes=n_classes
    )
    strategy.begin(
        n_features=clients[0].X.shape[1],
        ledger=ledger,
        rng=np.random.default_rng(seed),
        secret_rng=private_rng(seed),
    )
    handler, states, queries = GAMClient(), [{} for _ in clients], []
    while (q := strategy.next_query()) is not None:
        queries.append(q)
        replies = [
            handler.answer(q, c, np.arange(c.n), s) for c, s in zip(clients, states, strict=True)
        ]
        strategy.update(q, np.sum(replies, axis=0))
    return strategy, queries


def test_a_pass_is_the_other_columns_then_one_group_round_on_the_plans_events():
    clients = _clients()
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=DELTA))
    cfg = GAMConfig(rounds=5, bins=4, quantile_bins=False, binary_group=3)
    strategy, queries = _run(cfg, clients, ledger=ledger)
    assert [strategy._visits[t] for t in range(1, 5)] == [0, GROUP, 0, GROUP]
    group = [q for q in queries if q.config["phase"] == "group"]
    assert len(group) == 2 and all(q.reply_length == 2 * N_BINARY for q in group)
    assert group[0].config["sparsity"] == 3
    np.testing.assert_array_equal(group[0].arrays["group"], np.arange(1, N_BINARY + 1))
    z = strategy.noise_multiplier_
    assert [e.event for e in ledger.entries] == [dp_event.GaussianDpEvent(z)] * 5
    assert ledger.report().epsilon <= 1.0
    assert ledger.entries[2].label == "round 2: binary group (Σwg, Σwh)"
    for k in range(1, N_BINARY + 1):  # the reference (negative) bin never moves
        assert strategy.model().shapes[k][0] == 0.0


def test_non_private_group_steps_are_exact_newton_steps_on_the_positive_bins():
    clients = _clients()
    cfg = GAMConfig(rounds=3, bins=4, quantile_bins=False, binary_group=N_BINARY,
                    reg_lambda=2.0, learning_rate=0.8)  # fmt: skip
    strategy, _ = _run(cfg, clients)
    model = strategy.model()
    X = np.vstack([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    bins0 = np.minimum((X[:, 0] * 4).astype(int), 3)
    f = model.base + model.shapes[0][bins0]  # the margin the group round saw
    p0 = 1.0 / (1.0 + np.exp(-np.full(len(y), model.base)))  # term 0's round saw the base
    total_h = float((p0 * (1.0 - p0)).sum())
    sums = [bin_sums(f, y, (X[:, k] > 0.5).astype(np.int64), 2) for k in range(1, N_BINARY + 1)]
    # Every term steps at once: each Newton step over the h-weighted mean number of group
    # columns a record is positive in (no record is capped: weights 1).
    damping = max(1.0, sum(s[3] for s in sums) / total_h)
    assert damping > 1.5  # the test data's records sit in several binary columns
    for k, s in enumerate(sums, start=1):
        step = newton_bin_updates(s[1:2], s[3:4], learning_rate=0.8, reg_lambda=2.0,
                                  max_update=2.0)  # fmt: skip
        np.testing.assert_allclose(model.shapes[k], [0.0, step[0] / damping], rtol=1e-9)


def test_binary_group_off_or_multiclass_visits_every_column_in_turn():
    clients = _clients()
    off, _ = _run(GAMConfig(rounds=8, binary_group=0, quantile_bins=False), clients)
    assert [off._visits[t] for t in range(1, 8)] == list(range(7))
    three = [ClientData(c.client_id, c.X, (c.y + (c.X[:, 1] > 0.5)).clip(0, 2)) for c in clients]
    multi, queries = _run(GAMConfig(rounds=8, quantile_bins=False), three, n_classes=3)
    assert [multi._visits[t] for t in range(1, 8)] == list(range(7))
    assert {q.config["phase"] for q in queries} == {"intercept", "term"}


def test_gain_order_does_not_chase_the_noise_of_many_null_binary_columns():
    # Six coin-flip binary columns and one informative numeric column, 5 keys: the group
    # takes 3 of the 55 gain rounds (measured). Summing per-term gains clipped at 0
    # makes the group look best from noise alone: 27 of 55.
    picks = 0
    for seed in range(5):
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=0.5, delta=DELTA))
        cfg = GAMConfig(rounds=14, bins=4, quantile_bins=False, column_order="gain",
                        learning_rate=0.5, binary_group=6)  # fmt: skip
        strategy, _ = _run(cfg, _clients(n=1000, seed=seed), ledger=ledger, seed=seed)
        picks += [strategy._visits[t] for t in range(3, 14)].count(GROUP)
    assert picks <= 8


def test_the_client_refuses_a_group_of_non_binary_terms():
    clients = _clients()
    strategy = DPGAMStrategy(GAMConfig(rounds=3, quantile_bins=False), terms=_terms())
    strategy.begin(n_features=N_BINARY + 1, ledger=None, rng=np.random.default_rng(0),
                   secret_rng=private_rng(0))  # fmt: skip
    q = strategy.next_query()
    strategy.update(q, np.sum([GAMClient().answer(q, c, np.arange(c.n), {}) for c in clients], 0))
    strategy.next_query()  # round 1: term 0
    strategy._t = 2
    q = strategy.next_query()
    assert q.config["phase"] == "group"
    bad = q.__class__(**{**q.__dict__, "arrays": {**q.arrays, "group": np.array([0, 1])}})
    with pytest.raises(ValueError, match="binary terms only"):
        GAMClient().answer(bad, clients[0], np.arange(clients[0].n), {})


@pytest.mark.parametrize("damped", [True, False])
def test_group_rounds_do_not_oscillate_where_many_binary_columns_agree(damped, monkeypatch):
    # BRFSS at ε = 8, gain order, η = 0.5: with each group term's full Newton step, this
    # key's group rounds overshoot and oscillate (Brier 0.81 against the base rate's
    # 0.13); damped by the records' mean count of positive group columns, it converges.
    from fedpriv.server.estimators import DPGAMClassifier
    from fedpriv.strategies import gam as gam_strategy
    from sklearn.metrics import brier_score_loss

    from fedpriv.data import load_dataset
    from tests.keys import key_for

    if not damped:  # the twin: every group term takes its full step
        monkeypatch.setattr(gam_strategy, "group_damping", lambda h, total: 1.0)
    data = load_dataset("brfss")
    clf = DPGAMClassifier(epsilon=8.0, rounds=40, learning_rate=0.5, lam=10.0, bins=16,
                          quantile_bins=True, column_order="gain", seed=1,
                          secret_key=key_for(1)).fit(data)  # fmt: skip
    X, y = data.xy("test")
    brier = brier_score_loss(y, clf.predict_proba(X)[:, 1])
    base = brier_score_loss(y, np.full(len(y), data.xy("train")[1].mean()))
    assert (brier < base) == damped, (brier, base)
