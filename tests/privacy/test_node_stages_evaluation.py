"""DP federated evaluation: the stage a node enforces fits its one query (histogram, Δ = 1).

As for the learners (:mod:`tests.privacy.node_stage_checks`): the query of a
recorded run belongs to the declared stage, the node's derived multiplier is
the strategy's z, one adversarial record moves the histogram by at most the
claimed bound (and by more than half of it), and a tampered query would be refused.
"""

import numpy as np
import pytest
from fedpriv.clients.evaluation import EvaluationClient
from fedpriv.strategies.evaluation import EvaluationConfig, EvaluationStrategy

from fedpriv.data import iid
from fedpriv.evaluation_dp import STAGE
from fedpriv.federation.protocol import make_clients
from fedpriv.models.networks import InputMap, NetworkModel, NetworkSpec
from tests.keys import private_rng
from tests.privacy.node_stage_checks import (
    TOL,
    Release,
    admitted,
    adversarial_records,
    check_multipliers,
    check_queries,
    recorded_fit,
    with_config,
    with_fields,
    worst_change,
)

D, N = 4, 600


def _model() -> NetworkModel:
    spec = NetworkSpec(kind="logistic", n_features=D)
    return NetworkModel(spec, np.array([4.0, -2.0, 1.0, 0.0, -1.5]), InputMap.identity(D))


def _strategy(config: EvaluationConfig) -> EvaluationStrategy:
    arrays = _model().to_arrays()
    return EvaluationStrategy(config, model_method="logistic", model_arrays=arrays, n_records=N)


def _clients():
    rng = np.random.default_rng(0)
    X = rng.random((N, D))
    y = (rng.random(N) < _model().predict_proba(X)).astype(float)
    return make_clients(X, y, iid(N, n_clients=3, rng=np.random.default_rng(1)))


CONFIGS = {
    "ledger-budget": EvaluationConfig(),
    "share": EvaluationConfig(bins=10, epsilon=0.5, delta=1e-6),
    "multiplier": EvaluationConfig(bins=40, noise_multiplier=3.0),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def evaluation(request):
    strategy, queries, _ = recorded_fit(
        _strategy(CONFIGS[request.param]), EvaluationClient(), _clients()
    )
    return strategy, queries


def test_the_query_fits_the_declared_stage_and_z(evaluation):
    strategy, queries = evaluation
    handler, stages = EvaluationClient(), strategy.node_stages()
    assert [(s.name, s.rounds, s.sampling_rate) for s in stages] == [(STAGE, 1, 1.0)]
    assert stages[0].reply_length == 2 * strategy.config.bins
    check_queries(handler, stages, queries)  # (a)
    assert admitted(handler, stages, queries[0])
    mech = strategy.mechanism
    check_multipliers(handler, stages, {STAGE: Release(mech.noise_multiplier, mech.dp_event, 1)})


def test_the_non_private_reference_declares_nothing():
    strategy = _strategy(EvaluationConfig())
    strategy.begin(
        n_features=D, ledger=None, rng=np.random.default_rng(0), secret_rng=private_rng()
    )
    assert strategy.node_stages() == []


def test_one_record_moves_the_histogram_by_the_claim_and_not_by_half(evaluation):
    _, queries = evaluation
    handler, data = EvaluationClient(), _clients()[0]
    claim = handler.reply_sensitivity(queries[0])
    assert (claim.l1, claim.l2) == (1.0, 1.0)
    l1, l2 = worst_change(handler, queries[0], data, adversarial_records(D, [0.0, 1.0, 5.0]))
    assert l1 <= claim.l1 + TOL and l2 <= claim.l2 + TOL, (l1, l2)
    assert l1 > 0.5 * claim.l1 and l2 > 0.5 * claim.l2  # the twin: half is broken


def test_a_tampered_query_would_not_match_the_stage(evaluation):
    strategy, queries = evaluation
    handler, stages = EvaluationClient(), strategy.node_stages()
    q, bins = queries[0], strategy.config.bins
    assert admitted(handler, stages, q)  # the untouched query passes
    malformed = [  # the handler refuses these itself
        with_fields(q, reply_length=q.reply_length + 2),  # disagrees with its bins
        with_fields(with_config(q, bins=bins + 1), reply_length=2 * bins + 2),  # odd bins
        with_config(q, bins=str(bins)),
        with_config(q, bins=None),
    ]
    tampered = [
        with_fields(q, sampling_rate=0.5),
        with_fields(q, method="boosting"),
        with_fields(with_config(q, bins=2 * bins), reply_length=4 * bins),  # longer than declared
        *malformed,
    ]
    for bad in tampered:
        assert not admitted(handler, stages, bad), (bad.reply_length, bad.config)
    data = _clients()[0]
    for bad in malformed:  # answer refuses exactly what its sensitivity refuses
        with pytest.raises(ValueError):
            handler.reply_sensitivity(bad)
        with pytest.raises(ValueError):
            handler.answer(bad, data, np.arange(data.n), {})
