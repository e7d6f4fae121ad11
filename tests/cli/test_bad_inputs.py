"""Bad inputs through the ``fedpriv`` command, one row each.

Every row runs the command in process (click's ``CliRunner``) and ends as a
correct run (exit 0), a failed run (exit 1) or a refusal (exit 2): never a
traceback, a refusal is ONE line naming the file or key, the value and what is
allowed, and nothing is overwritten or left half-written (the rows that write
check their folder afterwards). The table covers the CLI boundary (``--out``,
``inspect``, model files, missing paths, sizes that cannot fit in memory, a run
that cannot go on) and, through the command, the data layer's and settings' own
refusals (``tests/data/test_bad_inputs_data.py``, ``tests/federation/test_bad_settings.py``).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from fedpriv.server.cli import cli

from tests.cli.bad_input_harness import (
    _GZIP,
    MODEL,
    SPOILED,
    Row,
    _clipped,
    _csv,
    _dir,
    _earlier,
    _failed_run_recorded,
    _failed_run_replaced,
    _file,
    _full_disk,
    _ledger,
    _method,
    _model,
    _nothing_made,
    _read_only,
    _replaced,
    _rows,
    _run,
    _schema,
    _unchanged,
    _warnings_kept,
)
from tests.data.ward_table import HEADER  # one ward table for both

# fmt: off
ROWS: dict[str, Row] = {
    # -- --out: never overwrite an earlier run; a file, a file's child, no permission,
    #    a full disk: one line, nothing written, no temporary file left
    "out-holds-earlier-run": Row(
        lambda t: _run(t, "--out", str(_earlier(t))), 2,
        r"--out \S+earlier holds an earlier run's model\.fedpriv\.npz, privacy\.json; not "
        r"overwritten \(its privacy record would be lost\): .* or --force to replace them",
        check=_unchanged,
    ),
    "out-force-replaces": Row(
        lambda t: _run(t, "--out", str(_earlier(t)), "--force"), 0, r"run completed",
        check=_replaced,
    ),
    "out-is-a-file": Row(
        lambda t: _run(t, "--out", _csv(t, "x", "f")), 2,
        r"--out \S+/f is a file; give a directory",
    ),
    "out-under-a-file": Row(
        lambda t: _run(t, "--out", _csv(t, "x", "f") + "/run"), 2,
        r"--out \S+/f/run is under \S+/f, a file; give a directory",
    ),
    "out-read-only": Row(
        lambda t: _run(t, "--out", str(t / "ro" / "run")), 2,
        r"--out \S+/ro/run: the folder \S+/ro is not writable", setup=_read_only,
    ),
    "out-disk-full-new-folder": Row(
        lambda t: _run(t, "--out", str(t / "new" / "run")), 2,
        r"error: No space left on device \(--out \S+/new/run: needs a writable folder with "
        r"room for the results; nothing was written",
        setup=_full_disk, check=_nothing_made,
    ),
    "out-disk-full-force": Row(
        lambda t: _run(t, "--out", str(_earlier(t)), "--force"), 2,
        r"No space left on device \(--out \S+earlier: .* nothing was written, an earlier run's "
        r"files are unchanged\)",
        setup=_full_disk, check=_unchanged,
    ),
    # -- inspect: what it was given, or one line
    "inspect-empty-folder": Row(
        lambda t: ["inspect", _dir(t / "empty")], 2,
        r"empty holds no node ledger \(fedpriv-node-ledger\.json\), node audit log .* nor run "
        r"privacy report \(privacy\.json\)",
    ),
    "inspect-mistyped-folder": Row(
        lambda t: ["inspect", str(t / "earlire")], 2, r"\S+/earlire does not exist"
    ),
    "inspect-results-folder": Row(
        lambda t: ["inspect", str(_earlier(t))], 0, r"^# Privacy card: `boosting`"
    ),
    "inspect-privacy-json": Row(
        lambda t: ["inspect", str(_earlier(t) / "privacy.json")], 0, r"^# Privacy card"
    ),
    "inspect-parent-of-runs": Row(
        lambda t: ["inspect", str(t)], 2,
        r"holds run results directories \(earlier\): inspect one of them",
    ),
    "inspect-failed-run": Row(
        lambda t: ["inspect", str(_file(t / "f" / "privacy.json", json.dumps(
            {"epsilon": 0.5, "delta": 1e-5, "run": {"status": "failed", "reason": "x"}}
        )).parent)], 0,
        r"a run's results without a model file; run failed: x\nspent: ε 0\.5, δ 1e-05",
    ),
    "inspect-privacy-not-json": Row(
        lambda t: ["inspect", str(_file(t / "f" / "privacy.json", "{").parent)], 2,
        r"privacy\.json is not a run's privacy report: not valid JSON",
    ),
    "inspect-ledger-not-json": Row(
        lambda t: ["inspect", _ledger(t, '{"runs": {"r1": ')], 2,
        r"node ledger \S+ is not valid JSON \(line 1, column \d+",
    ),
    "inspect-ledger-a-list": Row(
        lambda t: ["inspect", _ledger(t, "[]")], 2,
        r"is not a node ledger: the top level must be an object; got list",
    ),
    "inspect-ledger-runs-a-list": Row(
        lambda t: ["inspect", _ledger(t, '{"runs": []}')], 2,
        r"is not a node ledger: 'runs' must be an object of runs; got \[\]",
    ),
    "inspect-a-csv": Row(
        lambda t: ["inspect", _csv(t)], 2, r"ward\.csv: not a fedpriv model file"
    ),
    # -- model files, spoiled: predict and inspect each refuse them in one line
    **{
        f"{command}-{kind}": Row(
            lambda t, c=command, k=kind: [c, _model(t, k), *([_csv(t)] if c == "predict" else [])],
            2, says,
        )
        for command in ("predict", "inspect")
        for kind, says in SPOILED.items()
    },
    # -- paths that do not exist, values that are not allowed
    "schema-missing": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema", str(t / "wrd.toml")], 2,
        r"wrd\.toml: schema file not found \(fedpriv schema draft writes one",
    ),
    "predict-out-folder-missing": Row(
        lambda t: ["predict", str(_earlier(t) / MODEL), _csv(t), "--out", str(t / "no" / "s.csv")],
        2, r"--out \S+/no/s\.csv: the folder \S+/no does not exist; create it first",
    ),
    "predict-out-is-a-folder": Row(
        lambda t: ["predict", str(_earlier(t) / MODEL), _csv(t), "--out", str(t)], 2,
        r"--out \S+ is a directory; give a file name",
    ),
    "draft-out-folder-missing": Row(
        lambda t: ["schema", "draft", _csv(t), "--out", str(t / "no" / "w.toml")], 2,
        r"--out \S+/no/w\.toml: the folder \S+/no does not exist",
    ),
    "dataset-nope": Row(
        lambda t: ["run", "--dataset", "nope"], 2,
        r"dataset must be one of \['adult', 'brfss', .*\]; got 'nope'",
    ),
    "draft-target-nope": Row(
        lambda t: ["schema", "draft", _csv(t), "--target", "nope"], 2,
        r"--target 'nope' is not a column of the file; its columns are \['age', 'unit', 'y'\]",
    ),
    "forest-distributed-exponential-leaves": Row(
        lambda t: _method(t, "random_forest", "trees=2", "noise=distributed",
                          "leaf-mechanism=exponential"), 2,
        r"noise = 'distributed' needs leaf-mechanism = 'gaussian' \(noisy counts\), not "
        r"'exponential'",
    ),
    "forest-permute-and-flip-leaves": Row(
        lambda t: _method(t, "random_forest", "noise=distributed",
                          "leaf-mechanism=permute-and-flip"), 2,
        r"leaf-mechanism must be one of \['gaussian', 'exponential', 'laplace'\]; got "
        r"'permute-and-flip'",
    ),
    "epsilon-1e6": Row(
        lambda t: _run(t, "--set", "epsilon=1e6"), 2,
        r"epsilon must lie in \(0, 20\] or inf .*; got 1000000\.0",
    ),
    "delta-1e-300": Row(
        lambda t: _run(t, "--set", "delta=1e-300"), 2,
        r"delta must lie in \(1e-15, 0\.01\]; got 1e-300",
    ),
    # -- sizes that cannot fit in memory: refused before anything is allocated
    "rounds-1e9-float": Row(
        lambda t: _run(t, "--set", "rounds=1e9"), 2,
        r"rounds must be an integer in \[1, 10000\] .*; got 1000000000\.0",
    ),
    "rounds-1e9": Row(
        lambda t: _run(t, "--set", "rounds=1000000000"), 2,
        r"rounds must be an integer in \[1, 10000\] .*; got 1000000000 \(one tree is kept per "
        r"round: a larger value does not fit in memory\)",
    ),
    "boosting-leaves-past-2^23": Row(
        lambda t: _run(t, "--set", "rounds=10000", "--set", "depth=12"), 2,
        r"rounds × 2\^depth tree leaves must be at most 8,388,608 .*; got 40,960,000",
    ),
    "logistic-steps-1e9": Row(
        lambda t: _method(t, "logistic", "rounds=1000000000"), 2,
        r"rounds must be an integer in \[1, 100000\] or 0",
    ),
    "mlp-hidden-1e9": Row(
        lambda t: _method(t, "mlp", "hidden=1000000000"), 2,
        r"hidden must be an integer in \[1, 4096\]",
    ),
    "lumberjack-trees-1e9": Row(
        lambda t: _method(t, "lumberjack", "trees=1000000000"), 2,
        r"trees must be an integer in \[0, 512\]",
    ),
    "forest-trees-1e9": Row(
        lambda t: _method(t, "random_forest", "trees=1000000000"), 2,
        r"trees must be an integer in \[1, 4096\]",
    ),
    "forest-depth-1e9": Row(
        lambda t: _method(t, "random_forest", "depth=1000000000"), 2,
        r"depth must be an integer in \[0, 16\] \(0: automatic\)",
    ),
    "gam-candidates-1e9": Row(
        lambda t: _method(t, "dp_gam", "interaction-candidates=1000000000"), 2,
        r"interaction-candidates must be an integer in \[2, 64\]",
    ),
    "gam-bins-1e9": Row(
        lambda t: _method(t, "dp_gam", "bins=1000000000"), 2,
        r"bins must be an integer in \[2, 256\]",
    ),
    "bdpe-trees-1e9": Row(
        lambda t: _method(t, "bdpe", "trees=1000000000"), 2,
        r"trees must be an integer in \[1, 1000\]",
    ),
    "bdpe-oc-k-1e300-runs": Row(
        lambda t: _method(t, "bdpe", "trees=1", "depth=1", "oc-k=1e300"), 0, r"run completed"
    ),
    "num-clients-1e9": Row(
        lambda t: ["run", "--dataset", "synthetic", "--set", "num-clients=1000000000"], 2,
        r"num-clients must be an integer in \[2, 1000\]; got 1000000000",
    ),
    "max-records-past-its-range": Row(
        lambda t: _run(t, "--set", "max-records=1000000001"), 2,
        r"max-records must be an integer in \[1, 1000000000\]; got 1000000001",
    ),
    "max-records-past-the-secure-sum": Row(
        lambda t: _run(t, "--set", "max-records=1000000000"), 2,
        r"max-records must be at most 429,496,729 for 5 clients whose records each add up to "
        r"1 to a sum; got 1,000,000,000",
    ),
    "logistic-clip-norm-1e300": Row(
        lambda t: _method(t, "logistic", "rounds=4", "clip-norm=1e300"), 2,
        r"a record adds up to 1e\+300 to a sum \(the method's clipping bound, e\.g\. clip-norm\) "
        r"with \d+ clients: the secure sum .* cannot hold more; lower the bound",
    ),
    # -- a run that cannot go on: failed, one line, exit 1; what it spent is kept
    "forest-round-aborted": Row(
        lambda t: [*_method(t, "random_forest", "trees=2", "participation=0.01"),
                   "--out", str(t / "failed")], 1,
        r"run failed: the run raised RoundAbortedError: round 0 released nothing .* the "
        r"leaf-count round was aborted",
        check=_failed_run_recorded,
    ),
    "forest-round-aborted-force": Row(
        lambda t: [*_method(t, "random_forest", "trees=2", "participation=0.01"),
                   "--out", str(_earlier(t)), "--force"], 1,
        r"run failed: .*round 0 released nothing", check=_failed_run_replaced,
    ),
    # -- click's own errors, through the same boundary
    "unknown-option": Row(
        lambda t: ["run", "--frobnicate"], 2,
        r"error: No such option '--frobnicate'.* \(see 'fedpriv run --help'\)",
    ),
    "unknown-command": Row(lambda t: ["frobnicate"], 2, r"error: No such command 'frobnicate'"),
    "force-with-flower": Row(
        lambda t: ["run", "--flower", "--force"], 2, r"--force applies in process only"
    ),
    # -- a correct run with clipped values: shown, and kept in privacy.json
    "clipped-values-shown-and-kept": Row(
        lambda t: _run(t, "--out", str(t / "out"), csv=_clipped(t)), 0,
        r"column 'age': 3 of 203 values clipped to \[18, 100\] \(3 above\)(.|\n)*"
        r"1 load warning\(s\) above, in privacy\.json",
        check=_warnings_kept,
    ),
    # -- the data layer's and the settings' refusals, through the command
    "inf-cell": Row(
        lambda t: _run(t, csv=_csv(t, HEADER + _rows() + "inf,a,1\n")), 2,
        r"ward\.csv: column 'age', line 202: value inf is not a finite number",
    ),
    "out-of-bounds-column": Row(
        lambda t: _run(t, csv=_csv(t, HEADER + _rows(age=lambda i: 12 * (20 + i % 60)))), 2,
        r"column 'age': \d+ of 200 values lie outside the bounds \[18, 100\]",
    ),
    "missing-tokens-a-string": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, 'missing_tokens = ["?", ""]', 'missing_tokens = "NA"')], 2,
        r"missing_tokens must be an array of strings; got the string 'NA'",
    ),
    "bound-quoted": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, "bounds = [18, 100]", 'bounds = ["18", 100]')], 2,
        r"column 'age': bounds\[0\] \(lo\) must be a number .*; got '18' \(str\)",
    ),
    "bound-true": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, "bounds = [18, 100]", "bounds = [true, 100]")], 2,
        r"column 'age': bounds\[0\] \(lo\) must be a number .*; got True \(bool\)",
    ),
    "bounds-three": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, "bounds = [18, 100]", "bounds = [18, 60, 100]")], 2,
        r"bounds must be an array of two numbers \[lo, hi\] .*; got \[18, 60, 100\]",
    ),
    "level-is-a-missing-token": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, 'categories = ["a", "b"]', 'categories = ["a", "b", ""]')], 2,
        r"column 'unit': categories value '' is also a missing token",
    ),
    "type-typo": Row(
        lambda t: ["run", "--csv", _csv(t), "--schema",
                   _schema(t, 'type = "numeric"', 'tpye = "numeric"')], 2,
        r"unknown key 'tpye' in column 'age'; did you mean 'type'\?",
    ),
    "gzip-file-runs": Row(
        lambda t: _run(t, csv=_csv(t, gzip.compress((HEADER + _rows()).encode()))), 0,
        r"run completed",
    ),
    "truncated-gzip": Row(
        lambda t: _run(t, csv=_csv(t, _GZIP[: len(_GZIP) // 2])),  # ends mid-stream
        2, r"ward\.csv: .*cannot be read",
    ),
    "folder-as-csv": Row(
        lambda t: _run(t, csv=_dir(t / "w")), 2, r"/w: is a directory"
    ),
    "draft-semicolons": Row(
        lambda t: ["schema", "draft", _csv(t, "age;unit;y\n1;a;0\n", "b.csv")], 2,
        r"looks ';'-separated: pass --sep ';'",
    ),
    "draft-semicolons-with-sep": Row(
        lambda t: ["schema", "draft", _csv(t, "age;unit;y\n1;a;0\n", "b.csv"), "--sep", ";"],
        0, r"wrote \S+b\.schema\.toml: column names and types only",
    ),
    "set-epsilon-empty": Row(
        lambda t: _run(t, "--set", "epsilon="), 2,
        r"--set epsilon= has an empty value \(an unset shell variable\?\)",
    ),
    "tolerated-dropouts-negative": Row(
        lambda t: _run(t, "--set", "tolerated-dropouts=-1"), 2,
        r"tolerated-dropouts must be an integer in \[0, num-clients − 2\] .*; got -1",
    ),
    "csv-with-dataset": Row(
        lambda t: _run(t, "--dataset", "heart"), 2,
        r"--csv and --dataset name two different data sources: give one",
    ),
    "one-class-training-rows": Row(
        lambda t: _run(t, csv=_csv(t, HEADER + _rows(label=lambda i: 0))), 2,
        r"column 'y': the training rows hold one class only \(label 0: none of \['1'\]\)",
    ),
}
# fmt: on


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """An earlier run's results folder (one boosting round on the ward CSV)."""
    t = tmp_path_factory.mktemp("trained")
    result = CliRunner().invoke(cli, _run(t, "--out", str(t / "run")))
    assert result.exit_code == 0, result.output
    return t / "run"


@pytest.mark.parametrize("case", ROWS)
def test_a_bad_input_ends_in_a_run_or_one_line(case, trained, tmp_path, monkeypatch):
    row = ROWS[case]
    monkeypatch.setenv("FEDPRIV_CACHE_DIR", str(tmp_path.parent / "cache"))  # not in tmp_path
    shutil.copytree(trained, _earlier(tmp_path))
    argv = row.argv(tmp_path)
    if row.setup is not None:
        row.setup(tmp_path, monkeypatch)
    result = CliRunner().invoke(cli, argv)
    said = result.output
    assert result.exit_code == row.code, said
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )  # a defect escaping the boundary
    assert "Traceback" not in said
    assert re.search(row.says, said, re.M), said
    if row.code:
        errors = [line for line in said.splitlines() if re.match(r"\[fedpriv\] (error|run)", line)]
        assert len(errors) == 1, said  # ONE line
        assert re.search(row.says, errors[0]), errors[0]
    if row.check is not None:
        row.check(tmp_path, trained)
