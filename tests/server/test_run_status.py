"""In-process runs end with an honest status: K < 2 refused, aborted rounds counted.

An outside review found these ending "successfully" with an untrained model:
K = 1, and participation ρ = 0.3 with K = 3 (most rounds ask fewer than two
clients, so most rounds release nothing).
"""

import logging

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.server.estimators import DPBoostingClassifier, LumberjackClassifier

from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.federation.settings import SettingError
from fedpriv.federation.status import RunFailedError, RunStatus
from tests.keys import key_for

#: ρ = 0.3, K = 3 under test key 1: 15 of 20 rounds ask fewer than two clients.
SPARSE = {"rounds": 20, "depth": 2, "num_clients": 3, "participation": 0.3, "epsilon": 2.0,
          "max_records": 200}  # 600 rows over 3 clients, declared: no count  # fmt: skip


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.random((600, 4))
    return X, (X[:, 0] > 0.5).astype(int)


def test_participation_03_with_three_clients_fails_with_the_spend_kept(data):
    with pytest.raises(RunFailedError, match=r"run failed: 15 of 20 rounds released nothing") as e:
        DPBoostingClassifier(**SPARSE, secret_key=key_for(1)).fit(*data)
    out = e.value.outcome
    assert (out.status, out.rounds_planned, out.rounds_released, out.rounds_aborted) == (
        RunStatus.FAILED,
        20,
        5,
        15,
    )
    assert "75% > max-aborted-share 25%" in str(e.value)
    # The rounds that were released were spent, and the spend stays reachable.
    assert e.value.privacy_report.to_dict()["n_releases"] == 5
    assert len(e.value.ledger.entries) == 5 and 0 < e.value.privacy_report.epsilon <= 2.0
    assert e.value.communication.rounds_aborted == 15


def test_the_same_run_under_a_tolerant_threshold_is_degraded_and_warns(data, caplog):
    with caplog.at_level(logging.WARNING, logger="fedpriv"):
        est = DPBoostingClassifier(**SPARSE, secret_key=key_for(1), max_aborted_share=0.8).fit(
            *data
        )
    assert est.run_status_ is RunStatus.DEGRADED
    assert (est.run_outcome_.rounds_released, est.run_outcome_.rounds_aborted) == (5, 15)
    assert est.privacy_report_.to_dict()["n_releases"] == 5
    assert "run degraded: 15 of 20 rounds released nothing" in caplog.text
    assert "75% ≤ max-aborted-share 80%" in caplog.text


def test_a_full_participation_fit_is_completed(data):
    est = DPBoostingClassifier(
        rounds=3, depth=2, num_clients=3, secret_key=key_for(1), max_records=200
    ).fit(*data)
    assert est.run_status_ is RunStatus.COMPLETED
    assert est.run_outcome_.rounds_released == 3 == est.privacy_report_.to_dict()["n_releases"]


@pytest.mark.parametrize("estimator", [DPBoostingClassifier, LumberjackClassifier])
def test_one_client_is_refused_before_any_data_is_read(estimator):
    with pytest.raises(SettingError, match=r"^num_clients must be an integer in \[2, 1000\]"):
        estimator(num_clients=1).fit("not even data")  # refused before the data is looked at


def test_the_runtime_refuses_one_client_under_secure_aggregation(data):
    X, y = data
    one = make_clients(X, y, [np.arange(len(y))])
    with pytest.raises(ValueError, match=r"^clients: secure aggregation needs at least 2 clients"):
        InProcessRuntime(clients=one, handler=BoostingClient(), seed=0)
    # Plain sums of a single curator's rows remain possible (a central-DP baseline).
    InProcessRuntime(clients=one, handler=BoostingClient(), seed=0, secure_aggregation=False)
