"""Every Flower test must leave no Flower process behind.

Each test tags the processes it starts: a per-test token in the environment,
which every launcher passes down (``fedpriv.server.launch.flwr_env`` copies
``os.environ``) and every child inherits. Only processes carrying this test's
token count, so Flower runs of other pytest workers (``-n 2``) or of other
users of the machine are never mistaken for leftovers.
"""

import os
import uuid
from pathlib import Path

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
TOKEN_VAR = "FEDPRIV_TEST_TOKEN"


def flower_processes(token: str) -> list[str]:
    """Running Flower processes started under ``token``. Zombies are left out:
    they run nothing and hold nothing but a PID until their parent reaps them."""
    found = []
    tag = f"{TOKEN_VAR}={token}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not any(k in cmdline for k in FLOWER_PROCESSES):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z" or tag not in (proc / "environ").read_bytes().split(b"\0"):
                continue
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # gone meanwhile, or not ours to read
        found.append(f"{proc.name} {cmdline.strip()}")
    return found


@pytest.fixture(autouse=True)
def _no_flower_leftovers(monkeypatch):
    token = uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_VAR, token)
    yield
    assert flower_processes(token) == [], "Flower processes left behind"
    assert os.environ[TOKEN_VAR] == token
