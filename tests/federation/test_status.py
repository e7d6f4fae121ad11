"""A run's status from its round counts; status.json; the launchers' exit code from it."""

import json

import pytest
from fedpriv.server.launch import exit_code

from fedpriv.federation.status import (
    DEFAULT_MAX_ABORTED_SHARE,
    RunOutcome,
    RunStatus,
    read_status,
    run_outcome,
    run_status,
    strategy_notes,
    with_notes,
    write_status,
)

C, D, F = RunStatus.COMPLETED, RunStatus.DEGRADED, RunStatus.FAILED


@pytest.mark.parametrize(
    ("rounds", "aborted", "share", "expected"),
    [
        (75, 0, 0.25, C),  # nothing aborted
        (75, 0, 0.0, C),
        (1, 0, 0.25, C),
        (75, 1, 0.25, D),
        (4, 1, 0.25, D),  # exactly at the threshold: still degraded
        (75, 18, 0.25, D),  # 24% ≤ 25%
        (75, 19, 0.25, F),  # 25.3% > 25%
        (75, 1, 0.0, F),  # a zero tolerance fails on the first abort
        (20, 15, 0.25, F),
        (3, 3, 0.25, F),  # every round aborted
        (3, 3, 1.0, D),  # tolerating everything: degraded, never failed by counts
    ],
)
def test_status_table(rounds, aborted, share, expected):
    assert run_status(rounds=rounds, aborted=aborted, max_aborted_share=share) is expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rounds": 3, "aborted": 4, "max_aborted_share": 0.25}, r"aborted must lie in \[0, "),
        ({"rounds": 3, "aborted": -1, "max_aborted_share": 0.25}, r"aborted must lie in \[0, "),
        ({"rounds": 3, "aborted": 0, "max_aborted_share": 1.5}, r"max_aborted_share must lie in"),
    ],
)
def test_impossible_counts_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_status(**kwargs)


def test_outcome_counts_reason_and_a_raised_run_is_failed_whatever_its_counts():
    deg = run_outcome(rounds_planned=75, rounds=75, aborted=12, max_aborted_share=0.25)
    assert (deg.status, deg.rounds_released, deg.rounds_aborted) == (D, 63, 12)
    assert deg.line().startswith("run degraded: 12 of 75 rounds released nothing")
    assert "16% ≤ max-aborted-share 25%" in deg.line()
    crashed = run_outcome(
        rounds_planned=75,
        rounds=2,
        aborted=0,
        max_aborted_share=0.25,
        client_errors=1,
        error=RuntimeError("boom"),
    )
    assert crashed.status is F and crashed.failed and crashed.rounds_released == 2
    assert "raised RuntimeError: boom (2 of 75 rounds run, 2 released)" in crashed.reason
    assert crashed.reason.endswith("1 client error replies")
    assert DEFAULT_MAX_ABORTED_SHARE == 0.25


def _run_dir(tmp_path, outcome: RunOutcome | None):
    out = tmp_path / "123"
    out.mkdir()
    if outcome is not None:
        write_status(out, outcome)
    return out


def test_a_strategys_notes_degrade_a_completed_run_and_join_its_reason():
    done = run_outcome(rounds_planned=10, rounds=10, aborted=0, max_aborted_share=0.25)
    noted = with_notes(done, ["the map says nothing"])
    assert noted.status is D and noted.rounds_released == 10
    assert noted.line() == "run degraded: all 10 of 10 rounds released; the map says nothing"
    assert with_notes(done, []) is done
    failed = run_outcome(rounds_planned=10, rounds=10, aborted=9, max_aborted_share=0.25)
    assert with_notes(failed, ["x"]).status is F  # never better than its counts

    class Noted:
        def status_notes(self):
            return ["x"]

    assert strategy_notes(Noted()) == ["x"] and strategy_notes(object()) == []


def test_status_json_round_trips_atomically(tmp_path):
    outcome = run_outcome(rounds_planned=5, rounds=5, aborted=4, max_aborted_share=0.25)
    out = _run_dir(tmp_path, outcome)
    data = json.loads((out / "status.json").read_text())
    assert data["status"] == "failed" and data["rounds_released"] == 1
    assert data["rounds_planned"] == 5 and data["rounds_aborted"] == 4
    assert read_status(out) == outcome
    assert [p.name for p in out.iterdir()] == ["status.json"]  # no temporary file left
    (out / "status.json").write_text("{not json")
    assert read_status(out) is None


@pytest.mark.parametrize(
    ("flwr_status", "aborted", "written", "code"),
    [
        ("finished:completed", 0, True, 0),
        ("finished:completed", 1, True, 0),  # degraded (1 of 5 ≤ 25%): warned, exit 0
        ("finished:completed", 4, True, 1),  # Flower says completed, the run says failed
        ("finished:failed", 4, True, 1),
        ("finished:completed", 0, False, 1),  # no status.json: the ServerApp never got there
        ("finished:failed", 0, False, 1),
        ("lost", 0, False, 2),
    ],
)
def test_launcher_exit_code_reads_the_runs_own_status(
    tmp_path, caplog, flwr_status, aborted, written, code
):
    outcome = run_outcome(rounds_planned=5, rounds=5, aborted=aborted, max_aborted_share=0.25)
    out = _run_dir(tmp_path, outcome if written else None)
    with caplog.at_level("INFO", logger="fedpriv"):
        assert exit_code(flwr_status, out) == code
    if written:
        assert outcome.line() in caplog.text
