"""fedpriv.server.progress: round lines become a bar on a terminal and stay plain lines elsewhere."""

import io

from fedpriv.server.progress import RoundProgress, parse_round
from rich.console import Console

# The ServerApp's round line (server/grid_runtime.py, GridRuntime.log_round).
ROUND_FMT = "[fedpriv] round %d/%d: %d/%d replies%s\n"


def test_parse_round_reads_the_serverapp_round_line():
    assert parse_round(ROUND_FMT % (3, 75, 5, 5, "")) == (3, 75)
    assert parse_round(ROUND_FMT % (75, 75, 4, 5, ", ε spent ≤ 1.998")) == (75, 75)
    assert parse_round("[fedpriv] 5 nodes connected\n") is None
    assert parse_round("[fedpriv] test AUC 0.8123  AUPRC 0.5000\n") is None


def test_without_a_terminal_every_line_is_forwarded_unchanged():
    lines = [ROUND_FMT % (r, 3, 5, 5, "") for r in (1, 2, 3)] + ["[fedpriv] results in /x\n"]
    seen = []
    with RoundProgress(seen.append, bar=False) as progress:
        for line in lines:
            progress.on_line(line)
    assert seen == lines


def test_on_a_terminal_round_lines_drive_the_bar_and_the_rest_is_forwarded(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **_: Console(file=screen))
    seen = []
    with RoundProgress(seen.append, bar=True) as progress:
        progress.on_line("[fedpriv] 5 nodes connected\n")
        for r in (1, 2):
            progress.on_line(ROUND_FMT % (r, 4, 5, 5, ""))
        progress.on_line(ROUND_FMT % (3, 4, 5, 5, ", ε spent ≤ 1.500"))
        task = progress._progress.tasks[0]
        assert (task.completed, task.total) == (3, 4)
        assert task.description == "rounds, ε spent ≤ 1.500"
        progress.on_line("[fedpriv] test AUC 0.8123  AUPRC 0.5000\n")
    assert seen == ["[fedpriv] 5 nodes connected\n", "[fedpriv] test AUC 0.8123  AUPRC 0.5000\n"]
