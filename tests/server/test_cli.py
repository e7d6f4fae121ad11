"""The `fedpriv` command: help, in-process runs and their progress bar, schema drafts,
the Flower log filter."""

import io
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from fedpriv.server.cli import main
from fedpriv.server.cli_logs import quiet_flower
from fedpriv.server.progress import RoundProgress
from rich.console import Console

from fedpriv.federation.ranges import all_ranges
from tests.data.test_csv_errors import GOOD, HEADER, SCHEMA

RESULT = re.compile(r"AUC (\S+) \| ε spent (\S+) \(PLD\), (\S+) \(RDP\) \| run (\w+)")


def test_console_script_runs():
    cp = subprocess.run(
        [sys.executable, "-m", "fedpriv.server.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    for command in ("run", "deploy", "schema", "bench", "ablate"):
        assert re.search(rf"^  {command}\b", cp.stdout, re.M), command


@pytest.mark.parametrize(
    "argv, options",
    [
        (["run", "--help"], ["--method", "--dataset", "--csv", "--schema", "--set", "--flower"]),
        (["schema", "--help"], ["draft"]),
        (["schema", "draft", "--help"], ["--out", "--target", "--client-column"]),
        (
            ["deploy", "--help"],
            ["--num-clients", "--set", "--out-dir"],
        ),  # fedpriv.server.deploy's own
        (
            ["bench", "--help"],
            ["--config", "--quick"],
        ),  # fedpriv.experiments.benchmark's, subprocess
    ],
)
def test_help_lists_options(argv, options, capfd):
    assert main(argv) == 0
    out = capfd.readouterr().out
    for option in options:
        assert option in out, (argv, option)


def test_ablate_forwards_its_arguments(monkeypatch):
    """Like bench (whose real help is checked above), without a second ~3 s subprocess."""
    from fedpriv.server import cli as server_cli
    from fedpriv.server.launch import ROOT

    calls = []
    monkeypatch.setattr(
        server_cli.subprocess,
        "run",
        lambda cmd, **kw: calls.append((cmd, kw)) or subprocess.CompletedProcess(cmd, 7),
    )
    assert main(["ablate", "participation", "--quick", "--out", "x"]) == 7
    assert calls == [
        ([sys.executable, "-m", "fedpriv.experiments.ablate", "participation", "--quick",
          "--out", "x"],
         {"cwd": ROOT, "check": False}),
    ]  # fmt: skip


def test_run_help_lists_every_key_with_default_and_range(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    ranges = all_ranges()
    for key, allowed in ranges["run"].items():
        assert re.search(rf"^  {key} \[[^\]]*\]  {re.escape(allowed)}$", out, re.M), key
    for method, keys in ranges.items():
        if method == "run":
            continue
        block = out.split(f"  {method}: ", 1)[1]
        for key, allowed in keys.items():
            assert re.search(rf"^      {key} \[[^\]]*\]  {re.escape(allowed)}$", block, re.M)
            assert "see the method" not in allowed, (method, key)  # every built-in key has one


def _result(out):
    m = RESULT.search(out)
    assert m, out
    return m


def test_run_in_process_heart(capsys, tmp_path):
    argv = ["run", "--dataset", "heart", "--set", "rounds=3", "--set", "epsilon=2"]
    code = main([*argv, "--out", str(tmp_path)])
    assert code == 0
    m = _result(capsys.readouterr().out)
    assert 0.0 <= float(m.group(1)) <= 1.0  # fresh noise each fit: 3 trees at ε=2 may miss
    assert 1.5 < float(m.group(2)) <= 2.0 + 1e-9  # the calibrated PLD ε uses the budget
    assert float(m.group(3)) >= float(m.group(2))  # RDP is looser
    assert m.group(4) == "completed"
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["epsilon_pld"] == pytest.approx(float(m.group(2)), rel=1e-9)
    assert report["run"]["config"]["rounds"] == 3
    with np.load(tmp_path / "model.fedpriv.npz", allow_pickle=False) as model:
        # The intercept round, then one tree per round.
        assert model["model.leaf_values"].shape[0] == 2 and model["model.base"].shape == (1,)


def test_run_in_process_bar_shows_epsilon_spent(monkeypatch, capsys, tmp_path):
    # On a terminal the in-process run draws the rounds as a bar; its text carries an
    # upper bound on ε spent (every round here: T = 3 < 10), the last the fit's ε.
    shown = []

    class Recording(RoundProgress):
        def __init__(self, write=None, *, bar=None, thin=False):
            super().__init__(write, bar=True, thin=thin)  # as on a terminal

        def on_line(self, line):
            super().on_line(line)
            task = self._progress.tasks[0]
            shown.append((task.completed, task.total, task.description))

    screen = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **_: Console(file=screen))
    monkeypatch.setattr("fedpriv.server.progress.RoundProgress", Recording)
    argv = ["run", "--dataset", "heart", "--set", "rounds=3", "--set", "epsilon=2"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    assert _result(capsys.readouterr().out).group(4) == "completed"
    final = json.loads((tmp_path / "privacy.json").read_text())["epsilon"]
    assert [(done, total) for done, total, _ in shown] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    bounds = [float(m.group(1)) for *_, d in shown if (m := re.search(r"ε spent ≤ (\S+)", d))]
    assert len(bounds) == 3, shown  # after rounds 1, 2 and 3
    assert bounds == sorted(bounds) and 0.0 < bounds[0]
    assert all(b <= final + 1e-3 for b in bounds)  # shown rounded up to 3 decimals
    assert final <= bounds[-1] <= final + 1e-3
    assert "ε spent ≤" in screen.getvalue()


def test_run_in_process_csv(capsys, tmp_path):
    csv = tmp_path / "hospitals.csv"
    csv.write_text(HEADER + "".join(GOOD * 4))
    out = tmp_path / "out"
    argv = ["run", "--csv", str(csv), "--schema", SCHEMA, "--set", "rounds=2", "--set", "epsilon=2"]
    assert main([*argv, "--out", str(out)]) == 0
    m = _result(capsys.readouterr().out)
    assert 0 < float(m.group(2)) <= 2.0 + 1e-9 and m.group(4) == "completed"
    assert math.isfinite(float(m.group(1)))
    # The model file scores raw rows through its own schema ...
    rows = tmp_path / "new.csv"
    rows.write_text(HEADER + "".join(GOOD[:5]))
    assert main(["predict", str(out / "model.fedpriv.npz"), str(rows)]) == 0
    scores = capsys.readouterr().out.split()
    assert scores[0] == "score" and len(scores) == 6
    assert all(0.0 <= float(x) <= 1.0 for x in scores[1:])
    # ... and carries its privacy card.
    assert main(["inspect", str(out / "model.fedpriv.npz"), "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["epsilon"] == pytest.approx(float(m.group(2)), rel=1e-9) and card["events"]
    assert main(["inspect", str(out / "model.fedpriv.npz")]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("#") and str(card["epsilon"])[:6] in markdown
    assert main(["inspect", str(out)]) == 0  # the run's directory: its model file's card
    assert capsys.readouterr().out == markdown


def test_run_in_process_enforces_a_declared_record_bound(tmp_path, caplog):
    # max-records is the declared public bound per client in process too (as in a
    # deployment): a client holding more training rows than it fails the fit, exit 2.
    csv = tmp_path / "hospitals.csv"
    csv.write_text(HEADER + "".join(GOOD * 4))
    argv = ["run", "--csv", str(csv), "--schema", SCHEMA, "--set", "rounds=1"]
    assert main([*argv, "--set", "max-records=1"]) == 2
    assert "more rows than the run's declared max-records = 1" in caplog.text


@pytest.mark.parametrize(
    "sets, message",
    [
        (["round-timeout=3"], "'round-timeout' applies to Flower runs only"),
        (["depth=13"], r"depth must be an integer in \[1, 12\]; got 13"),
        (["clip-norm=1"], "'clip-norm' does not apply to method 'boosting'"),
        (["num-clients=5"], r"num-clients must lie in \[4, 4\] for dataset 'heart'; got 5"),
    ],
)
def test_run_refuses_bad_settings_before_loading(sets, message, caplog):
    argv = ["run", "--dataset", "heart"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    assert re.search(message, caplog.text), caplog.text


def test_run_takes_the_method_from_set_and_refuses_two_that_disagree(capsys, caplog):
    argv = ["run", "--dataset", "heart", "--set", 'method="dp_gam"', "--set", "rounds=3"]
    assert main(argv) == 0
    assert "dp_gam in process on heart: 3 rounds" in capsys.readouterr().err + caplog.text
    assert main([*argv, "--method", "boosting"]) == 2


def test_schema_draft_command(tmp_path, capsys):
    csv = tmp_path / "t.csv"
    csv.write_text("age,ward,y\n71.5,ocelot,yes\n33.25,lynx,no\n")
    out = tmp_path / "t.toml"
    assert main(["schema", "draft", str(csv), "--out", str(out), "--target", "y"]) == 0
    said = capsys.readouterr().out
    assert "No value, bound or level of the data was written" in said
    assert "5 'FILL ME' placeholders" in said
    text = out.read_text()
    assert not any(v in text for v in ("71.5", "33.25", "ocelot", "lynx", "yes", "no\n"))
    assert main(["schema", "draft", str(csv), "--out", str(out)]) == 2  # never overwritten


def test_flower_output_goes_to_the_log(tmp_path, capsys):
    lines = [
        "\x1b[92mINFO \x1b[0m:      [ROUND 1/3]",
        "INFO:flwr:[ROUND 1/3]",
        "[fedpriv] 4 nodes connected",
        "DEBUG:flwr:Stopping Simulation Runtime now.",
        "\x1b[91mERROR \x1b[0m:     ClientApp raised",
        "AUC 0.7 | ε spent 2 (PLD), 2.6 (RDP) | completed",
    ]

    def fake_launcher(argv):
        print("\n".join(lines))
        return 3

    assert quiet_flower(fake_launcher, [], tmp_path, verbose=False) == 3
    shown = capsys.readouterr().out.splitlines()
    assert shown == [lines[2], lines[4], lines[5]]
    assert (tmp_path / "flower.log").read_text().splitlines() == lines
    assert quiet_flower(fake_launcher, [], tmp_path / "v", verbose=True) == 3
    assert capsys.readouterr().out.splitlines() == lines
    assert not (tmp_path / "v").exists()


def test_run_flower_on_a_csv_simulates_its_hospitals_through_the_run_config(monkeypatch, tmp_path):
    """--flower --csv: the run config's csv and schema (absolute), as the nodes read them."""
    from fedpriv.server import cli as server_cli

    seen = {}

    def fake(entry, argv, logdir, *, verbose):
        seen["argv"] = argv
        return 0

    monkeypatch.setattr(server_cli, "quiet_flower", fake)
    csv, schema = tmp_path / "h.csv", tmp_path / "h.toml"
    argv = ["run", "--flower", "--csv", str(csv), "--schema", str(schema), "--set", "rounds=2"]
    assert main(argv) == 0
    got = seen["argv"]
    assert f"csv={json.dumps(str(csv.resolve()))}" in got
    assert f"schema={json.dumps(str(schema.resolve()))}" in got
    assert main(["run", "--flower", "--csv", str(csv)]) != 0  # no schema: a usage error
    assert main([*argv, "--client-column", "site"]) != 0  # in-process only


def test_share_secret_key_is_forwarded_to_the_simulation_only_when_asked(monkeypatch):
    """``fedpriv run --flower --share-secret-key``: the simulation's flag; without it the
    nodes never see the key; in process it is refused (there are no node processes)."""
    from fedpriv.server import cli as server_cli
    from fedpriv.server import simulate

    seen = []
    monkeypatch.setattr(
        server_cli,
        "quiet_flower",
        lambda entry, argv, logdir, *, verbose: seen.append(argv) or 0,
    )
    assert main(["run", "--flower", "--share-secret-key", "--set", "rounds=2"]) == 0
    assert main(["run", "--flower", "--set", "rounds=2"]) == 0
    assert ["--share-secret-key" in argv for argv in seen] == [True, False]
    assert main(["run", "--share-secret-key"]) != 0  # a usage error: Flower runs only
    # The launcher parses it (the option exists where the argv goes).
    got = {}

    def fake_simulate(overrides, *, preset, timeout, node_env, share_secret_key):
        got["share"] = share_secret_key
        return 2, None

    monkeypatch.setattr(simulate, "simulate", fake_simulate)
    simulate.main(["--share-secret-key", "--set", "rounds=2"])
    assert got == {"share": True}


def test_deploy_takes_share_secret_key_and_defaults_to_keeping_the_key_from_nodes(monkeypatch):
    from fedpriv.server import deploy

    got = []
    monkeypatch.setattr(deploy, "deploy", lambda overrides, **kw: got.append(kw) or (2, None))
    deploy.main(["--set", "rounds=1"])
    deploy.main(["--share-secret-key", "--set", "rounds=1"])
    assert [kw["share_secret_key"] for kw in got] == [False, True]
