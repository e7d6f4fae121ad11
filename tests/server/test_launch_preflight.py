"""What the Flower launchers settle before any process starts, and how they wait and report.

K of a run on one CSV is the file's own (its client column), a ``num-clients`` that
contradicts it is refused; every file a node or the ServerApp would open is checked
first (one line naming the key, exit 2); every launcher wait scales with
``--timeout`` and K; a Ray that failed to start is named; without a terminal the
rounds print as a plain line about every tenth round. No Flower process is started
here (the launchers' process calls are replaced where a test reaches them).
"""

import io
import json
import logging
import re
import subprocess

import pytest
from fedpriv.server import deploy as deploy_mod
from fedpriv.server import simulate as simulate_mod
from fedpriv.server.cli import main as fedpriv
from fedpriv.server.cli_logs import quiet_flower
from fedpriv.server.launch import resolve_run, step_error, step_timeout
from fedpriv.server.local_federation import Federation
from fedpriv.server.preflight import check_data_file
from fedpriv.server.progress import RoundProgress, milestone
from fedpriv.server.simulate import ray_failure_line, ray_start_failure

from fedpriv.federation.settings import SettingError
from tests.data.test_csv_errors import HEADER, SCHEMA

ROUND = "[fedpriv] round %d/%d: 4/4 replies%s\n"


def _hospitals_csv(tmp_path, hospitals=("a", "b", "c", "d"), rows=24):
    """A CSV of the example schema held by ``hospitals`` (its client column)."""
    lines = [
        f"{i},{h},{30 + i % 50},{i % 9},{('emergency', 'elective')[i % 2]},"
        f"{('yes', 'no')[i % 3 == 0]},{('yes', 'no')[i % 4 < 2]}\n"
        for h in hospitals
        for i in range(rows)
    ]
    path = tmp_path / "hospitals.csv"
    path.write_text(HEADER + "".join(lines))
    return path


def _csv_job(csv, **kw):
    return {"csv": str(csv), "schema": SCHEMA, "max-records": 100, **kw}


# -- K from the file -------------------------------------------------------------------
def test_a_run_on_one_csv_starts_one_node_per_client_of_the_file(tmp_path):
    csv = _hospitals_csv(tmp_path)
    settings, config = resolve_run({}, _csv_job(csv))
    assert settings.num_clients == config["num-clients"] == 4  # not the default 5
    assert resolve_run({}, _csv_job(csv, **{"num-clients": 4}))[0].num_clients == 4
    # A launcher's own default K (the deployment demo's 3) yields to the file too.
    assert resolve_run({"num-clients": 3}, _csv_job(csv))[0].num_clients == 4


def test_a_num_clients_contradicting_the_file_is_refused_in_one_line(tmp_path):
    csv = _hospitals_csv(tmp_path)
    with pytest.raises(SettingError) as err:
        resolve_run({}, _csv_job(csv, **{"num-clients": 5}))
    text = str(err.value)
    assert text.startswith("num-clients must equal the 4 clients of csv ")
    assert "'hospital'" in text and text.endswith("got 5") and "\n" not in text


def test_a_file_of_one_client_is_refused_and_no_client_column_splits_iid(tmp_path):
    with pytest.raises(SettingError, match=r"names 1 client; a federation needs at least 2"):
        resolve_run({}, _csv_job(_hospitals_csv(tmp_path, hospitals=("a",))))
    iid = tmp_path / "iid.toml"
    iid.write_text(open(SCHEMA).read().replace('client_column = "hospital"', ""))
    job = {**_csv_job(_hospitals_csv(tmp_path)), "schema": str(iid), "num-clients": 3}
    assert resolve_run({}, job)[0].num_clients == 3  # the user's K, an IID split


def test_the_flower_command_refuses_a_contradicting_k_before_starting(tmp_path, capsys, caplog):
    csv = _hospitals_csv(tmp_path)
    out = tmp_path / "out"
    argv = ["run", "--flower", "--csv", str(csv), "--schema", SCHEMA, "--out", str(out)]
    with caplog.at_level(logging.INFO, logger="fedpriv"):
        code = fedpriv([*argv, "--set", "max-records=100", "--set", "num-clients=5"])
    assert code == 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("error: num-clients must equal the 4"), said
    assert capsys.readouterr().out == "" and not out.exists()  # nothing started, nothing written


def test_a_bundled_corpus_defaults_to_its_own_client_count():
    assert resolve_run({}, {"dataset": "heart"})[0].num_clients == 4  # as in process
    with pytest.raises(SettingError, match=r"num_clients must lie in \[4, 4\]"):
        resolve_run({}, {"dataset": "heart", "num-clients": 3})  # an explicit K is checked


# -- files checked first ----------------------------------------------------------------
def test_check_data_file_refuses_what_a_node_could_not_open(tmp_path, monkeypatch):
    good = _hospitals_csv(tmp_path)
    assert check_data_file(good, "--data") == good.resolve()
    (tmp_path / "folder").mkdir()
    (tmp_path / "book.csv").write_bytes(b"PK\x03\x04rest")
    cases = {
        tmp_path / "missing.csv": "file not found",
        tmp_path / "folder": "is a directory",
        tmp_path / "book.csv": "the file is a zip archive",
    }
    for path, why in cases.items():
        with pytest.raises(SettingError, match=f"^--data: {path}: {why}"):
            check_data_file(path, "--data")

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("fedpriv.data.table.open", refused, raising=False)
    with pytest.raises(SettingError, match=r"^eval-path: .*cannot be read \(Permission denied\)"):
        check_data_file(good, "eval-path")


def test_deploy_checks_every_file_before_starting_a_process(tmp_path, monkeypatch, caplog):
    started = []
    monkeypatch.setattr(deploy_mod, "Federation", lambda **kw: started.append(kw))
    good = _hospitals_csv(tmp_path)
    base = ["--set", f"schema={json.dumps(SCHEMA)}", "--set", "max-records=100"]
    gone = str(tmp_path / "gone.csv")
    two = ["--data", str(good)] * 2
    for argv, key in [
        (["--data", str(good), "--data", gone], "--data"),
        ([*two, "--eval-data", str(good), "--eval-data", gone], "--eval-data"),
        ([*two, "--set", f"eval-path={json.dumps(gone)}"], "eval-path"),
    ]:
        caplog.clear()
        assert deploy_mod.main([*argv, *base, "--out-dir", str(tmp_path / "o")]) == 2
        (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert line.startswith(f"error: {key}: ") and "file not found" in line, line
    assert started == []


def test_a_missing_csv_or_eval_path_is_refused_by_resolve_run(tmp_path):
    with pytest.raises(SettingError, match=r"^csv: .*gone\.csv: file not found"):
        resolve_run({}, _csv_job(tmp_path / "gone.csv"))
    with pytest.raises(SettingError, match=r"^eval-path: .*gone\.csv: file not found"):
        resolve_run({}, {"dataset": "heart", "eval-path": str(tmp_path / "gone.csv")})


# -- waits ------------------------------------------------------------------------------
def test_every_launcher_wait_follows_the_timeout_and_grows_with_k(tmp_path):
    assert step_timeout(1800, 3) == pytest.approx(165.0)  # the deployment's default
    assert step_timeout(1800, 8) == pytest.approx(240.0)  # 8 nodes: not 60 s
    assert step_timeout(3600, 5) == pytest.approx(195.0)  # the simulation's default
    assert step_timeout(7200, 5) == pytest.approx(315.0)  # a larger --timeout: longer waits
    assert step_timeout(100, 8) == 100.0  # never beyond the run's own limit
    for k in range(2, 20):
        assert step_timeout(1800, k + 1) > step_timeout(1800, k)
    fed = Federation(workdir=tmp_path, num_clients=8, insecure=True)
    assert fed.wait == step_timeout(1800, 8)


def test_deploy_gives_its_federation_the_scaled_wait(tmp_path, monkeypatch):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        raise RuntimeError("not started")

    monkeypatch.setattr(deploy_mod, "Federation", fake)
    good = _hospitals_csv(tmp_path)
    files = [good] * 6
    overrides = {"schema": SCHEMA, "max-records": 100, "out-dir": str(tmp_path)}
    with pytest.raises(RuntimeError, match="not started"):
        deploy_mod.deploy(overrides, data=files, timeout=3000, workdir=tmp_path / "w")
    assert seen["num_clients"] == 6 and seen["wait"] == pytest.approx(step_timeout(3000, 6))
    # Without --timeout the run's limit grows with its rounds: 1800 s + 75 × 120 s here.
    with pytest.raises(RuntimeError, match="not started"):
        deploy_mod.deploy(overrides, data=files, workdir=tmp_path / "w")
    assert seen["wait"] == pytest.approx(step_timeout(1800 + 75 * 120, 6))


def test_a_step_that_timed_out_says_how_long_it_had_and_what_to_raise():
    exc = subprocess.TimeoutExpired(["/x/bin/flwr", "supernode", "register", "k.pub"], 165.0)
    line = step_error(exc, 1800)
    assert line.startswith("`flwr supernode register` did not finish within 165 s")
    assert "raise --timeout" in line and "15 s per node" in line
    assert step_error(RuntimeError("other"), 1800) == "other"


def test_run_forwards_timeout_to_the_simulation_only(monkeypatch):
    import fedpriv.server.cli

    seen = []
    monkeypatch.setattr(
        fedpriv.server.cli, "quiet_flower", lambda e, argv, d, *, verbose: seen.append(argv) or 0
    )
    assert fedpriv(["run", "--flower", "--timeout", "7200", "--set", "rounds=2"]) == 0
    assert seen[0][seen[0].index("--timeout") + 1] == "7200.0"
    assert fedpriv(["run", "--timeout", "7200"]) == 2  # in process: a usage error


# -- Ray failing to start -------------------------------------------------------------------
#: The lines Flower 1.42's simulation logs when ``ray.init`` fails (abridged from a run
#: with $RAY_ADDRESS naming no cluster).
RAY_LOG = [
    "\x1b[91mERROR \x1b[0m:     An exception occured!! "
    "Failed to connect to Ray cluster at 10.0.0.2:9\n",
    "Traceback (most recent call last):\n",
    '  File "/v/site-packages/flwr/server/superlink/fleet/vce/backend/raybackend.py", '
    "line 119, in init_ray\n",
    "ConnectionError: Failed to connect to Ray cluster at 10.0.0.2:9\n",
    "\x1b[91mERROR \x1b[0m:     An exception occurred !! Simulation Runtime crashed.\n",
]  # fmt: skip
#: A ClientApp's error passes through the same backend, not through its start-up.
CLIENT_ERROR_LOG = [
    "\x1b[91mERROR \x1b[0m:     An exception was raised when processing a message by RayBackend\n",
    '  File "/v/site-packages/flwr/server/superlink/fleet/vce/backend/raybackend.py", '
    "line 182, in process_message\n",
]  # fmt: skip


def test_ray_start_failures_are_told_from_client_errors():
    assert ray_start_failure(RAY_LOG) == "Failed to connect to Ray cluster at 10.0.0.2:9"
    assert ray_start_failure(CLIENT_ERROR_LOG) is None
    assert ray_start_failure(RAY_LOG[2:3]) == ""  # the frame alone: failed, no reason given
    line = ray_failure_line("x")
    assert line.startswith("error: Ray, the simulation's engine, failed to start (x): ")
    assert "/dev/shm" in line and "--verbose" in line and "\n" not in line


def test_simulate_names_a_ray_that_failed_to_start_and_exits_1(tmp_path, monkeypatch, caplog):
    real_popen = subprocess.Popen

    def superlink(*a, **k):  # a stand-in process, stopped by PID as the SuperLink is
        return real_popen(["sleep", "30"], start_new_session=True)

    monkeypatch.setattr(simulate_mod.subprocess, "Popen", superlink)
    monkeypatch.setattr(simulate_mod, "wait_healthy", lambda *a, **k: None)
    monkeypatch.setattr(simulate_mod, "submit", lambda *a, **k: "7")
    monkeypatch.setattr(simulate_mod, "exit_code", lambda status, out: 1)

    def follow(*a, on_line, **k):
        for line in RAY_LOG:
            on_line(line)
        return "finished:failed", "An error was encountered. Ending simulation."

    monkeypatch.setattr(simulate_mod, "follow", follow)
    code, _ = simulate_mod.simulate({"dataset": "heart", "out-dir": str(tmp_path)}, quiet=True)
    assert code == 1
    last = [r.getMessage() for r in caplog.records][-1]
    assert last.startswith("error: Ray, the simulation's engine, failed to start (Failed to")
    monkeypatch.setattr(simulate_mod, "follow", lambda *a, on_line, **k: ("finished:failed", ""))
    caplog.clear()
    assert simulate_mod.simulate({"dataset": "heart", "out-dir": str(tmp_path)}, quiet=True)[0] == 1
    assert not any("Ray" in r.getMessage() for r in caplog.records)  # another failure: not Ray


# -- progress without a terminal ---------------------------------------------------------------
def test_without_a_terminal_a_plain_round_line_about_every_tenth_round():
    seen = []
    with RoundProgress(seen.append, bar=False, thin=True) as progress:
        progress.on_line("[fedpriv] 4 nodes connected\n")
        for r in range(1, 76):
            progress.on_line(ROUND % (r, 75, ", ε spent ≤ 1.0" if milestone(r, 75) else ""))
    rounds = [int(s.split()[2].split("/")[0]) for s in seen[1:]]
    assert seen[0] == "[fedpriv] 4 nodes connected\n"
    assert rounds == [*range(7, 71, 7), 75]  # 11 lines for 75 rounds, each with ε so far
    assert all("ε spent ≤" in s for s in seen[1:])


def test_the_flower_filter_shows_milestones_and_logs_every_round(tmp_path, capsys):
    lines = [ROUND % (r, 20, "") for r in range(1, 21)]

    def launcher(argv):
        print("".join(lines), end="")
        return 0

    assert quiet_flower(launcher, [], tmp_path, verbose=False) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [int(s.split()[2].split("/")[0]) for s in shown] == list(range(2, 21, 2))
    assert (tmp_path / "flower.log").read_text() == "".join(lines)  # every round kept


def test_an_in_process_run_without_a_terminal_prints_progress(capsys):
    assert fedpriv(["run", "--dataset", "heart", "--set", "rounds=20", "--set", "epsilon=2"]) == 0
    out = capsys.readouterr().out.splitlines()
    progress = [s for s in out if s.startswith("[fedpriv] round ")]
    assert [s.split()[2].split(",")[0] for s in progress] == [f"{r}/20" for r in range(0, 21, 2)]
    assert all("ε spent ≤" in s for s in progress[1:])
    assert out[-1].startswith("AUC ")  # the result stays the last line


def test_the_launchers_forward_every_round_line_unless_thin():
    seen = io.StringIO()
    with RoundProgress(seen.write, bar=False) as progress:  # the launchers: every line on
        for r in range(1, 21):
            progress.on_line(ROUND % (r, 20, ""))
    assert seen.getvalue().count("[fedpriv] round") == 20


@pytest.mark.processes
def test_a_flower_run_on_a_csv_runs_the_files_clients_and_reports_its_auc(tmp_path, capsys):
    """A real simulation: K from the file (4, not the default 5), and the AUC on the
    file's held-out split, not "AUC n/a"; without a terminal, plain progress lines."""
    csv = _hospitals_csv(tmp_path, rows=60)
    out = tmp_path / "out"
    argv = ["run", "--flower", "--csv", str(csv), "--schema", SCHEMA, "--out", str(out)]
    assert fedpriv([*argv, "--set", "max-records=100", "--set", "rounds=10"]) == 0
    shown = capsys.readouterr().out.splitlines()
    auc = float(re.match(r"AUC (\S+) \|", shown[-1]).group(1))
    latest = out / "latest"
    config = json.loads((latest / "config.json").read_text())
    metrics = json.loads((latest / "metrics.json").read_text())
    assert config["num-clients"] == 4 and metrics["evaluated"]
    assert auc == pytest.approx(metrics["auc"], abs=5e-5)
    rounds = [s for s in shown if s.startswith("[fedpriv] round ")]
    assert [s.split()[2].rstrip(":") for s in rounds] == [f"{r}/10" for r in range(1, 11)]
