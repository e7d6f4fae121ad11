"""Bad inputs past the table of ``test_bad_inputs.py``: a defect keeps its traceback, a
full disk leaves the old file, one-class arrays, a hostile client, the fewest clients."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from click.testing import CliRunner
from fedpriv.server.cli import cli

from tests.cli.bad_input_harness import (
    _file,
)


def test_a_defect_keeps_its_traceback(monkeypatch):
    """Twin of the table: the boundary maps fedpriv's errors, not every error (a bug
    stays a bug, with its traceback)."""
    from fedpriv.server import cli as server_cli

    def broken(**kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(server_cli, "run_in_process", broken)
    result = CliRunner().invoke(cli, ["run", "--dataset", "heart"])
    assert isinstance(result.exception, KeyError) and result.exit_code == 1


def test_a_write_that_fills_the_disk_leaves_no_file_and_the_old_one(tmp_path, monkeypatch):
    """The writer under the full-disk rows: 16 KiB of 100 KB go down, then ENOSPC; the
    temporary file is removed and the file it was to replace is unchanged."""
    from fedpriv.atomic import write_bytes_atomic

    target = _file(tmp_path / "f", b"earlier")
    real, room = os.write, [16 * 1024]

    def write(fd, data):
        if not room[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data[: room[0]]))
        room[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="No space left on device"):
        write_bytes_atomic(target, b"x" * 100_000)
    assert room[0] == 0  # the disk did fill: a partial temporary file existed
    assert [p.name for p in tmp_path.iterdir()] == ["f"] and target.read_bytes() == b"earlier"


def test_an_array_fit_refuses_one_class(monkeypatch):
    """``fit(X, y)`` on rows of one class: one DataError naming the label (as a CSV load);
    twin: the same rows with both classes fit."""
    from fedpriv.server.estimators import DPBoostingClassifier

    from fedpriv.errors import DataError

    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(60, 3)), np.arange(60) % 2
    est = DPBoostingClassifier(rounds=1, depth=2, epsilon=2.0, num_clients=2, max_records=60)
    with pytest.raises(DataError, match=r"^fit: column 'y': the training rows hold one class "):
        est.fit(X, np.zeros(60, dtype=int))
    named = DPBoostingClassifier(classes=["no", "yes"], rounds=1, num_clients=2, max_records=60)
    with pytest.raises(DataError, match=r"one class only \(label 'yes'\)"):
        named.fit(X, np.full(60, "yes"))
    assert est.fit(X, y).run_status_.value == "completed"


def test_a_hostile_client_aborting_the_forests_one_round_fails_the_run(monkeypatch):
    """A client that impersonates another in the random forest's only round aborts it
    (nothing released, nothing spent): the run fails as RoundAbortedError naming the round
    (an in-process fit: RunFailedError, exit 1), not a bare RuntimeError. Twin: honest."""
    import tests.federation.hostile as hostile
    from fedpriv.data import load_heart
    from fedpriv.federation.engine import RoundEngine, client_key
    from fedpriv.federation.protocol import ClientData
    from fedpriv.federation.secagg import SecAggConfig
    from fedpriv.federation.status import RoundAbortedError
    from fedpriv.methods import StrategyContext, get_method
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger
    from tests.keys import key_for

    monkeypatch.setattr(hostile, "ATTACK_ROUND", 0)  # the forest has one round
    ds = load_heart()
    X, y = ds.xy("train")
    clients = [
        ClientData(client_id=i, X=X[rows], y=y[rows])
        for i, rows in enumerate(ds.client_partition(4))
    ]
    record = get_method("random_forest")

    def run(case: str):
        context = StrategyContext(
            schema=ds.schema, n_features=X.shape[1], n_records=int(y.size), n_classes=2
        )
        strategy = record.build_strategy(record.config_class(trees=2), context)
        key = key_for(5)
        keys = [client_key(key, c.client_id) for c in clients]
        transport = hostile.HostileTransport(
            "impersonation", clients=clients, handler=record.client_handler(), client_keys=keys,
            secure_aggregation=True, secagg=SecAggConfig(), vectorised=False,
        )  # fmt: skip
        transport.case = case
        engine = RoundEngine(transport, n_clients=4, max_records=max(c.n for c in clients))
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=record.delta))
        engine.begin(strategy, n_features=X.shape[1], ledger=ledger, seed=3, secret_key=key)
        engine.setup_keys()
        return engine.run(strategy), ledger

    with pytest.raises(RoundAbortedError, match=r"^round 0 released nothing .*leaf-count"):
        run("impersonation")
    model, ledger = run("honest")
    assert model.model() is not None and ledger.report().epsilon > 0


def test_the_declared_fewest_clients_are_the_engines():
    """limits.py imports no engine: its MIN_CLIENTS must be the engine's MIN_PARTIES."""
    from fedpriv.federation.engine import MIN_PARTIES
    from fedpriv.federation.limits import MIN_CLIENTS

    assert MIN_CLIENTS == MIN_PARTIES
