"""What crosses the wire in a Flower run: no seed, no key, no timing, in any message.

A loopback grid hands every message of :class:`fedpriv.server.grid_runtime.GridRuntime`
straight to the real ClientApp handlers (``clients/app.py``, each node with its
own ``Context``), so the whole Flower code path runs in milliseconds, without
Ray or a SuperLink, and every message either way can be inspected. The run
must also release the in-process model bit for bit under the same key.
"""

from __future__ import annotations

import json

import numpy as np
from fedpriv.server.app import build_strategy
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.server.grid_runtime import GridRuntime
from flwr.app import ConfigRecord
from flwr.supercore.task_identity import TaskIdentity

from fedpriv.data import load_heart
from fedpriv.data.node import declared_max_records
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from tests.keys import key_for, key_hex
from tests.server.loopback import HANDLERS, RUN_ID, LoopbackGrid

SEED = 918_273_645  # a public seed no message may carry


def _walk(record):
    """Every (key, value) of a RecordDict's config and metric records, recursively listed."""
    for name, rec in record.items():
        if isinstance(rec, ConfigRecord):
            for key, value in rec.items():
                yield f"{name}.{key}", value


#: The launcher's public bound for heart's largest hospital (the runtime's codec bound).
BOUND = declared_max_records("heart", 4, 0)


def _run(monkeypatch, rounds: int = 3):
    # What a ServerApp process has set before any Message is built.
    monkeypatch.setattr(TaskIdentity, "_run_id", RUN_ID)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0, raising=False)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1, raising=False)
    monkeypatch.setenv("FEDPRIV_SECRET_KEY", key_hex(7))
    run_config = {
        "dataset": "heart",
        "num-clients": 4,
        "method": "boosting",
        "rounds": rounds,
        "depth": 2,
        "seed": SEED,
        "epsilon": 2.0,
    }
    settings = RunSettings.from_run_config(run_config)
    ds = load_heart()
    X, _ = ds.xy("train")
    grid = LoopbackGrid(settings.to_run_config(), settings.num_clients)
    # The public bound on each hospital's records (the launcher's, as the estimator declares).
    runtime = GridRuntime(grid, settings, max_records=BOUND)
    runtime.connect()
    runtime.ping(1)  # the empty round trip is inspected too
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=settings.delta))
    strategy = build_strategy(settings, ds.schema, n_records=4 * BOUND, n_features=int(X.shape[1]))
    runtime.begin(strategy, n_features=X.shape[1], ledger=ledger, secret_key=key_for(7))
    while (query := strategy.next_query()) is not None:
        planned, msgs = runtime.plan_round(query)
        strategy.update(query, runtime.finish_round(planned, grid.send_and_receive(msgs)))
    return grid, strategy, ledger


def test_no_message_carries_a_seed_a_key_or_a_timing(monkeypatch):
    grid, _, _ = _run(monkeypatch)
    kinds = {m.metadata.message_type for m in grid.sent}
    assert kinds == set(HANDLERS)  # every kind of message was inspected
    secrets = [key_for(7).bytes_for_local_store()]  # the injected run key
    secrets += [key_for(7).derive("client", p).bytes_for_local_store() for p in range(4)]
    for msg in grid.sent + grid.received:
        for name, value in _walk(msg.content):
            assert "seed" not in name and "second" not in name and "time" not in name, name
            values = value if isinstance(value, list) else [value]
            for v in values:
                assert v != SEED, name  # the public seed is never sent
                if isinstance(v, bytes):
                    assert not any(k in v for k in secrets), name
    for reply in grid.received:
        meta = dict(reply.content["meta"]) if "meta" in reply.content else {}
        # No handler time, nothing else: a partition id and key once, then the round; the
        # plan's reply, what the node's own policy has left (∞ without one: no data in it).
        # (Connected before the strategy began: its plan went alone, in ``query.plan``.)
        expected = {
            # key-origin: a public flag, "fresh" or "injected" (server-derived key);
            # run-id: Flower's public run id as the node holds it, which seeds SecAgg+'s
            # graph with the key book (the server takes the nodes' one, never its own)
            "query.keys": {"partition-id", "run-id", "public-key", "verify-key", "key-origin"},
            "query.plan": {"remaining-epsilon", "remaining-delta"},
            "query.fedpriv": {"round"},
            "query.consistency": {"round", "signature"},  # its signature on the survivors
        }.get(reply.metadata.message_type, set())
        assert set(meta) == expected, reply.metadata.message_type
    # Each node's secret stays in its own state and differs from every other node's.
    private = [bytes(c.state["private"]["key"]) for c in grid.contexts.values()]
    # ... as do its X25519 and Ed25519 private keys (secure aggregation).
    for c in grid.contexts.values():
        private.append(bytes(c.state["secagg"]["sk"]))
        private.append(bytes.fromhex(json.loads(str(c.state["secagg"]["book"]))["signing"]))
    assert len(set(private)) == len(private)
    for msg in grid.sent + grid.received:
        for _, value in _walk(msg.content):
            for v in value if isinstance(value, list) else [value]:
                assert not (isinstance(v, bytes) and any(p in v for p in private))


def test_the_flower_path_releases_the_in_process_model_under_one_key(monkeypatch):
    _, strategy, ledger = _run(monkeypatch)
    ref = DPBoostingClassifier(
        rounds=3,
        depth=2,
        epsilon=2.0,
        seed=SEED,
        num_clients=4,
        secret_key=key_for(7),
        max_records=BOUND,
    ).fit(load_heart())
    model = strategy.model()
    for got, want in zip(model.trees, ref.model_.trees, strict=True):
        np.testing.assert_array_equal(got.feature, want.feature)
        np.testing.assert_array_equal(got.threshold, want.threshold)
    np.testing.assert_array_equal(np.array(model.leaf_values), np.array(ref.model_.leaf_values))
    assert ledger.report().epsilon == ref.epsilon_spent_
