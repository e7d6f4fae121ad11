"""Every Flower test must leave no Flower process behind."""

import subprocess

import pytest

FLOWER_PROCESSES = (
    "flower-superlink",
    "flower-supernode",
    "flower-superexec",
    "flwr-simulation",
    "flwr-serverapp",
    "flwr-clientapp",
    "raylet",
    "gcs_server",
)


def flower_processes() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if any(k in line for k in FLOWER_PROCESSES)]


@pytest.fixture(autouse=True)
def _no_flower_leftovers():
    before = flower_processes()
    yield
    assert flower_processes() == before
