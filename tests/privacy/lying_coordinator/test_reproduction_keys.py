"""Reproduction keys under distributed noise: reported, refused by nodes, kept from nodes.

A node whose key derives from the server's reproduction key (``$FEDPRIV_SECRET_KEY``)
lets the server recompute its noise share (:mod:`fedpriv.privacy.distributed`). Such a
run says ``certified: false`` with the reason, in process (always) and over Flower (a
node's ``key-origin``); a node refuses it before reading a row unless its own
node-config allows it; the launchers keep the key from node processes unless
``--share-secret-key``. Every defence has a twin that removes it and shows the test
has power.
"""

from __future__ import annotations

import math

import pytest
from fedpriv.clients import app as client_app
from fedpriv.server import local_federation, node_keys
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.server.grid_runtime import GridRuntime

from fedpriv.artefact import load_model
from fedpriv.data import load_heart
from fedpriv.privacy.distributed import (
    ALLOW_REPRODUCTION_KEY,
    ALLOW_REPRODUCTION_KEY_ENV,
    DERIVED_KEYS_CAVEAT,
    allows_reproduction_key,
    check_key_origin,
)
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex
from tests.server.test_flower_loopback import _json, run_app

JOB = {"dataset": "heart", "num-clients": 4, "method": "boosting", "rounds": 2, "depth": 2,
       "epsilon": 1.0, "seed": 5, "noise": "distributed", "tolerated-dropouts": 1}  # fmt: skip
ALLOW = {p: {ALLOW_REPRODUCTION_KEY: True} for p in range(4)}


def _read_rows_spy(monkeypatch) -> list[int]:
    """The partitions whose rows were read (the ClientApp's loader, recorded)."""
    read: list[int] = []
    loader = client_app._node_data

    def spy(context, s, pid):
        read.append(pid)
        return loader(context, s, pid)

    monkeypatch.setattr(client_app, "_node_data", spy)
    return read


def test_a_node_refuses_a_distributed_run_on_an_injected_key_before_reading_a_row(
    monkeypatch, tmp_path
):
    read = _read_rows_spy(monkeypatch)
    with pytest.raises(RuntimeError, match="key exchange: 0 of 4 nodes answered"):
        run_app(monkeypatch, tmp_path, JOB)  # $FEDPRIV_SECRET_KEY set, nothing allowed
    assert read == []


def test_twin_without_the_node_check_the_run_goes_through(monkeypatch, tmp_path):
    monkeypatch.setattr(client_app, "check_key_origin", lambda *a, **k: None)
    read = _read_rows_spy(monkeypatch)
    out = run_app(monkeypatch, tmp_path, JOB)
    assert sorted(set(read)) == [0, 1, 2, 3]
    assert _json(out, "privacy")["n_releases"] == 2


def test_injected_node_keys_void_the_certification_over_flower(monkeypatch, tmp_path):
    out = run_app(monkeypatch, tmp_path, JOB, node_config=ALLOW)
    privacy = _json(out, "privacy")
    assert privacy["certified"] is False and DERIVED_KEYS_CAVEAT in privacy["caveat"]
    card = load_model(out / "model.fedpriv.npz").card  # the model file's privacy card
    assert not card.certified and DERIVED_KEYS_CAVEAT in card.caveats


def test_twin_without_the_key_origin_check_the_run_is_certified(monkeypatch, tmp_path):
    monkeypatch.setattr(GridRuntime, "_void_if_derived", lambda self, ledger: None)
    out = run_app(monkeypatch, tmp_path, JOB, node_config=ALLOW)
    assert _json(out, "privacy")["certified"] is True  # the old, false claim


def test_fresh_node_keys_keep_a_distributed_run_certified(monkeypatch, tmp_path):
    real = run_app.__globals__["server_app"].main

    def without_key(grid, context):
        monkeypatch.delenv(KEY_ENV)  # set by run_app: no process of this run has a key
        return real(grid, context)

    monkeypatch.setattr(run_app.__globals__["server_app"], "main", without_key)
    out = run_app(monkeypatch, tmp_path, JOB)
    privacy = _json(out, "privacy")
    assert privacy["certified"] is True and privacy["caveat"] == ""


def test_a_node_that_says_no_key_origin_counts_as_injected(monkeypatch, tmp_path):
    def drop_origin(pid, kind, reply):
        if kind == "query.keys" and pid == 2:
            del reply.content["meta"]["key-origin"]
        return [reply]

    monkeypatch.setattr(client_app, "check_key_origin", lambda *a, **k: None)
    real = run_app.__globals__["server_app"].main

    def without_key(grid, context):
        monkeypatch.delenv(KEY_ENV)
        return real(grid, context)

    monkeypatch.setattr(run_app.__globals__["server_app"], "main", without_key)
    out = run_app(monkeypatch, tmp_path, JOB, tamper=drop_origin)
    privacy = _json(out, "privacy")
    assert privacy["certified"] is False and DERIVED_KEYS_CAVEAT in privacy["caveat"]


def test_in_process_distributed_noise_is_never_certified():
    ds = load_heart()
    params = {"rounds": 2, "depth": 2, "epsilon": 1.0, "seed": 5, "secret_key": key_for(3),
              "max_records": 400}  # fmt: skip
    dist = DPBoostingClassifier(**params, noise="distributed").fit(ds)
    report = dist.privacy_report_
    assert not report.certified and DERIVED_KEYS_CAVEAT in report.caveat
    central = DPBoostingClassifier(**params).fit(ds)
    assert central.privacy_report_.certified and math.isfinite(central.epsilon_spent_)


def test_in_process_twin_without_the_mark_is_certified(monkeypatch):
    from fedpriv.federation import runtime

    monkeypatch.setattr(runtime, "DERIVED_KEYS_CAVEAT", "")  # mark_uncertified("") is a no-op
    params = {"rounds": 2, "depth": 2, "epsilon": 1.0, "seed": 5, "secret_key": key_for(3),
              "max_records": 400}  # fmt: skip
    dist = DPBoostingClassifier(**params, noise="distributed").fit(load_heart())
    assert dist.privacy_report_.certified


def test_the_node_rule_and_its_setting():
    check_key_origin("fresh", distributed=True, allowed=False)
    check_key_origin("injected", distributed=False, allowed=False)  # central noise: no shares
    check_key_origin("injected", distributed=True, allowed=True)
    with pytest.raises(ValueError, match="allow-reproduction-key = true"):
        check_key_origin("injected", distributed=True, allowed=False)
    with pytest.raises(ValueError, match="key-origin must be"):
        check_key_origin("borrowed", distributed=False, allowed=True)
    assert not allows_reproduction_key({}, {})
    assert allows_reproduction_key({ALLOW_REPRODUCTION_KEY: True}, {})
    assert not allows_reproduction_key({ALLOW_REPRODUCTION_KEY: "false"},
                                       {ALLOW_REPRODUCTION_KEY_ENV: "true"})  # fmt: skip
    assert allows_reproduction_key({}, {ALLOW_REPRODUCTION_KEY_ENV: "true"})  # virtual nodes
    with pytest.raises(ValueError, match="allow-reproduction-key must be true or false"):
        allows_reproduction_key({ALLOW_REPRODUCTION_KEY: "maybe"}, {})


def test_node_environments_carry_the_key_only_when_shared(monkeypatch):
    env = {KEY_ENV: key_hex(1), "PATH": "/bin", ALLOW_REPRODUCTION_KEY_ENV: "true"}
    kept = node_keys.node_environment(env, share=False)
    assert KEY_ENV not in kept and ALLOW_REPRODUCTION_KEY_ENV not in kept and kept["PATH"]
    shared = node_keys.node_environment({KEY_ENV: key_hex(1)}, share=True)
    assert shared[KEY_ENV] == key_hex(1) and shared[ALLOW_REPRODUCTION_KEY_ENV] == "true"
    assert node_keys.simulation_environment(env, share=False).get(KEY_ENV) is None
    assert node_keys.node_config(True) == {ALLOW_REPRODUCTION_KEY: True}
    assert node_keys.node_config(False) == {}


@pytest.mark.parametrize("share", [False, True])
def test_supernodes_get_the_key_only_with_share_secret_key(monkeypatch, tmp_path, share):
    """The SuperNode's real command line and environment (its process is not started):
    the server's key stays out unless shared; shared, the node-config allows it."""
    monkeypatch.setenv(KEY_ENV, key_hex(2))
    started = []

    class Fake:
        pid = 1

    def popen(args, env, **kw):
        started.append((args, env))
        return Fake()

    monkeypatch.setattr(local_federation.subprocess, "Popen", popen)
    monkeypatch.setattr(local_federation, "ProcessTracker", lambda pid: None)
    fed = local_federation.Federation(
        workdir=tmp_path, num_clients=3, insecure=True, share_secret_key=share
    )
    fed.start_node(0)
    fed._popen(["superlink"], tmp_path / "link", "superlink")  # the ServerApp's side
    (node_args, node_env), (_, link_env) = started
    assert link_env[KEY_ENV] == key_hex(2)  # the server replays its own randomness
    assert (KEY_ENV in node_env) is share
    config = node_args[node_args.index("--node-config") + 1]
    assert ("allow-reproduction-key=true" in config) is share
