"""``fedpriv run --train FILE --test FILE``: fit on the whole train file, score the test file."""

import csv
import json
import re

import numpy as np
import pytest
from fedpriv.server.cli import main
from fedpriv.server.cli_split import held_out_scores
from fedpriv.server.estimator_base import Estimator
from sklearn.metrics import roc_auc_score

from fedpriv.artefact import load_model
from fedpriv.data.table import read_table
from tests.cli.data import SCHEMA, rows, write

LINE = re.compile(
    r"AUC (\S+) \| ε spent (\S+) \(PLD\), (\S+) \(RDP\) \| run (\w+): .* \| "
    r"Brier (\S+) \(base rate (\S+)\)"
)
N_TRAIN = 150


@pytest.fixture
def files(tmp_path):
    train = write(tmp_path / "train.csv", rows(N_TRAIN, seed=1))
    # The same rows with every label flipped: its AUC is 1 − the train file's, exactly.
    test = write(tmp_path / "test.csv", rows(N_TRAIN, seed=1, flip=True))
    return train, test


@pytest.fixture
def fitted_rows(monkeypatch):
    """Rows each in-process fit trained on."""
    seen = []
    original = Estimator._fit_on

    def recording(self, X, y, partition, **kw):
        seen.append(int(sum(len(p) for p in partition)))
        return original(self, X, y, partition, **kw)

    monkeypatch.setattr(Estimator, "_fit_on", recording)
    return seen


def _scores(model, path):
    """P(yes) of ``path``'s rows by the saved model, and its labels, read independently."""
    art = load_model(model)
    frame, _ = read_table(path, art.schema)
    p = np.asarray(art.predict_proba_frame(frame))  # binary: P(positive) per row
    with open(path, newline="") as fh:
        y = np.array([r["readmitted"] == "yes" for r in csv.DictReader(fh)], dtype=int)
    return p, y


def test_train_test_fits_the_whole_train_file_and_scores_the_test_file(
    files, fitted_rows, tmp_path, capsys
):
    train, test = files
    out = tmp_path / "out"
    argv = ["run", "--train", str(train), "--test", str(test), "--schema", SCHEMA]
    argv += ["--set", "rounds=4", "--set", "epsilon=8", "--out", str(out)]
    assert main(argv) == 0
    m = LINE.search(capsys.readouterr().out)
    assert m, "no result line"
    auc, pld, rdp, status, brier, base = m.groups()
    assert status == "completed" and 0.0 < float(pld) <= 8.0 + 1e-9 <= float(rdp)
    assert fitted_rows == [N_TRAIN]  # every row of the train file, none held out
    p, y = _scores(out / "model.fedpriv.npz", test)
    assert float(auc) == pytest.approx(roc_auc_score(y, p), abs=5e-5)
    assert float(brier) == pytest.approx(np.mean((p - y) ** 2), abs=5e-5)
    assert float(base) == pytest.approx(y.mean() * (1 - y.mean()), abs=5e-5)
    # The twin: the same model on the train file scores 1 − that AUC; it learned the
    # age signal, so the printed figure is the test file's and not the train file's.
    p_train, y_train = _scores(out / "model.fedpriv.npz", train)
    auc_train = roc_auc_score(y_train, p_train)
    assert float(auc) == pytest.approx(1.0 - auc_train, abs=5e-5)
    assert auc_train > 0.6
    summary = json.loads((out / "privacy.json").read_text())["run"]
    assert summary["auc"] == auc and summary["brier"] == pytest.approx(float(brier), abs=5e-5)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--csv", "{train}"], "--train and --csv/--dataset name two data sources"),
        (["--dataset", "heart"], "--train and --csv/--dataset name two data sources"),
        (["--set", "dataset=heart"], "--train and --csv/--dataset name two data sources"),
        (["--flower"], "--train/--test run in process only"),
    ],
)
def test_train_refuses_a_second_source(files, extra, message, capsys, fitted_rows):
    train, test = files
    argv = ["run", "--train", str(train), "--test", str(test), "--schema", SCHEMA]
    assert main(argv + [e.format(train=train) for e in extra]) == 2
    assert message in capsys.readouterr().err
    assert fitted_rows == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--test", "{test}", "--schema", SCHEMA], "--train FILE and --test FILE go together"),
        (["--train", "{train}", "--schema", SCHEMA], "--train FILE and --test FILE go together"),
        (["--train", "{train}", "--test", "{test}"], "--train needs --schema FILE"),
    ],
)
def test_test_needs_train_and_both_need_a_schema(files, argv, message, capsys, fitted_rows):
    train, test = files
    assert main(["run", *(a.format(train=train, test=test) for a in argv)]) == 2
    assert message in capsys.readouterr().err
    assert fitted_rows == []


def test_both_files_are_checked_against_the_schema_before_the_fit(
    files, tmp_path, caplog, fitted_rows
):
    train, _ = files
    bad = rows(20, seed=2)
    bad[6] = re.sub(r"^(\d+),(\w),(\d+),", r"\1,\2,forty,", bad[6])
    test = write(tmp_path / "held_out.csv", bad)
    argv = ["run", "--train", str(train), "--test", str(test), "--schema", SCHEMA]
    assert main([*argv, "--set", "rounds=1"]) == 2
    # One line naming the file, the column, the line and the value; no fit ran.
    assert re.search(
        rf"error: {re.escape(str(test))}: column 'age', line 8: value 'forty' is not a number",
        caplog.text,
    ), caplog.text
    assert fitted_rows == []
    missing = tmp_path / "nowhere.csv"
    argv = ["run", "--train", str(train), "--test", str(missing), "--schema", SCHEMA]
    assert main(argv) == 2
    assert f"{missing}: file not found" in caplog.text and fitted_rows == []


class _Fixed:
    def __init__(self, proba):
        self.proba = proba

    def predict_proba(self, X):
        return self.proba


def test_held_out_scores_brier_against_the_rows_own_base_rate():
    p = np.array([0.9, 0.2, 0.6, 0.4])
    scores = held_out_scores(_Fixed(np.column_stack([1 - p, p])), None, np.array([1, 0, 1, 1]))
    assert scores["auc"] == pytest.approx(roc_auc_score([1, 0, 1, 1], p), abs=1e-12)
    assert scores["brier"] == pytest.approx(np.mean((p - [1, 0, 1, 1]) ** 2), abs=1e-12)
    assert scores["brier_base"] == pytest.approx(0.75 * 0.25, abs=1e-12)
    # One class held out: no AUC (not NaN), the Brier scores still.
    one = held_out_scores(_Fixed(np.column_stack([1 - p, p])), None, np.ones(4, dtype=int))
    assert one["auc"] is None and one["brier_base"] == 0.0 and one["brier"] > 0.0
    assert held_out_scores(_Fixed(None), None, np.zeros(0, dtype=int))["brier"] is None
