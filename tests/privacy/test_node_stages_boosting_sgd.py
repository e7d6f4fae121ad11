"""Boosting and DP-SGD (logistic, MLP): the stages a node enforces fit every query of a fit.

For each method (default configuration, small data, injected keys) a whole fit
runs in process while its queries are recorded; the node's view is then
checked: (a) every query belongs to a declared stage within its settings, each
stage gets exactly its rounds; (b) the multiplier a node derives from the
stage's absolute noise and the handler's own Δ is the strategy's z; (c) one
adversarial record moves a real reply by at most the handler's claimed bound,
and by more than half of it (the claim is not vacuous); (d) a tampered setting
yields a query the node would refuse.
"""

import fedpriv.clients.boosting as boosting_client
import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy
from fedpriv.strategies.dpsgd import DPSGDStrategy, LogisticConfig, MLPConfig

from fedpriv.data import iid
from fedpriv.federation.protocol import Query, make_clients
from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.sgd_sums import CENTRE, STEP
from fedpriv.models.trees import INTERCEPT, TREE
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import private_rng
from tests.privacy.node_stage_checks import (
    TOL,
    Release,
    admitted,
    adversarial_records,
    check_multipliers,
    check_queries,
    picks,
    recorded_fit,
    with_config,
    with_fields,
    worst_change,
)

D, N = 4, 800


def _clients(n_classes: int):
    rng = np.random.default_rng(0)
    X = rng.random((N, D))
    if n_classes == 2:
        y = (rng.random(N) < 1.0 / (1.0 + np.exp(2.0 - 3.0 * X[:, 0]))).astype(float)
    else:
        y = np.where(X[:, 0] < 0.4, 0, np.where(X[:, 1] < 0.5, 1, 2)).astype(float)
    return make_clients(X, y, iid(N, n_clients=4, rng=np.random.default_rng(1)))


def _labels(n_classes: int) -> list[float]:
    return [*range(n_classes), 5.0, -7.25]  # the classes, and labels outside them


def _release(rounds) -> Release:
    return Release(rounds.noise_multiplier, rounds.event, rounds.rounds)


# -- boosting -----------------------------------------------------------------


@pytest.fixture(scope="module", params=[2, 3], ids=["binary", "3-class"])
def boosting(request):
    c = request.param
    strategy = DPBoostingStrategy(BoostingConfig(), n_records=N, n_classes=c)
    strategy, queries, _ = recorded_fit(strategy, BoostingClient(), _clients(c))
    return strategy, queries, _clients(c), c


def test_boosting_queries_fit_the_declared_stages_and_z(boosting):
    strategy, queries, _, _ = boosting
    handler, stages = BoostingClient(), strategy.node_stages()
    cfg = strategy.config
    assert [(s.name, s.rounds) for s in stages] == [(INTERCEPT, 1), (TREE, cfg.rounds - 1)]
    by_stage = check_queries(handler, stages, queries)  # (a)
    assert all(admitted(handler, stages, q) for q in queries)
    assert {q.reply_length for q in by_stage[TREE]} == {stages[1].reply_length}
    one = _release(strategy._noise)  # one plan: both stages share its z and its rounds
    check_multipliers(handler, stages, {INTERCEPT: one, TREE: one})  # (b)
    reference = DPBoostingStrategy(BoostingConfig(), n_records=N)
    reference.begin(
        n_features=D, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    assert reference.node_stages() == []  # the non-private reference declares nothing


def test_boosting_replies_move_within_the_claimed_bound_and_not_within_half(boosting):
    strategy, queries, clients, c = boosting
    handler = BoostingClient()
    records = adversarial_records(D, _labels(c))
    by_stage = check_queries(handler, strategy.node_stages(), queries)
    for name, qs in by_stage.items():
        for q in picks(qs):
            claim = handler.reply_sensitivity(q)
            l1, l2 = worst_change(handler, q, clients[0], records)  # (c)
            assert l1 <= claim.l1 + TOL and l2 <= claim.l2 + TOL, (name, q.round, l1, l2)
            # The twin: half the claimed bound is broken by the same records.
            assert l1 > 0.5 * claim.l1 and l2 > 0.5 * claim.l2, (name, q.round, l1, l2, claim)


def test_boosting_tampered_settings_would_not_match_their_stage(boosting):
    strategy, queries, _, c = boosting
    handler, stages = BoostingClient(), strategy.node_stages()
    tree = next(q for q in queries if q.config.get("phase") == TREE)
    assert admitted(handler, stages, tree)  # the untouched query passes (the test's power)
    tampered = [
        with_fields(tree, sampling_rate=1.0),  # a bigger sample than declared
        with_fields(tree, reply_length=tree.reply_length * 2),
        with_fields(tree, method="mlp"),
        with_config(tree, phase="leaves"),  # no such phase: refused
        with_config(tree, n_classes=None),  # missing: refused
        with_config(tree, n_classes=2.0),  # not an integer: refused
    ]
    if c == 2:  # claims softmax statistics: a larger Δ than the binary stage's
        tampered.append(with_config(tree, n_classes=3))
        ref = handler.reply_sensitivity(stages[1].template())
        assert handler.reply_sensitivity(tampered[-1]).l2 > ref.l2
    for q in tampered:
        assert not admitted(handler, stages, q), q.config


def _softmax_under_binary_claim(stage_q: float) -> Query:
    """A depth-3 tree query that declares two classes but carries three base logits: it
    fits the binary tree stage's reply length, q and Δ, while the softmax kernel would
    move a reply by up to √(2 + 4/27)."""
    return Query(
        round=1,
        method="boosting",
        sampling_rate=stage_q,
        reply_length=2 * 8 * 3,
        record_bound=1.0,
        arrays={
            "feature": np.zeros((1, 7), dtype=np.int64),
            "threshold": np.full((1, 7), 0.5),
            "leaf_values": np.zeros((0, 24)),
            "base": np.array([10.0, -10.0, -10.0]),
        },
        config={"phase": TREE, "n_classes": 2, "depth": 3},
    )


def _old_base(query):
    base = np.asarray(query.arrays["base"], dtype=np.float64)
    return float(base[0]) if base.size == 1 else base.copy()


def test_a_base_of_another_class_count_than_declared_is_refused(monkeypatch):
    strategy = DPBoostingStrategy(BoostingConfig(), n_records=N)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5))
    strategy.begin(
        n_features=D, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    handler, stages, clients = BoostingClient(), strategy.node_stages(), _clients(2)
    attack = _softmax_under_binary_claim(stages[1].sampling_rate)
    assert admitted(handler, stages, attack)  # the settings the node checks look binary
    records = adversarial_records(D, [1.0])
    with pytest.raises(ValueError, match="n_classes"):
        worst_change(handler, attack, clients[0], records)
    # The twin: the kernel picked by the base's size (the old behaviour) breaks the
    # binary Δ₂ the node accounted.
    monkeypatch.setattr(boosting_client, "_base", _old_base)
    _, l2 = worst_change(handler, attack, clients[0], records)
    assert l2 > handler.reply_sensitivity(attack).l2 + 0.3, l2


# -- DP-SGD ---------------------------------------------------------------------

SGD_CASES = {
    # The defaults: centring, 797 steps (joint clip), 2 bias recalibration rounds.
    "logistic": (LogisticConfig(), 2, 1.0),
    # Without recalibration the bias is clipped on its own (B = √2 with 3 classes).
    "logistic-3-class-bias-clip": (LogisticConfig(recalibrate_share=0.0), 3, 1.0),
    # The affine recalibration, tight participation accounting at ρ = 0.5.
    "logistic-linear-tight": (
        LogisticConfig(recalibration="linear", participation_accounting="tight"),
        2,
        0.5,
    ),
    "mlp": (MLPConfig(), 2, 1.0),  # its auto recalibration is linear on small data
    "logistic-opacus": (LogisticConfig(rounds=12, backend="opacus"), 2, 1.0),
}


@pytest.fixture(scope="module", params=list(SGD_CASES))
def sgd(request):
    cfg, c, rho = SGD_CASES[request.param]
    clients = _clients(c)
    strategy = DPSGDStrategy(cfg, n_records=N, n_classes=c, participation=rho)
    strategy, queries, _ = recorded_fit(strategy, DPSGDClient(), clients, participation=rho)
    return strategy, queries, clients, c


def _sgd_releases(strategy) -> dict:
    own = {STEP: _release(strategy._noise)}
    if strategy._centre_noise is not None:
        own[CENTRE] = _release(strategy._centre_noise)
    if strategy._recal_rounds is not None:
        own[strategy._recal_rounds.stage] = _release(strategy._recal_rounds.noise)
    return own


def test_sgd_queries_fit_the_declared_stages_and_z(sgd):
    strategy, queries, _, _ = sgd
    handler, stages = DPSGDClient(), strategy.node_stages()
    names = [s.name for s in stages]
    assert names[:2] == [CENTRE, STEP] and set(names[2:]) <= set(recal.STAGES)
    assert sum(s.rounds for s in stages) == strategy.config.rounds
    check_queries(handler, stages, queries)  # (a)
    assert all(admitted(handler, stages, q) for q in queries)
    check_multipliers(handler, stages, _sgd_releases(strategy))  # (b)
    step = stages[1]
    assert step.config["bias_bound"] == strategy.bias_bound
    assert step.participation == strategy.participation
    assert step.accounting == strategy.config.participation_accounting


def test_sgd_replies_move_within_the_claimed_bound_and_not_within_half(sgd):
    strategy, queries, clients, c = sgd
    handler = DPSGDClient()
    records = adversarial_records(D, _labels(c))
    by_stage = check_queries(handler, strategy.node_stages(), queries)
    for name, qs in by_stage.items():
        for q in picks(qs, 2):
            claim = handler.reply_sensitivity(q)
            l1, l2 = worst_change(handler, q, clients[0], records)  # (c)
            assert l1 <= claim.l1 + TOL and l2 <= claim.l2 + TOL, (name, q.round, l1, l2)
            # The twin: half the claimed bound is broken by the same records.
            assert l1 > 0.5 * claim.l1 and l2 > 0.5 * claim.l2, (name, q.round, l1, l2, claim)


def test_sgd_tampered_settings_would_not_match_their_stage(sgd):
    strategy, queries, clients, c = sgd
    handler, stages = DPSGDClient(), strategy.node_stages()
    by_stage = check_queries(handler, stages, queries)
    records = adversarial_records(D, _labels(c))
    for stage in stages:
        q = by_stage[stage.name][0]
        assert admitted(handler, stages, q)  # the untouched query passes
        tampered = [
            with_fields(q, sampling_rate=1.0 if q.sampling_rate < 1 else 0.5),
            with_config(q, stage="bogus"),
        ]
        if stage.name in (CENTRE, STEP):
            bigger = with_config(q, clip_norm=10.0 * q.config["clip_norm"])
            tampered += [bigger, with_config(q, clip_norm=float("inf"))]
            tampered += [with_config(q, clip_norm=None), with_config(q, clip_norm="3")]
            # It really moves the reply further than the stage's Δ: the check matters.
            assert worst_change(handler, bigger, clients[0], records)[1] > (
                handler.reply_sensitivity(stage.template()).l2 + 1e-6
            )
        if stage.name == STEP:
            tampered += [with_config(q, bias_bound=q.config["bias_bound"] + 1.0)]
            tampered += [with_config(q, bias_bound=float("nan")), with_config(q, stage=CENTRE)]
        if stage.name == recal.RECALIBRATE and c == 2:
            tampered += [with_config(q, n_classes=3)]  # √3 > √2
        for bad in tampered:
            assert not admitted(handler, stages, bad), (stage.name, bad.config)


@pytest.mark.parametrize(
    "change", [{"clip_norm": float("inf")}, {"clip_norm": -1.0}, {"bias_bound": float("nan")}]
)
@pytest.mark.parametrize("backend", ["fast", "opacus"])
def test_sgd_answer_refuses_the_settings_its_sensitivity_refuses(sgd, change, backend):
    _, queries, clients, _ = sgd
    q = next(q for q in queries if q.config.get("stage") == STEP)
    bad = with_config(q, backend=backend, **change)
    handler = DPSGDClient()
    with pytest.raises(ValueError):
        handler.reply_sensitivity(bad)
    with pytest.raises(ValueError):
        handler.answer(bad, clients[0], np.arange(clients[0].n), {})


# -- plans without some stages ----------------------------------------------------------


def _begun(strategy):
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5))
    strategy.begin(
        n_features=D, ledger=ledger, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    return strategy


def test_a_plan_without_intercept_centring_or_recalibration_declares_only_its_rounds():
    trees = _begun(DPBoostingStrategy(BoostingConfig(rounds=5, intercept=False), n_records=N))
    assert [(s.name, s.rounds) for s in trees.node_stages()] == [(TREE, 5)]
    cfg = LogisticConfig(rounds=30, centre_share=0.0, recalibrate_share=0.0)
    steps = _begun(DPSGDStrategy(cfg, n_records=N)).node_stages()
    assert [(s.name, s.rounds, s.config["bias_bound"]) for s in steps] == [(STEP, 30, 0.0)]
    none = DPSGDStrategy(cfg, n_records=N)
    none.begin(n_features=D, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng())
    assert none.node_stages() == []


def test_the_linear_recalibration_round_declares_the_stage_its_queries_belong_to():
    """The one-round affine map other learners end with: its stage has the query's
    settings and the node's derived multiplier is the round's z (Δ = 2 from the same
    constant the DP-SGD client reports for its ``recalibrate_linear`` stage)."""
    from fedpriv.strategies.recalibration import LinearRecalibrationRound

    from fedpriv.models import recalibration as maths
    from fedpriv.privacy.randomness import rounding_margin

    round_ = LinearRecalibrationRound(n_classes=np.int64(3), n_records=N, share=0.1)
    assert round_.node_stage(method="dp_gam") is None  # nothing planned yet
    round_.plan(PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5)), rng=private_rng())
    stage = round_.node_stage(method="dp_gam", config={"model": "gam"})
    query = round_.query(round=7, method="dp_gam", arrays={}, config={"model": "gam"})
    assert stage.template().config == query.config
    assert (stage.sampling_rate, stage.reply_length, stage.rounds) == (1.0, 8, 1)
    assert stage.record_bound == query.record_bound == maths.SENSITIVITY
    z = stage.noise / (maths.SENSITIVITY + rounding_margin(stage.reply_length, "l2"))
    assert abs(z / round_.noise.noise_multiplier - 1.0) < 1e-9
