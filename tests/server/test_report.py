"""A run folder looked at: the ServerApp's per-round progress file, ``fedpriv report``'s
self-contained page (finished and running), ``fedpriv follow`` and ``inspect --terms``,
on a dp_gam run through the loopback harness (≈ 2 s) with one node dropping out."""

import json
import re
import shutil

import numpy as np
import pytest
from fedpriv.server.cli import main
from fedpriv.server.follow import follow
from fedpriv.server.report import gather
from fedpriv.server.report_html import render
from fedpriv.server.run_files import read_run

from fedpriv.artefact import load_model
from fedpriv.models.explain import term_importance
from tests.server.test_flower_loopback import run_app
from tests.server.test_hostile_flower import Faults

ROUNDS = 6
JOB = {"method": "dp_gam", "dataset": "heart", "num-clients": 4, "rounds": ROUNDS,
       "epsilon": 2.0, "seed": 5, "round-timeout": 1.0}  # fmt: skip
#: Files the ServerApp writes only at the end of a run.
END_FILES = ("status.json", "metrics.json", "rounds.json", "communication.json",
             "model.fedpriv.npz")  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A completed dp_gam run on Fed-Heart-Disease whose node 3 stops answering from
    Flower round 3 on (every such round recovered from the three others)."""
    mp = pytest.MonkeyPatch()
    try:
        drop = Faults({3}, errors=False, from_round=3)
        out = run_app(mp, tmp_path_factory.mktemp("run"), JOB, tamper=drop)
    finally:
        mp.undo()
    return out


def _running_copy(finished, tmp_path, rounds: int):
    """The folder as it was after ``rounds`` rounds: no end files, the journal open."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    for name in END_FILES:
        (out / name).unlink()
    lines = (out / "progress.jsonl").read_text().splitlines()
    (out / "progress.jsonl").write_text("\n".join(lines[:rounds]) + "\n" + lines[rounds][:9])
    privacy = json.loads((out / "privacy.json").read_text())
    privacy["complete"] = False
    (out / "privacy.json").write_text(json.dumps(privacy))
    return out


def test_the_serverapp_writes_one_progress_line_per_round(finished):
    run = read_run(finished)
    assert [r["round"] for r in run.progress] == list(range(1, ROUNDS + 1))
    assert all(r["asked"] == [0, 1, 2, 3] and r["rounds"] == ROUNDS for r in run.progress)
    assert [r["replied"] for r in run.progress[:2]] == [[0, 1, 2, 3]] * 2
    assert all(r["replied"] == [0, 1, 2] and not r["aborted"] for r in run.progress[2:])
    assert run.progress[-1]["epsilon_upper_bound"] is not None  # the last round's bound
    assert "seconds" not in json.dumps(run.progress)  # no wall time: it tracks the rows
    assert run.state == "completed" and not run.running


def test_the_page_is_self_contained_and_shows_the_run(finished):
    report = gather(finished)
    html = render(report)
    assert "<script" not in html and not re.search(r"(src|href)\s*=", html)
    assert "@import" not in html and "url(" not in html
    art = load_model(finished / "model.fedpriv.npz")
    assert html.count('class="shape-plot"') == len(art.schema.columns)
    numeric = [t for t in report.explanation.terms if t.kind == "numeric"]
    assert numeric and html.count('class="band"') == len(numeric)
    privacy = json.loads((finished / "privacy.json").read_text())
    assert f"{privacy['epsilon']:.4g}" in html and "completed" in html
    # Node 3 dropped out of rounds 3-6: the per-node table says so.
    assert report.per_node[3] == {"asked": ROUNDS, "replied": 2, "dropped": ROUNDS - 2}
    assert re.search(r"<td>node 3</td><td class=\"num\">6</td><td class=\"num\">2</td>", html)
    # The curves are the ServerApp's own scores of the same public rows.
    metrics = json.loads((finished / "metrics.json").read_text())
    assert abs(report.scored.auc - metrics["auc"]) < 1e-12
    assert sum(n for *_, n in report.scored.calibration) == report.scored.n
    # Importances over the public test rows, nothing else.
    from fedpriv.data.node import DataSource, public_test_split
    from fedpriv.federation.settings import RunSettings

    X, _ = public_test_split(DataSource.of(RunSettings.from_run_config(read_run(finished).config)))
    want = term_importance(art.model, X)
    got = [report.importance[t.name] for t in report.explanation.terms]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_epsilon_per_round_matches_the_servers_bounds_and_the_card(finished):
    report = gather(finished)
    rounds, eps = zip(*report.epsilon_curve, strict=True)
    assert list(rounds) == list(range(1, ROUNDS + 1)) and np.all(np.diff(eps) > 0)
    logged = {int(k): m["epsilon_upper_bound"] for k, m in report.run.rounds.items()
              if "epsilon_upper_bound" in m}  # fmt: skip
    assert logged
    for r, bound in logged.items():
        assert abs(dict(report.epsilon_curve)[r] - bound) < 1e-9
    final = json.loads((finished / "privacy.json").read_text())["epsilon"]
    assert final <= eps[-1] <= final + 0.01  # coarser grid: an upper bound, close


def test_a_running_run_gives_a_page_marked_running(finished, tmp_path):
    out = _running_copy(finished, tmp_path, 3)
    run = read_run(out)
    assert run.running and run.state == "running" and len(run.progress) == 3
    html = render(gather(out))
    assert "<b>running</b>" in html and "no model file yet" in html
    assert html.count('class="shape-plot"') == 0 and "Participation and dropouts" in html


def test_follow_prints_each_round_then_the_end(finished, tmp_path):
    out = _running_copy(finished, tmp_path, 3)
    lines = []
    assert follow(out, echo=lines.append, once=True) == 0
    # T = 6 < 10: every round line carries the ledger's bound on ε.
    heads = [line.split(", ε spent ≤ ")[0] for line in lines[:3]]
    assert heads == ["round 1/6: 4/4 replied", "round 2/6: 4/4 replied",
                     "round 3/6: 3/4 replied, dropped node 3"]  # fmt: skip
    assert lines[-1] == f"running: 3 of {ROUNDS} rounds so far"
    assert any(line.startswith("ε spent so far: ") for line in lines)

    def finish_the_run(_seconds):  # the ServerApp's next rounds and its end
        for name in (*END_FILES, "progress.jsonl", "privacy.json"):
            shutil.copy(finished / name, out / name)

    lines.clear()
    assert follow(out, echo=lines.append, sleep=finish_the_run) == 0
    rounds = [line for line in lines if line.startswith("round ")]
    assert [line.split("/")[0] for line in rounds] == [f"round {r}" for r in range(1, 7)]
    assert "ε spent ≤ " in rounds[-1]
    assert lines[-3].startswith("run completed") and lines[-2].startswith("test AUC ")
    assert lines[-1].startswith("ε spent (final): ")


def test_follow_gives_up_at_its_timeout(finished, tmp_path):
    out = _running_copy(finished, tmp_path, 2)
    clock = iter(range(100))
    lines = []
    code = follow(out, echo=lines.append, timeout=5, sleep=lambda s: None,
                  clock=lambda: next(clock))  # fmt: skip
    assert code == 1 and lines[-1] == "still running after 5 s: 2 rounds so far"


def test_the_commands(finished, tmp_path, capsys):
    page = tmp_path / "page.html"
    assert main(["report", str(finished), "--out", str(page)]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert main(["follow", str(finished), "--once"]) == 0
    assert "run completed" in capsys.readouterr().out
    assert main(["inspect", str(finished), "--terms"]) == 0
    text = capsys.readouterr().out
    assert "intercept" in text and "updated in" in text and "±" in text
    assert main(["report", str(tmp_path)]) == 2  # no run's files
    assert "holds none of a run's files" in capsys.readouterr().err


def test_an_in_process_run_folder(tmp_path):
    out = tmp_path / "fit"
    assert main(["run", "--method", "dp_gam", "--dataset", "heart", "--set", "rounds=5",
                 "--out", str(out)]) == 0  # fmt: skip
    report = gather(out)
    assert report.run.kind == "in-process" and report.run.state == "completed"
    run = json.loads((out / "privacy.json").read_text())["run"]
    assert f"{report.scored.auc:.4f}" == run["auc"]  # the same held-out rows
    assert len(report.epsilon_curve) == 5 and report.explanation is not None
    assert "an in-process fit" in render(report)


def test_track_without_mlflow_is_refused_before_any_work(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "mlflow", None)  # as if not installed
    out = tmp_path / "fit"
    argv = ["run", "--method", "dp_gam", "--dataset", "heart", "--out", str(out),
            "--track", "mlflow"]  # fmt: skip
    assert main(argv) == 2
    assert "needs MLflow: pip install 'fedpriv[track]'" in capsys.readouterr().err
    assert not out.exists()  # refused before any row was read
