"""docker-compose.yml describes the federation the loopback launcher runs.

No Docker engine here: the file is parsed and each service's command,
environment, ports and mounts are checked against ``fedpriv.server.deploy``'s own
command builders and defaults.
"""

from pathlib import Path

import pytest
import yaml
from fedpriv.server.deploy import SMALL_JOB, superlink_command, supernode_command
from fedpriv.server.tls import TlsFiles

from fedpriv.data.node import declared_max_records

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
K = SMALL_JOB["num-clients"]
CERTS = Path("/certs")
NODE_FILE = "/data/hospital.csv"
FLOWER_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def test_one_superlink_and_one_supernode_per_client():
    nodes = sorted(s for s in SERVICES if s.startswith("supernode-"))
    assert nodes == [f"supernode-{i}" for i in range(K)]
    assert {"certs", "superlink", "register", "submit"} <= set(SERVICES)


def test_superlink_runs_the_launchers_command_with_tls_and_node_auth():
    tls = TlsFiles(CERTS / "ca.crt", CERTS / "server.pem", CERTS / "server.key")
    svc = SERVICES["superlink"]
    assert svc["command"] == superlink_command(host="0.0.0.0", port=9093, tls=tls)
    assert "--insecure" not in svc["command"]
    assert svc["ports"] == ["9093:9093"]
    assert "certs:/certs:ro" in svc["volumes"]
    # The ServerApp runs here: it holds the public evaluation file, no private row.
    assert not any("hospital" in v or "shared/data" in v for v in svc["volumes"])


@pytest.mark.parametrize("i", range(K))
def test_each_supernode_runs_the_launchers_command_with_its_own_key(i):
    svc = SERVICES[f"supernode-{i}"]
    expected = supernode_command(
        index=i,
        num_clients=K,
        superlink="superlink:9093",
        host="0.0.0.0",
        port=9094,
        ca_cert=CERTS / "ca.crt",
        auth_key=CERTS / "keys" / f"node-{i}",
        data_path=NODE_FILE,
    )
    assert svc["command"] == expected
    assert f'partition-id={i} num-partitions={K} data-path="{NODE_FILE}"' in svc["command"]
    # Its own file only: no corpus, no other hospital's file.
    assert sorted(svc["volumes"]) == sorted(
        ["certs:/certs:ro", f"./demo-data/hospital{i}.csv:{NODE_FILE}:ro"]
    )
    assert "FEDPRIV_DATA_DIR" not in svc["environment"]
    assert svc["depends_on"]["register"]["condition"] == "service_completed_successfully"


def test_every_flower_service_has_telemetry_updates_and_installs_off():
    for name in ("superlink", "register", "submit", *(f"supernode-{i}" for i in range(K))):
        env = SERVICES[name]["environment"]
        assert {k: env[k] for k in FLOWER_ENV} == FLOWER_ENV, name


def test_certificates_and_registration_match_the_nodes():
    assert SERVICES["certs"]["command"] == [
        "python",
        "-m",
        "fedpriv.server.tls",
        "/certs",
        "--nodes",
        str(K),
        "--host",
        "superlink",
    ]
    script = SERVICES["register"]["command"][-1]
    assert f"for i in {' '.join(str(i) for i in range(K))};" in script
    assert "flwr supernode register /certs/keys/node-$$i.pub fedpriv-deploy" in script
    cli = (ROOT / "compose" / "config.toml").read_text()
    assert 'address = "superlink:9093"' in cli and 'root-certificates = "/certs/ca.crt"' in cli


def test_submit_runs_the_launchers_small_job():
    cmd = SERVICES["submit"]["command"]
    assert cmd[:4] == ["flwr", "run", ".", "fedpriv-deploy"]
    pairs = dict(item.split("=", 1) for item in cmd[-1].split())
    expected = {k: (f'"{v}"' if isinstance(v, str) else str(v)) for k, v in SMALL_JOB.items()}
    assert {k: pairs[k] for k in expected} == expected
    # The declared public bound: BRFSS's largest partition, as the launcher fills it in.
    bound = declared_max_records(SMALL_JOB["dataset"], K, 0)
    assert pairs["max-records"] == str(bound)
    assert pairs["eval-path"] == '"/eval/test.csv"'
