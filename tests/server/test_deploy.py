"""A real federation on loopback: SuperLink + SuperNodes over TLS with node authentication.

Each test starts Flower 1.42's deployment engine through ``fedpriv.server.deploy``
(one process per SuperLink, SuperNode, SuperExec and ClientApp); a round
takes several seconds (SuperNodes poll every 3 s and start one ClientApp
process per message), so configs are tiny. Faults are injected on events
(a message reaching a node, the ServerApp process starting), never after a
fixed sleep, so a slow machine changes when they happen, not what they hit;
the round timeout is long (a fault never waits for it) except in the crashed
node's run, whose dead node's round must time out (Flower declares a
crashed node offline only 40-60 s after it died: a fixed 30 s heartbeat).
Start-ups (SuperLink, registration, nodes) are much of a test's time, so the
faults share one federation, in turn: each leaves it usable for the next, and
the lost SuperLink comes last.
"""

import gzip
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fedpriv.server.cli import main as fedpriv
from fedpriv.server.deploy import Federation
from fedpriv.server.resolve import resolve
from fedpriv.server.tls import write_node_key

from fedpriv.data import data_dir
from fedpriv.privacy.node_approval import list_pending
from fedpriv.privacy.node_audit import AuditLog, verify_audit_log
from fedpriv.privacy.node_budget import STATE_DIR, read_ledger
from tests.server.test_report_browser import CHROMIUM, chromium, console_errors

SMALL = {"num-clients": 3, "depth": 3, "epsilon": 2.0, "seed": 3, "round-timeout": 300.0}


def _received(fed: Federation, index: int, kind: str) -> int:
    """How many ``query.<kind>`` messages SuperNode ``index`` logged receiving."""
    try:
        text = (fed.workdir / f"node-{index}.log").read_text()
    except OSError:
        return 0
    return text.count(f"Receiving: query.{kind} message")


def _when(condition: Callable[[], bool], action: Callable[[], None]) -> threading.Event:
    """Run ``action`` in a thread as soon as ``condition()`` holds (polled every 50 ms).

    Returns the event that ends the wait (set it once the run is over)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            if condition():
                action()
                return

    threading.Thread(target=watch, daemon=True).start()
    return done


def _results(out):
    return {
        name: json.loads((out / f"{name}.json").read_text())
        for name in ("privacy", "communication", "metrics", "rounds")
    }


def _bad_corpus_copy(root: Path) -> Path:
    """A corpora folder whose BRFSS file has a non-numeric BMI on line 3 (the other
    corpora linked to the real ones)."""
    for entry in data_dir().iterdir():
        if entry.name != "brfss2015_diabetes":
            (root / entry.name).parent.mkdir(parents=True, exist_ok=True)
            (root / entry.name).symlink_to(entry)
    src = data_dir() / "brfss2015_diabetes" / "diabetes_012_health_indicators_BRFSS2015.csv.gz"
    with gzip.open(src, "rt") as fh:
        lines = [next(fh).rstrip("\n") for _ in range(50)]
    cells = lines[2].split(",")
    cells[4] = "forty"
    lines[2] = ",".join(cells)
    (root / "brfss2015_diabetes").mkdir()
    with gzip.open(root / "brfss2015_diabetes" / src.name, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    return root


def _repair(root: Path) -> None:
    """Link the real BRFSS file back into :func:`_bad_corpus_copy`'s folder."""
    bad = next((root / "brfss2015_diabetes").iterdir())
    bad.unlink()
    bad.symlink_to(data_dir() / "brfss2015_diabetes" / bad.name)


def _run(fed: Federation, overrides: dict, **kw) -> int:
    """One run on ``fed``, resolved and followed as ``deploy`` does; its exit code."""
    run = resolve(overrides, preset="deploy-demo")
    settings, config = run.settings, run.run_config
    Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    return fed.run(settings, config, timeout=900, quiet=True, **kw)


def _strangers_are_refused_and_never_get_a_message(fed: Federation, tmp_path: Path) -> None:
    stranger = write_node_key(tmp_path / "strangers", "stranger")
    refused = {
        3: fed.start_node(3, key=stranger.private),  # valid TLS, key not on the allow-list
        4: fed.start_node(4, key=fed.keys[0].private, trust_ca=False),  # registered, no CA
    }
    deadline = time.monotonic() + 60
    while any(n.proc.poll() is None for n in refused.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert all(n.proc.poll() not in (None, 0) for n in refused.values())
    assert fed.online() == 0
    logs = {i: (fed.workdir / f"node-{i}.log").read_text() for i in refused}
    assert all("Exit Code: 305" in text for text in logs.values())  # could not connect
    assert "2004" in logs[3]  # activation refused: no SuperNode with that public key
    assert "CERTIFICATE_VERIFY_FAILED" in logs[4]
    for text in logs.values():
        assert "Received" not in text  # no message ever reached them
    for i in refused:
        fed.stop_node(i)


def _bad_local_data_fails_the_run_with_its_error_logged(fed: Federation, out: Path) -> None:
    seen = []
    code = _run(
        fed, {**SMALL, "rounds": 2, "out-dir": str(out)}, hook=lambda _, line: seen.append(line)
    )
    assert code == 1
    log = "".join(seen)
    # The server learns the node's error code and column, never the raw cell.
    assert "client error from node" in log and "not_a_number" in log and "BMI" in log
    assert "forty" not in log
    assert "key exchange: 2 of 3 nodes answered; DataError(code='not_a_number', column=" in log


def _killed_supernode_is_recovered_and_the_ledger_matches_the_releases(
    fed: Federation, out: Path
) -> None:
    killed, watches = [], []
    before = _received(fed, 2, "fedpriv")  # node 2's log holds the earlier runs too

    def kill_node_2(fed):
        killed.append(time.monotonic())
        fed.stop_node(2, kill=True)

    def kill_node_2_as_round_1_reaches_it(fed):
        # Node 2 took part in the key exchange (its keys are in the pinned key book,
        # its pair masks in the survivors' sums) and is starting the ClientApp for
        # round 1's query, which takes seconds: its round-1 reply never leaves. One
        # round is enough: the survivors' unmask must reveal their masks with it.
        watches.append(
            _when(lambda: _received(fed, 2, "fedpriv") > before, lambda: kill_node_2(fed))
        )

    code = _run(
        # The dead node's round-1 query waits out the round timeout: a short one. The
        # noise is the nodes' own (shares sized for 3 − 1 survivors: exactly the target).
        fed,
        {
            **SMALL,
            "rounds": 1,
            "round-timeout": 20.0,
            "out-dir": str(out),
            "noise": "distributed",
            "tolerated-dropouts": 1,
        },
        on_submit=kill_node_2_as_round_1_reaches_it,
    )
    for watch in watches:  # no thread outlives the test
        watch.set()
    assert code == 0 and killed
    r = _results(out / fed.run_id)
    comm = r["communication"]
    assert comm["dropout_recoveries"] == 1  # survivors revealed their masks with the dead node
    assert comm["rounds"] == 1 and comm["rounds_aborted"] == 0
    assert r["privacy"]["n_releases"] == 1  # the recovered round was released and charged
    assert r["privacy"]["epsilon"] <= 2.0 and r["privacy"]["noise"] == "distributed"
    assert r["rounds"]["1"]["replies"] == 2 and r["rounds"]["1"]["asked"] == 3
    # Each node's own ledger (node-config policy, state-dir) admitted the plan and agrees
    # with the server's: two survivors carry exactly the planned noise, so the same ε.
    for i in range(3):
        (run,) = (v for k, v in read_ledger(fed.node_config[i][STATE_DIR])["runs"].items()
                  if k == fed.run_id)  # fmt: skip
        assert abs(run["epsilon"] - r["privacy"]["epsilon"]) <= 1e-9 * run["epsilon"]
        answered = run["stages"]["noise"]["answered"]
        assert answered == [0] if i < 2 else set(answered) <= {0}  # node 2 died answering


def _killed_superlink_makes_the_launcher_exit_non_zero_quickly(fed: Federation, out: Path) -> None:
    stopped, watches = [], []
    before = _received(fed, 0, "keys")  # node 0's log holds the earlier runs too

    def kill_superlink(fed):
        stopped.append(time.monotonic())
        fed.superlink.kill()

    def kill_superlink_in_the_key_exchange(fed):
        # Killed as the key exchange reaches node 0, while the ServerApp, the
        # SuperExecs and the first ClientApps run: the launcher must notice and
        # leave none of them behind (a later kill would only add rounds to wait for).
        watches.append(
            _when(lambda: _received(fed, 0, "keys") > before, lambda: kill_superlink(fed))
        )

    code = _run(
        # Two nodes reach the key exchange whether or not the crashed node 2 is still
        # listed online (Flower drops a dead node only 40-60 s after it died).
        fed,
        {**SMALL, "num-clients": 2, "rounds": 2, "out-dir": str(out)},
        on_submit=kill_superlink_in_the_key_exchange,
    )
    for watch in watches:  # no thread outlives the test
        watch.set()
    assert stopped and code == 2
    assert fed.stop() == []  # as deploy leaves its federation: every process stopped
    assert time.monotonic() - stopped[0] < 60  # detected and cleaned up within a minute


class Approver:
    """Node 0's operator: approves each plan it is asked, with ``fedpriv node approve``,
    while ``on`` (a thread polling the node's pending plans every 50 ms)."""

    def __init__(self, state: Path) -> None:
        self.state, self.on, self.approved = state, threading.Event(), []
        self.done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self.done.wait(0.05):
            if not self.on.is_set():
                continue
            for plan in list_pending(self.state):
                h = plan["plan_hash"]
                if (
                    h not in self.approved
                    and fedpriv(["node", "approve", h, "--state", str(self.state)]) == 0
                ):
                    self.approved.append(h)


def _policies(root: Path, *, timeout: float) -> dict[int, dict[str, object]]:
    """Each hospital's policy file and state directory; node 0's asks for approval."""
    config = {}
    for i in range(3):
        state, policy = root / f"node-{i}", root / f"node-{i}.toml"
        state.mkdir(parents=True, exist_ok=True)
        extra = f"require-approval = true\napproval-timeout = {timeout}\n" if i == 0 else ""
        policy.write_text(f"[policy]\nmax-epsilon = 2.0\n{extra}")
        config[i] = {"policy-file": str(policy.resolve()), STATE_DIR: str(state.resolve())}
    return config


def _an_unapproved_plan_is_refused_and_nothing_is_read(
    fed: Federation, approver: Approver, out: Path
) -> None:
    approver.on.clear()
    _policies(Path(fed.node_config[0][STATE_DIR]).parent, timeout=5)  # node 0 waits 5 s
    seen = []
    code = _run(
        fed, {**SMALL, "rounds": 2, "out-dir": str(out)}, hook=lambda _, line: seen.append(line)
    )
    assert code == 1
    log = "".join(seen)
    # The coordinator learns the refusal's code only.
    assert "not_approved" in log and "key exchange: 2 of 3 nodes answered" in log
    last = AuditLog(fed.node_config[0][STATE_DIR]).entries()[-1]
    assert last["kind"] == "plan-refused" and last["reason"] == "not approved"
    assert fed.run_id not in read_ledger(fed.node_config[0][STATE_DIR])["runs"]
    _policies(Path(fed.node_config[0][STATE_DIR]).parent, timeout=120)
    approver.on.set()


@pytest.mark.processes
def test_one_federation_through_four_faults(tmp_path):
    # One SuperLink and its three authenticated SuperNodes serve the faults in turn
    # (each once paid its own start-up: SuperLink, registration, nodes): strangers
    # are refused before any node joins; hospital 1's local copy of the corpus has a
    # non-numeric BMI on line 3, which fails a run at its key exchange; with the file
    # repaired, hospital 0's operator leaves one plan unapproved, which its node refuses;
    # node 2 crashes in the next run, which recovers; the SuperLink is killed in the last
    # run's key exchange.
    bad = _bad_corpus_copy(tmp_path / "data-node-1")
    node_1 = {"FEDPRIV_DATA_DIR": str(bad), "FEDPRIV_CACHE_DIR": str(tmp_path / "c1")}
    # Every hospital runs under its own policy file; node 0's operator approves each plan
    # (the approver), but for one run that it leaves unapproved.
    policies = _policies(tmp_path / "nodes", timeout=120)
    approver = Approver(Path(policies[0][STATE_DIR]))
    approver.on.set()
    with Federation(workdir=tmp_path / "fed", num_clients=3, node_config=policies) as fed:
        fed.start_superlink()  # and registers the three nodes' keys
        _strangers_are_refused_and_never_get_a_message(fed, tmp_path)
        for i in range(3):
            fed.start_node(i, env=node_1 if i == 1 else {})
        fed.wait_online(3)
        _bad_local_data_fails_the_run_with_its_error_logged(fed, tmp_path / "bad")
        _repair(bad)
        _an_unapproved_plan_is_refused_and_nothing_is_read(fed, approver, tmp_path / "unapproved")
        _killed_supernode_is_recovered_and_the_ledger_matches_the_releases(fed, tmp_path / "crash")
        _killed_superlink_makes_the_launcher_exit_non_zero_quickly(fed, tmp_path / "lost")
    approver.done.set()
    # Node 0's operator approved the runs it took part in; every node's audit log verifies.
    assert len(approver.approved) >= 2
    for i in range(3):
        state = policies[i][STATE_DIR]
        check = verify_audit_log(state)
        assert check.ok and check.count > 0, check.message
        assert fedpriv(["inspect", str(state)]) == 0


@pytest.mark.processes
def test_ten_supernodes_complete_a_run(tmp_path, capsys):
    # Ten authenticated SuperNodes on loopback: every launcher wait grows with K
    # (registration, nodes online), so the run completes and releases every round.
    from fedpriv.server.deploy import main as deploy_main

    argv = ["--num-clients", "10", "--out-dir", str(tmp_path / "out"),
            "--set", "rounds=2", "--set", "depth=3"]  # fmt: skip
    assert deploy_main(argv) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "completed: 2 of 2 rounds released" in line
    (run,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir() and not p.is_symlink()]
    assert json.loads((run / "config.json").read_text())["num-clients"] == 10
    # Its report renders in a real browser: no console error, the model's split usage
    # and the ε, ROC and reliability curves drawn.
    assert fedpriv(["report", str(run)]) == 0
    page = run / "report.html"
    assert "split usage" in page.read_text()
    if CHROMIUM is None:
        pytest.skip("no Chromium (apt-get install chromium): the deployment's report not rendered")
    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0 and console_errors(dom.stderr) == [], dom.stderr[-2000:]
    assert "<title>fedpriv report: boosting on" in dom.stdout
    assert dom.stdout.count("<polyline") >= 3
