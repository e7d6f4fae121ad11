"""``fedpriv cv``: k folds drawn privately, every fold's fit charged to one ledger of (ε, δ)."""

import json
import math
import re

import numpy as np
import pytest
from fedpriv.server import cli_split
from fedpriv.server.cli import main
from fedpriv.server.fit_size import PublicSize
from fedpriv.server.method_estimator import MethodEstimator

from fedpriv.data import load_csv_whole
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.privacy.randomness import SecretKey
from fedpriv.privacy.record_count import COUNT_LABEL, count_event
from tests.cli.data import HEADER, SCHEMA, rows, write
from tests.keys import key_for

FOLD = re.compile(r"fold (\d)/3: AUC (\S+) \| Brier (\S+) \(base rate (\S+)\) \| run (\w+)")
TOTAL = re.compile(r"AUC (\S+) ± (\S+) \(mean ± sd over 3 of 3 folds\) \| ε spent (\S+) \(PLD\)")
EPS, DELTA, FOLDS, ROUNDS = 2.0, 1e-5, 3, 3
FAST = ["--method", "dp_gam", "--set", f"rounds={ROUNDS}", "--set", f"epsilon={EPS:g}"]


@pytest.fixture
def hospitals(tmp_path):
    return write(tmp_path / "hospitals.csv", rows(240, seed=3))


def test_cv_charges_all_folds_to_one_ledger_within_epsilon(hospitals, tmp_path, capsys):
    out = tmp_path / "cv"
    argv = ["cv", "--csv", str(hospitals), "--schema", SCHEMA, "--folds", str(FOLDS)]
    assert main([*argv, *FAST, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    folds = FOLD.findall(text)
    assert [int(f[0]) for f in folds] == [1, 2, 3] and {f[4] for f in folds} == {"completed"}
    doc = json.loads((out / "cv.json").read_text())
    aucs = [f["auc"] for f in doc["folds"]]
    assert [f"{a:.4f}" for a in aucs] == [f[1] for f in folds]
    assert doc["auc_mean"] == pytest.approx(np.mean(aucs), rel=1e-12)
    assert doc["auc_sd"] == pytest.approx(np.std(aucs, ddof=1), rel=1e-12)
    for fold in doc["folds"]:  # no fold size, written or printed
        assert set(fold) == {"fold", "auc", "brier", "brier_base", "status"}
    # One ledger: the record count once, then every fold's rounds, in (0.99 ε, ε].
    privacy = doc["privacy"]
    assert privacy["budget"] == {"epsilon": EPS, "delta": DELTA}
    assert 0.99 * EPS <= privacy["epsilon"] <= EPS
    assert privacy["epsilon"] == pytest.approx(doc["fold_budget"]["planned_epsilon"], rel=1e-9)
    labels = [e["label"] for e in privacy["events"]]
    assert labels[0] == COUNT_LABEL and labels.count(COUNT_LABEL) == 1
    assert privacy["n_releases"] == 1 + FOLDS * (ROUNDS + 1)  # dp_gam: + its quantile sketch
    m = TOTAL.search(text)
    assert m and float(m.group(3)) == pytest.approx(privacy["epsilon_pld"], rel=1e-12)
    fold_eps = doc["fold_budget"]["epsilon"]
    assert doc["fold_budget"]["delta"] == pytest.approx(DELTA / FOLDS, rel=1e-12)
    # The twin: per-fold budgets of ε each, planned by the same code, would overspend.
    data = load_csv_whole(hospitals, SCHEMA, use_cache=False)
    settings = RunSettings.from_run_config({"method": "dp_gam", "rounds": ROUNDS, "epsilon": EPS})
    est = MethodEstimator.from_settings(settings, num_clients=3)
    size = PublicSize(n_records=240 * 2, max_records=240 * 2)
    plan = cli_split.fit_plan(est, data, size, 3)
    fixed = [(count_event(0.01 * EPS), 1)]

    def composed(eps_f):
        items, slack = plan(eps_f, DELTA / FOLDS)
        return cli_split.composed_epsilon(
            items, folds=FOLDS, fixed=fixed, slack=slack, epsilon=EPS, delta=DELTA
        )

    assert composed(EPS) > 1.2 * EPS  # ε per fold: far over the total
    assert composed(fold_eps) == pytest.approx(privacy["epsilon"], rel=1e-9)
    assert EPS / FOLDS < fold_eps < EPS  # PLD composition beats ε/k per fold
    # A second cv into the same folder: refused before any row is read, the first kept.
    before = (out / "cv.json").read_bytes()
    assert main([*argv, *FAST, "--out", str(out)]) == 2
    assert "holds an earlier run's cv.json; not overwritten" in capsys.readouterr().err
    assert (out / "cv.json").read_bytes() == before


def test_cv_with_a_budget_of_epsilon_per_fold_is_refused_by_the_one_ledger(
    hospitals, monkeypatch, caplog, capsys
):
    """The ledger, not the calibration, is the guard: ε per fold stops at the fold
    that would pass the total, before its noise is drawn."""

    def naive(plan, *, epsilon, delta, folds, fixed):
        return cli_split.FoldBudget(
            epsilon=epsilon, delta=delta / folds, planned=math.nan, target=epsilon, steps=0
        )

    monkeypatch.setattr(cli_split, "fold_budget", naive)
    argv = ["cv", "--csv", str(hospitals), "--schema", SCHEMA, "--folds", str(FOLDS), *FAST]
    assert main(argv) == 1
    assert [f[0] for f in FOLD.findall(capsys.readouterr().out)] == ["1"]
    assert re.search(
        r"fold 2 of 3 failed: .*over the budget ε=2; nothing was released", caplog.text
    )


def test_folds_are_drawn_row_by_row_from_the_private_key():
    key = key_for(31)
    folds = cli_split.assign_folds(500, 5, key)
    assert folds.shape == (500,) and set(np.unique(folds)) == set(range(5))
    # A row's fold depends on the key and its index only: one more row moves none.
    assert np.array_equal(cli_split.assign_folds(501, 5, key)[:500], folds)
    assert not np.array_equal(cli_split.assign_folds(500, 5, SecretKey.generate()), folds)


def test_each_fold_holds_out_its_rows_and_trains_on_the_rest(hospitals):
    data = load_csv_whole(hospitals, SCHEMA, use_cache=False)
    fold_of = cli_split.assign_folds(data.y.size, 4, key_for(32))
    tests = []
    for j in range(4):
        part = cli_split.fold_data(data, fold_of, j)
        train, test = part.rows("train"), part.rows("test")
        assert np.intersect1d(train, test).size == 0 and train.size + test.size == data.y.size
        tests.append(test)
    assert np.array_equal(np.sort(np.concatenate(tests)), np.arange(data.y.size))


@pytest.mark.parametrize(
    "curve",
    [
        lambda x: 3.0 * x**0.7,  # PLD-like: composition beats k·ε_f
        lambda x: 3.0 * x,  # basic composition: ε/k
        lambda x: min(0.3 * x, 1.5),  # δ/k binds: ε_f past ε
    ],
)
def test_fold_epsilon_lands_in_the_top_percent_and_never_overshoots(curve):
    for eps in (0.1, 1.0, 8.0):
        target = eps if curve(1e6) > eps else min(eps, curve(1e6))
        x, got, steps = cli_split.fold_epsilon(curve, epsilon=eps, folds=3)
        assert got == curve(x) <= eps
        if target == eps:
            assert got >= 0.99 * eps and steps <= 30


def test_fold_epsilon_refuses_a_total_the_fixed_part_already_fills():
    with pytest.raises(SettingError, match=r"epsilon=1: no per-fold epsilon .* fits 3 folds"):
        cli_split.fold_epsilon(lambda x: 1.5 + x, epsilon=1.0, folds=3)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--csv", "x.csv", "--schema", SCHEMA, "--dataset", "heart"], "two different data"),
        (["--csv", "x.csv"], "--csv needs --schema FILE"),
        (["--dataset", "heart", "--folds", "1"], "1 is not in the range 2<=x<=20"),
    ],
)
def test_cv_refusals(argv, message, capsys):
    assert main(["cv", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cv_on_a_bundled_corpus_folds_every_row(monkeypatch, capsys):
    from fedpriv.server.estimator_base import Estimator

    from fedpriv.data import load_for_run

    fitted, original = [], Estimator._fit_on

    def recording(self, X, y, partition, **kw):
        fitted.append(int(sum(len(p) for p in partition)))
        return original(self, X, y, partition, **kw)

    monkeypatch.setattr(Estimator, "_fit_on", recording)
    argv = ["cv", "--dataset", "heart", "--folds", "2", "--method", "dp_gam"]
    assert main([*argv, "--set", "rounds=2", "--set", "epsilon=1"]) == 0
    # Two folds: each row trains once, in the fit of the fold it is not in.
    assert sum(fitted) == load_for_run("heart", num_clients=4, split_seed=0).y.size
    assert "(mean ± sd over 2 of 2 folds)" in capsys.readouterr().out


def test_cv_on_patients_folds_by_unit_and_reports_the_unit(tmp_path, capsys):
    # Three records per patient, each patient at one hospital; unit: the patient.
    text = open(SCHEMA).read().replace(
        'client_column = "hospital"', 'client_column = "hospital"\nunit_column = "patient"\n'
        'max_records_per_unit = 2\nunit_scope = "node"'
    )  # fmt: skip
    schema = tmp_path / "patients.toml"
    schema.write_text(text)
    lines = rows(240, seed=3)
    csv = tmp_path / "patients.csv"
    csv.write_text(
        "patient," + HEADER.replace("hospital", "hospital", 1)
        + "".join(f"p{i // 3}," + line.replace(f",{'abc'[i % 3]},", f",{'abc'[i // 3 % 3]},", 1)
                  for i, line in enumerate(lines))
    )  # fmt: skip
    out = tmp_path / "cv"
    argv = ["cv", "--csv", str(csv), "--schema", str(schema), "--folds", str(FOLDS)]
    assert main([*argv, *FAST, "--out", str(out)]) == 0
    doc = json.loads((out / "cv.json").read_text())
    assert {f["status"] for f in doc["folds"]} == {"completed"}
    privacy = doc["privacy"]
    assert privacy["unit"] == "patient, at most 2 records"
    assert 0.99 * EPS <= privacy["epsilon"] <= EPS
    assert [e["label"] for e in privacy["events"]].count(COUNT_LABEL) == 1
