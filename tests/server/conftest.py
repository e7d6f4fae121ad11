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
    """Running Flower processes. Zombies are left out: they run nothing and hold
    nothing but a PID until whoever inherited them (here PID 1) reaps them."""
    ps = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [
        line
        for line in ps.splitlines()[1:]
        if any(k in line for k in FLOWER_PROCESSES) and not line.split()[1].startswith("Z")
    ]


@pytest.fixture(autouse=True)
def _no_flower_leftovers():
    before = flower_processes()
    yield
    assert flower_processes() == before
