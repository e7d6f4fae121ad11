"""docker-compose.yml is a consortium run with the consortium commands, each hospital
alone with its own folder.

No Docker engine here: the file is parsed, and each service's command is parsed by
the ``fedpriv`` command it runs (:mod:`fedpriv.server.cli_consortium`), so an option
the CLI does not have, or a value it refuses, fails here; the mounts are checked
against who may hold what. ``tests/containers/run.sh`` runs the file for real.
"""

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml
from fedpriv.server.cli_consortium import coordinator, node

from fedpriv.data.node import declared_max_records
from fedpriv.federation.presets import DEPLOY_DEMO, get_preset
from fedpriv.privacy.node_policy import load_policy_file

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
K = 3
DEPLOY = "${FEDPRIV_DEPLOY:-./deploy}"
HOSPITAL = [f"{DEPLOY}/hospital{i}:/node" for i in range(K)]
COORDINATOR = f"{DEPLOY}/coordinator:/coordinator"
FLOWER_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def parse(command: click.Command, args: list[str]) -> dict:
    """``args`` as ``command`` parses them (a refused option or value raises)."""
    with command.make_context(command.name, list(args), resilient_parsing=False) as ctx:
        return dict(ctx.params)


def script(name: str) -> str:
    """A ``sh -c`` service's script, with compose's ``$$`` unescaped."""
    cmd = SERVICES[name]["command"]
    assert cmd[:2] == ["sh", "-c"], name
    return cmd[2].replace("$$", "$")


def fedpriv_calls(text: str, *words: str) -> list[list[str]]:
    """The arguments of every ``fedpriv WORDS ...`` call in a shell script (up to the
    next ``;``, ``&&``, ``||``, ``)`` or ``}``)."""
    head = r"fedpriv\s+" + r"\s+".join(words)
    return [shlex.split(m) for m in re.findall(head + r"\s+([^;&|)}]*)", text)]


def test_one_coordinator_and_one_node_per_hospital():
    assert set(SERVICES) == {
        "coordinator-setup", "coordinator", "submit",
        *(f"keygen-{i}" for i in range(K)), *(f"hospital-{i}" for i in range(K)),
    }  # fmt: skip
    assert set(COMPOSE["volumes"]) == {"exchange"}


def test_every_service_runs_the_image_with_telemetry_updates_and_installs_off():
    for name, svc in SERVICES.items():
        assert svc["image"] == "${FEDPRIV_IMAGE:-fedpriv:latest}", name
        assert svc["environment"] == FLOWER_ENV, name
        assert svc["init"] is True, name  # signals reach fedpriv, orphans are reaped


@pytest.mark.parametrize("i", range(K))
def test_each_hospital_mounts_only_its_own_folder_and_the_public_exchange(i):
    assert sorted(SERVICES[f"hospital-{i}"]["volumes"]) == sorted(
        [HOSPITAL[i], "exchange:/exchange:ro"]
    )
    assert sorted(SERVICES[f"keygen-{i}"]["volumes"]) == sorted([HOSPITAL[i], "exchange:/exchange"])
    folder = HOSPITAL[i].rsplit(":", 1)[0]
    for name, svc in SERVICES.items():  # nobody else mounts it
        if name not in (f"hospital-{i}", f"keygen-{i}"):
            assert not any(v.startswith(folder) for v in svc["volumes"]), name


def test_the_coordinator_mounts_its_own_folder_and_public_material_only():
    assert SERVICES["coordinator"]["volumes"] == [COORDINATOR]
    assert sorted(SERVICES["coordinator-setup"]["volumes"]) == sorted(
        [COORDINATOR, "exchange:/exchange"]
    )
    assert SERVICES["submit"]["volumes"] == [COORDINATOR]


@pytest.mark.parametrize("i", range(K))
def test_keygen_keeps_the_private_key_and_publishes_node_pub(i):
    text = script(f"keygen-{i}")
    (args,) = fedpriv_calls(text, "node", "keygen")
    params = parse(node.commands["keygen"], args)
    assert params == {"out": Path("/node/key"), "name": f"hospital{i}"}
    # The private key stays in the hospital's folder; only node.pub reaches the exchange.
    assert f"cp /node/key/node.pub /exchange/hospital{i}.pub" in text
    assert "node.key /exchange" not in text and "/exchange/node.key" not in text


def test_setup_makes_the_ca_for_the_service_name_and_registers_the_nodes_in_order():
    text = script("coordinator-setup")
    (init,) = fedpriv_calls(text, "coordinator", "init")
    assert parse(coordinator.commands["init"], init) == {
        "hosts": ("coordinator",), "port": 9093, "root": Path("/coordinator"),
    }  # fmt: skip
    assert "cp /coordinator/tls/ca.crt /exchange/ca.crt" in text
    (register,) = fedpriv_calls(text, "coordinator", "register")
    params = parse(coordinator.commands["register"], register)
    assert params["public_key"] == Path("/exchange/hospital$i.pub")
    assert params["name"] == "hospital$i" and params["root"] == Path("/coordinator")
    # Registered in order: hospital i is node i (its --index).
    assert f"for i in {' '.join(map(str, range(K)))}; do" in text
    for i in range(K):
        assert SERVICES["coordinator-setup"]["depends_on"][f"keygen-{i}"] == {
            "condition": "service_completed_successfully"
        }


def test_the_coordinator_runs_the_superlink_and_is_healthy_once_keys_are_known():
    svc = SERVICES["coordinator"]
    assert svc["command"][:3] == ["fedpriv", "coordinator", "start"]
    params = parse(coordinator.commands["start"], svc["command"][3:])
    assert params["root"] == Path("/coordinator") and params["bind"] == "0.0.0.0"
    assert params["detach"] is False  # foreground: the container stops it with SIGTERM
    check = svc["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"]
    compile(check[3], "healthcheck", "exec")
    assert "'supernode', 'ls'" in check[3] and "/coordinator/nodes.json" in check[3]
    assert svc["depends_on"] == {
        "coordinator-setup": {"condition": "service_completed_successfully"}
    }
    assert "ports" not in svc  # the nodes dial it on the compose network


@pytest.mark.parametrize("i", range(K))
def test_each_hospital_runs_fedpriv_node_start_with_its_own_files(i):
    svc = SERVICES[f"hospital-{i}"]
    assert svc["command"][:3] == ["fedpriv", "node", "start"]
    params = parse(node.commands["start"], svc["command"][3:])
    assert params == {
        "superlink": "coordinator:9093", "ca": Path("/exchange/ca.crt"), "key": Path("/node/key"),
        "data": Path("/node/patients.csv"), "schema": None, "policy": Path("/node/policy.toml"),
        "state": Path("/node/state"), "index": i, "nodes": K, "eval_data": None,
        "allow_reproduction_key": False,
    }  # fmt: skip
    assert svc["depends_on"] == {"coordinator": {"condition": "service_healthy"}}


def test_submit_runs_the_small_demo_on_the_coordinators_machine_and_follows_it():
    svc = SERVICES["submit"]
    # The coordinator's commands reach its SuperLink on loopback and check its PID.
    assert svc["network_mode"] == "service:coordinator"
    assert svc["pid"] == "service:coordinator"
    text = script("submit")
    (args,) = fedpriv_calls(text, "coordinator", "submit")
    params = parse(coordinator.commands["submit"], args)
    assert params["preset"] == DEPLOY_DEMO and params["root"] == Path("/coordinator")
    preset = get_preset(DEPLOY_DEMO).values
    assert (preset["num-clients"], preset["rounds"], preset["depth"]) == (K, 5, 4)
    # The declared public bound: BRFSS's largest partition of K.
    assert params["max_records"] == declared_max_records("brfss", K, 0) == 12800
    assert set(params["sets"]) == {"dataset=brfss", "eval-path=/coordinator/test.csv"}
    assert "3 of 3 registered node(s) online" in text  # submitted once every node is online
    (follow,) = fedpriv_calls(text, "coordinator", "follow")
    assert parse(coordinator.commands["follow"], follow)["root"] == Path("/coordinator")
    assert text.rstrip().endswith('fedpriv coordinator follow "$run" --dir /coordinator')
    for i in range(K):
        assert svc["depends_on"][f"hospital-{i}"] == {"condition": "service_started"}


def test_demo_setup_writes_the_files_the_nodes_read_and_a_policy_they_accept(tmp_path):
    text = (ROOT / "compose" / "demo-setup.sh").read_text()
    assert '"$DIR/hospital$i/patients.csv"' in text and '"$DIR/coordinator/test.csv"' in text
    (policy,) = re.findall(r"<<POLICY\n(.*?)POLICY\n", text, flags=re.S)
    path = tmp_path / "policy.toml"
    path.write_text(policy.replace("$i", "0"))
    rules = load_policy_file(path)
    # The run's ε (the preset's) fits the node's per-run limit.
    assert rules.max_epsilon >= get_preset(DEPLOY_DEMO).values["epsilon"]
    assert rules.methods == ("boosting",)


def test_the_dockerfile_installs_every_package_folder_from_any_base_and_wheelhouse():
    import tomllib

    text = (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {"fedpriv", *project["tool"]["setuptools"]["package-dir"].values()}
    copied = set(re.findall(r"^COPY (\S+) /src/\1$", text, flags=re.M))
    assert copied == folders  # a folder left out would be missing from the image
    assert "ARG BASE_IMAGE=python:3.11-slim" in text and "ARG WHEELHOUSE=\n" in text
    assert "pip install --no-index --find-links /deps" in text  # offline with a wheelhouse
    assert '--index-url "${TORCH_INDEX}"' in text  # else torch's CPU build
    assert "pip install --no-deps --no-build-isolation /src" in text and " -e " not in text
    env = " ".join(re.findall(r"^ENV (.*(?:\n\s+.*)*)", text, flags=re.M))
    for key, value in {**FLOWER_ENV, "FLWR_HOME": "/flwr"}.items():
        assert f"{key}={value}" in env, key
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    assert {".git", ".venv", "results", "deploy"} <= ignored and "wheelhouse" not in ignored
