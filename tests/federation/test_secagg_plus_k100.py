"""SecAgg+ in process at K = 100: the released model is the plain sums' bit for bit, with
and without dropouts, and each client's bytes are its sparse neighbourhood's."""

import pytest

from tests.federation.boosting_fits import assert_same_model, boosting_fit, toy_clients


@pytest.fixture(scope="module")
def hundred():
    return toy_clients(4000, 100)


def _fit(clients, **kw):
    strategy, rt, _ = boosting_fit(clients, rounds=4, depth=2, sampling_rate=0.2, **kw)
    return strategy.model(), rt.communication


@pytest.mark.parametrize("dropout_rate", [0.0, 0.05])
def test_a_sparse_in_process_fit_at_k100_releases_the_plain_sums_model(hundred, dropout_rate):
    secure, comm = _fit(hundred, dropout_rate=dropout_rate)
    plain, _ = _fit(hundred, dropout_rate=dropout_rate, secure_aggregation=False)
    assert len(secure.trees) == 4
    assert_same_model(secure, plain)
    assert comm.rounds == 4 and comm.rounds_aborted == 0
    assert comm.recoveries == (4 if dropout_rate else 0)  # every round lost a few, recovered
    # The graph is sparse (k = 52 of K − 1 = 99): per round each client uploads its vector,
    # signs once (64 B) and answers its shares (40 B) for its surviving closed neighbourhood
    # (53 without dropouts); once, its two public keys and a batch of the run's 4 rounds'
    # seed shares sealed for each of its 52 neighbours (10 B header, 4 × 40 B, 16 B tag).
    if not dropout_rate:
        n = 2 * 2**2  # boosting's reply: (Σg, Σh) per leaf
        per_round = 8 * n + 64 + 53 * 40
        batch = 52 * (10 + 4 * 40 + 16)
        assert comm.bytes_uploaded.tolist() == [4 * per_round + batch + 64] * 100
