"""The consortium's commands without processes: keys, allow-list, node checks, schema digest.

What starts real SuperLinks and SuperNodes is in ``test_consortium_processes.py``
(``pytest -m processes``).
"""

import json
import os
import stat
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fedpriv.clients.node_rules import SCHEMA_PATH, node_settings
from fedpriv.server.cli import main as fedpriv
from fedpriv.server.coordinator import Coordinator
from fedpriv.server.coordinator_runs import job_overrides
from fedpriv.server.hospital import NodeSetup, diagnose, file_digest, keygen
from fedpriv.server.launch import step_timeout
from fedpriv.server.processes import free_port
from fedpriv.server.tls import fingerprint

from fedpriv.data import DataError
from fedpriv.federation.settings import SettingError

SCHEMA = "experiments/schemas/example.toml"
PORT = free_port()  # no SuperLink answers there

#: What Flower 1.42's SuperNode logged, seen on this project's loopback federation.
UNREGISTERED_LOG = """ERROR :     Exit Code: 305
Failed to initialize the connection to the SuperLink.
[code: 2004] Failed to activate SuperNode.
The SuperNode could not establish a connection to the SuperLink."""
OTHER_CA_LOG = """ERROR :     SSL/TLS handshake error detected.
ERROR :     Exit Code: 305
Failed to initialize the connection to the SuperLink.
[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer
The SuperNode could not establish a connection to the SuperLink."""


def test_keygen_keeps_the_private_key_private_and_never_overwrites_it(tmp_path, capsys):
    assert fedpriv(["node", "keygen", "--out", str(tmp_path / "k"), "--name", "north"]) == 0
    out = capsys.readouterr().out
    pub = (tmp_path / "k" / "node.pub").read_text()
    assert pub.startswith("ecdsa-sha2-nistp384 ") and pub.strip().endswith(" north")
    assert f"fingerprint {fingerprint(pub)}" in out and "BEGIN" not in out  # no private key
    assert stat.S_IMODE((tmp_path / "k" / "node.key").stat().st_mode) == 0o600
    before = (tmp_path / "k" / "node.key").read_bytes()
    assert fedpriv(["node", "keygen", "--out", str(tmp_path / "k")]) == 2
    assert "not overwritten" in capsys.readouterr().err
    assert (tmp_path / "k" / "node.key").read_bytes() == before


def test_the_allow_list_assigns_indices_and_refuses_duplicates_and_strangers(tmp_path):
    coord = Coordinator.init(tmp_path / "co", hosts=("coord.example",), port=PORT)
    keys = [keygen(tmp_path / f"h{i}", f"h{i}")[0] for i in range(3)]
    listed = [coord.register(k.public, name=f"hospital-{i}") for i, k in enumerate(keys)]
    assert [n.index for n in listed] == [0, 1, 2]
    assert [n.fingerprint for n in coord.nodes()] == [
        fingerprint(k.public.read_text()) for k in keys
    ]
    with pytest.raises(SettingError, match="registered already"):
        coord.register(keys[0].public, name="again")  # the same key under another name
    with pytest.raises(SettingError, match="--name hospital-1 is registered already"):
        coord.register(keygen(tmp_path / "x", "x")[0].public, name="hospital-1")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    (tmp_path / "rsa.pub").write_bytes(
        rsa_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    with pytest.raises(SettingError, match="NIST EC keys only"):
        coord.register(tmp_path / "rsa.pub", name="rsa")
    # Key rotation: a new key for hospital-1 keeps its index; the old key is gone.
    new = keygen(tmp_path / "h1-new", "h1")[0]
    rotated = coord.register(new.public, name="hospital-1", rotate=True)
    assert rotated.index == 1 and len(coord.nodes()) == 3
    assert fingerprint(keys[1].public.read_text()) not in {n.fingerprint for n in coord.nodes()}
    # The coordinator's folder holds public keys and its own TLS material, no node's key.
    held = {p.name for p in (tmp_path / "co").rglob("*") if p.is_file()}
    assert "node.key" not in held and "ca.crt" in held


def test_init_refuses_an_existing_folder_and_a_missing_host(tmp_path):
    Coordinator.init(tmp_path / "co", hosts=("a",), port=PORT)
    with pytest.raises(SettingError, match="already; not overwritten"):
        Coordinator.init(tmp_path / "co", hosts=("a",), port=PORT)
    assert fedpriv(["coordinator", "status", "--dir", str(tmp_path / "none")]) == 2


def _setup(tmp_path, **kw):
    key, _ = keygen(tmp_path / "key")
    co = Coordinator.init(tmp_path / "co", hosts=("127.0.0.1",), port=PORT)
    data = tmp_path / "patients.csv"
    data.write_text(SCHEMA_CSV := open("experiments/schemas/example_hospitals.csv").read())
    assert SCHEMA_CSV
    (tmp_path / "policy.toml").write_text("[policy]\nmax-epsilon = 2.0\n")
    args = dict(
        superlink=f"127.0.0.1:{PORT}", index=0, nodes=3, ca=co.tls.ca_cert, key=key.private,
        data=data, schema=SCHEMA, policy=tmp_path / "policy.toml", state=tmp_path / "state",
    )  # fmt: skip
    return NodeSetup(**{**args, **kw})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"data": "missing.csv"}, "--data"),
        ({"superlink": "no-port"}, "--superlink must be HOST:PORT"),
        ({"index": 3}, r"--index must lie in \[0, 2\]"),
        ({"nodes": 1}, r"--nodes must lie in \[2, 10000\]"),
        ({"ca": "missing.crt"}, "--ca missing.crt: no such file"),
        ({"policy": "bad-policy"}, "--policy"),
        ({"schema": "missing.toml"}, "--schema missing.toml: no such file"),
    ],
)
def test_a_node_checks_every_setting_and_file_before_starting(tmp_path, change, message):
    if change.get("policy") == "bad-policy":
        (tmp_path / "bad.toml").write_text("[policy]\nmax-epsilon = -1\n")
        change = {"policy": tmp_path / "bad.toml"}
    if change.get("data") == "missing.csv":
        change = {"data": tmp_path / "missing.csv"}
    setup = _setup(tmp_path, **change)
    with pytest.raises(SettingError, match=message):
        setup.check()
    assert _setup(tmp_path / "ok").check().data.is_absolute()  # the twin: a sound setup passes


def test_a_private_key_others_may_read_is_refused(tmp_path):
    setup = _setup(tmp_path)
    os.chmod(setup.key, 0o644)
    with pytest.raises(SettingError, match="readable by other users"):
        setup.check()


def test_node_start_refuses_a_missing_file_in_one_line_without_starting(tmp_path, capsys):
    s = _setup(tmp_path)
    argv = ["node", "start", "--superlink", s.superlink, "--ca", str(s.ca), "--key",
            str(tmp_path / "key"), "--data", str(tmp_path / "nope.csv"), "--policy", str(s.policy),
            "--state", str(tmp_path / "state"), "--index", "0", "--nodes", "3"]  # fmt: skip
    assert fedpriv(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data" in err[0] and "nope.csv" in err[0]
    assert not (tmp_path / "state" / "supernode.log").exists()  # no SuperNode started


def test_the_cause_of_a_supernodes_early_exit_is_named():
    assert "does not trust the SuperLink's certificate" in diagnose(OTHER_CA_LOG)
    assert "not registered" in diagnose(UNREGISTERED_LOG)
    assert diagnose("INFO: SuperNode ID: 123") is None


def _context(run_config, node_config):
    return SimpleNamespace(run_config=run_config, node_config=node_config)


def test_a_node_with_its_own_schema_refuses_a_run_naming_another(tmp_path):
    own = tmp_path / "schema.toml"
    own.write_text(open(SCHEMA).read())
    digest = file_digest(own)
    run = {"method": "boosting", "schema": "/coordinator/only/schema.toml"}
    s = node_settings(_context({**run, "schema-sha256": digest}, {SCHEMA_PATH: str(own)}))
    assert s.schema == str(own)  # read with its own copy, not the coordinator's path
    for wrong in ("0" * 64, ""):
        with pytest.raises(DataError) as err:
            node_settings(_context({**run, "schema-sha256": wrong}, {SCHEMA_PATH: str(own)}))
        assert err.value.code == "schema_mismatch"
    # Without its own copy the node reads the run's schema, as before.
    assert node_settings(_context(run, {})).schema == run["schema"]


def test_a_submission_names_the_schemas_digest_and_the_registered_k(tmp_path):
    coord = Coordinator.init(tmp_path / "co", hosts=("a",), port=PORT)
    for i in range(4):
        coord.register(keygen(tmp_path / f"h{i}", f"h{i}")[0].public, name=f"h{i}")
    # Every wait of the coordinator's commands grows with its registered nodes.
    assert coord.step() == step_timeout(1800.0, 4) > step_timeout(1800.0, 1)
    job = job_overrides(coord, {"schema": SCHEMA, "max-records": 100})
    assert job["num-clients"] == 4 and job["schema-sha256"] == file_digest(SCHEMA)
    assert job["out-dir"] == str(coord.results)
    with pytest.raises(SettingError, match="max-records must be declared"):
        job_overrides(coord, {"schema": SCHEMA})
    # A preset naming the dataset declares the files' schema (its bundled corpus's export).
    demo = job_overrides(coord, {"max-records": 100}, preset="deploy-demo")
    assert "schema-sha256" not in demo
    with pytest.raises(SettingError, match="schema must be set"):
        job_overrides(coord, {"max-records": 100})  # the twin: no schema, no dataset
    assert fedpriv(["coordinator", "submit", "--dir", str(coord.root), "--schema", SCHEMA]) == 2
    assert json.loads((coord.root / "nodes.json").read_text())[3]["index"] == 3


class _Proc:
    def __init__(self, code):
        self.returncode, self.pid = code, 1

    def poll(self):
        return self.returncode


@pytest.mark.parametrize(
    "log, cause",
    [
        (OTHER_CA_LOG, "does not trust the SuperLink's certificate"),
        (UNREGISTERED_LOG, "not registered"),
    ],
)
def test_the_launcher_names_a_node_flower_stopped_instead_of_waiting(tmp_path, log, cause):
    # The loopback launcher's wait for its nodes ends at once on a node that exited, with
    # one line naming it and the cause; the twin (the node still running) keeps waiting.
    from fedpriv.server.launch import StepTimeout
    from fedpriv.server.local_federation import Federation, Node, NodeFailed

    fed = Federation(workdir=tmp_path, num_clients=3, wait=5.0)
    fed.superlink = _Proc(None)
    fed.online = lambda: 0
    (tmp_path / "node-1.log").write_text(log)
    fed.nodes = {1: Node(index=1, proc=_Proc(305), tracker=None)}
    with pytest.raises(NodeFailed, match=rf"^node 1: .*{cause}"):
        fed.wait_online(3, timeout=60.0)
    fed.nodes = {1: Node(index=1, proc=_Proc(None), tracker=None)}
    with pytest.raises(StepTimeout, match="0 of 3 SuperNodes online"):
        fed.wait_online(3, timeout=0.5)
