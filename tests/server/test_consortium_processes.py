"""A consortium run with the commands of the how-to "Run a consortium", on loopback.

Every party has its own folder and they exchange only what the how-to says
(node.pub to the coordinator, ca.crt to each node, by copy). The faults of a
consortium's start-up are each one line naming the node and its cause, within
30 s (a CA the node does not trust, a key not on the allow-list, a schema copy
that is not the run's); the run itself is bit for bit the in-process fit under
an injected reproduction key. Starts real Flower processes: ``pytest -m processes``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.server.processes import free_port
from fedpriv.server.tls import write_tls

from fedpriv.artefact import load_model
from fedpriv.data.node import files_dataset, run_schema
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex

FEDPRIV = [sys.executable, "-m", "fedpriv.server.cli"]
SCHEMA = Path("experiments/schemas/example.toml").resolve()
HOSPITALS = Path("experiments/schemas/example_hospitals.csv").resolve()
ROWS = 120  # the declared public bound on rows per hospital
KEY = 11


def _limit(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by the load per core (machines are shared)."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def _env(home: Path, key: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_HOME=str(home))  # fmt: skip
    if key:
        env[KEY_ENV] = key_hex(KEY)
    return env


def _cli(args, cwd: Path, *, key=False, timeout=120.0, check=True) -> subprocess.CompletedProcess:
    cp = subprocess.run([*FEDPRIV, *map(str, args)], cwd=cwd, env=_env(cwd / ".flwr", key),
                        capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if check and cp.returncode != 0:
        raise AssertionError(f"fedpriv {' '.join(map(str, args))}: {cp.stdout}{cp.stderr}")
    return cp


def _hospital_files(root: Path) -> list[Path]:
    import pandas as pd

    rows = pd.read_csv(HOSPITALS, dtype=str, keep_default_na=False)
    out = []
    for i, (_, part) in enumerate(sorted(rows.groupby("hospital"))):
        home = root / f"hospital-{i}"
        home.mkdir(parents=True)
        part.to_csv(home / "patients.csv", index=False)
        (home / "policy.toml").write_text("[policy]\nmax-epsilon = 2.0\nmax-delta = 1e-5\n")
        shutil.copy(SCHEMA, home / "schema.toml")  # its own copy of the public schema
        out.append(home)
    return out


class Consortium:
    """The parties' folders and the nodes started; stops what it started."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.coord = root / "coordinator-machine"
        self.coord.mkdir()
        self.homes = _hospital_files(root)
        self.nodes: dict[int, subprocess.Popen] = {}

    def node_args(self, i: int, **over) -> list:
        h = self.homes[i]
        args = {"--superlink": f"127.0.0.1:{self.port}", "--ca": h / "ca.crt", "--key": h / "key",
                "--data": h / "patients.csv", "--schema": h / "schema.toml",
                "--policy": h / "policy.toml", "--state": h / "state", "--index": i,
                "--nodes": len(self.homes), **over}  # fmt: skip
        return ["node", "start", *[x for kv in args.items() for x in kv]]

    def start_node(self, i: int, *, key=False) -> None:
        h = self.homes[i]
        extra = ["--allow-reproduction-key"] if key else []
        self.nodes[i] = subprocess.Popen(
            [*FEDPRIV, *map(str, self.node_args(i)), *extra], cwd=h, env=_env(h / ".flwr", key),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def stop_nodes(self) -> None:
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.nodes.values():
            proc.wait(timeout=60)
        self.nodes.clear()


@pytest.mark.processes
def test_a_consortium_as_the_how_to_runs_it(tmp_path):
    c = Consortium(tmp_path)
    co = c.coord
    # 1. The coordinator makes its CA; each hospital its key; keys and CA are exchanged.
    _cli(["coordinator", "init", "--host", "127.0.0.1", "--port", c.port], co)
    for i, h in enumerate(c.homes):
        printed = _cli(["node", "keygen", "--out", "key", "--name", h.name], h).stdout
        shutil.copy(h / "key" / "node.pub", co / f"{h.name}.pub")  # public half only
        reg = _cli(["coordinator", "register", f"{h.name}.pub", "--name", h.name], co).stdout
        assert f"as node {i}" in reg and printed.split("fingerprint ")[1].split()[0] in reg
        shutil.copy(co / "coordinator" / "tls" / "ca.crt", h / "ca.crt")
    shutil.copy(SCHEMA, co / "schema.toml")
    _cli(["coordinator", "start", "--detach", "--bind", "127.0.0.1"], co, key=True)  # replay
    try:
        _faults_are_one_line_each(c, tmp_path)
        _a_node_whose_schema_differs_fails_the_run_naming_it(c)
        _the_run_is_the_in_process_fit_bit_for_bit(c)
    finally:
        c.stop_nodes()
        _cli(["coordinator", "stop"], co, check=False)
    # Each node's ledger and audit log are in its own folder, none in the coordinator's.
    for h in c.homes:
        assert _cli(["node", "status", "--state", "state"], h).stdout.count("run ") >= 1
    assert not list(co.rglob("ledger*.json")) and not list(co.rglob("audit*"))


def _faults_are_one_line_each(c: Consortium, tmp_path: Path) -> None:
    h = c.homes[0]
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    _cli(["node", "keygen", "--out", stranger / "key"], stranger)
    other_ca = write_tls(tmp_path / "other-ca").ca_cert
    cases = {
        "not registered": c.node_args(0, **{"--key": stranger / "key"}),
        "does not trust the SuperLink's certificate": c.node_args(0, **{"--ca": other_ca}),
    }
    for cause, args in cases.items():
        # Within 30 s on an idle machine (two Python start-ups and one TLS handshake), the
        # limit stretched by the load per core, never the node's 600 s of retries.
        cp = _cli(args, h, check=False, timeout=_limit(30.0))
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 2, cp.stderr
        assert len(lines) == 1 and lines[0].startswith("[fedpriv] node 0: ") and cause in lines[0]


def _a_node_whose_schema_differs_fails_the_run_naming_it(c: Consortium) -> None:
    good = (c.homes[2] / "schema.toml").read_text()
    (c.homes[2] / "schema.toml").write_text(good.replace("[target]", "# edited\n[target]", 1))
    for i in range(3):
        c.start_node(i)
    sub = _cli(["coordinator", "submit", "--schema", "schema.toml", "--max-records", ROWS,
                "--set", "rounds=2", "--set", "depth=3"], c.coord)  # fmt: skip
    run_id = sub.stdout.split("submitted run ")[1].split(":")[0]
    cp = _cli(["coordinator", "follow", run_id], c.coord, check=False, timeout=600)
    assert cp.returncode == 1
    assert "DataError(code='schema_mismatch', node=2)" in cp.stdout + cp.stderr
    c.stop_nodes()
    (c.homes[2] / "schema.toml").write_text(good)


def _the_run_is_the_in_process_fit_bit_for_bit(c: Consortium) -> None:
    for i in range(3):
        c.start_node(i, key=True)
    sub = _cli(["coordinator", "submit", "--schema", "schema.toml", "--max-records", ROWS,
                "--epsilon", 1.0, "--set", "rounds=3", "--set", "depth=3", "--set", "seed=5"],
               c.coord, key=True)  # fmt: skip
    run_id = sub.stdout.split("submitted run ")[1].split(":")[0]
    cp = _cli(["coordinator", "follow", run_id], c.coord, timeout=900)
    assert "completed: 3 of 3 rounds released" in cp.stdout
    out = c.coord / "coordinator" / "results" / run_id
    saved = load_model(out / "model.fedpriv.npz").model.to_arrays()
    files = [h / "patients.csv" for h in c.homes]
    ref = DPBoostingClassifier(
        rounds=3, depth=3, epsilon=1.0, seed=5, secret_key=key_for(KEY), max_records=ROWS
    ).fit(files_dataset(files, run_schema(str(SCHEMA), "")))
    for name, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[name], value, err_msg=name)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["epsilon"] == pytest.approx(ref.epsilon_spent_) and privacy["epsilon"] <= 1.0
