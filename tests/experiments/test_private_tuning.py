"""The accounted tuning stage on the quick config: charged before it runs, rows, report section."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fedpriv.experiments.bench import private_tuning, stages
from fedpriv.experiments.bench.cells import CellCache
from fedpriv.experiments.bench.config import load

from fedpriv.privacy import PrivacyBudget, PrivacyBudgetExceededError, PrivacyLedger
from fedpriv.privacy.tuning_calibration import selection_epsilon

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments/configs/matched.toml"


@pytest.fixture(scope="module")
def quick():
    cfg = load(CONFIG, quick=True)
    return dataclasses.replace(cfg, stages=("private_tuning",), processes=1)


def test_the_quick_stage_reports_accounted_rows(quick, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPRIV_SECRET_KEY", "ab" * 32)  # fixed draws of K and the runs
    ctx = stages.Context(cfg=quick, cache=CellCache(tmp_path / "cache"), pool=None)
    rows = pd.DataFrame(private_tuning.run_stage(ctx), columns=list(stages.ROW_KEYS))
    pt = quick.private_tuning
    w = rows.set_index(["dataset", "learner", "epsilon", "seed", "metric"])["value"].unstack()
    assert len(w) == len(pt.datasets) * len(pt.learners) * len(pt.epsilons) * pt.seeds
    assert (rows["variant"] == "private").all() and (rows["stage"] == "private_tuning").all()
    # The ledger's ε covers the selection and never passes the row's ε.
    eps = w.index.get_level_values("epsilon").to_numpy()
    assert np.all(w["epsilon_spent"].to_numpy() <= eps)
    assert np.all(w["epsilon_spent"].to_numpy() > 0.9 * eps)  # calibration uses the budget
    assert np.all(w["base_epsilon"].to_numpy() < 0.75 * eps)  # and pays for the selection
    assert "runs" not in w.columns  # K itself stays hidden (the theorems do not cover it)
    assert w["expected_runs"].iloc[0] == pytest.approx(pt.mean_runs, rel=1e-6)
    assert w["auc"].between(0.55, 1.0).all() and w["val_auc_dp"].between(0.5, 1.0).all()

    table = private_tuning.summary(rows, quick.tuning)
    assert len(table) == len(pt.datasets) * len(pt.learners) * len(pt.epsilons)
    assert table["validation_auc_mean"].isna().all()  # no main stage in this run
    text = "\n".join(private_tuning.report_section(table, quick))
    assert "private-tuning test AUC" in text and "TNB(eta=1" in text


def test_the_selection_is_charged_before_any_run(quick):
    # The event the stage charges at ε = 4 fits its ledger once; a second copy is refused.
    pt = quick.private_tuning
    configs = tuple(tuple(sorted(c.items())) for c in quick.grid(pt.learners[0]).configs())
    dist = private_tuning.distribution(pt)
    cal = private_tuning.calibrate(configs, 4.0, quick.delta, dist, pt.val_noise)
    assert selection_epsilon(cal.event, quick.delta) == pytest.approx(cal.epsilon)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=4.0, delta=quick.delta))
    ledger.spend(cal.event)
    with pytest.raises(PrivacyBudgetExceededError):
        ledger.spend(cal.event)
    # Every distinct (T, q) of the grid is a candidate, with the validation release inside.
    plans = {(dict(c)["rounds"], dict(c)["sampling_rate"]) for c in configs}
    assert len(cal.event.candidates) == len(plans)
    assert math.isfinite(cal.base_epsilon)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"distribution": "uniform"}, "private_tuning.distribution"),
        ({"mean_runs": 1.0}, "private_tuning.mean_runs"),
        ({"learners": ["lumberjack"]}, "private_tuning.learners"),
    ],
)
def test_bad_private_tuning_settings_are_named(table, match):
    import tomllib

    from fedpriv.experiments.bench.config import from_dict

    raw = tomllib.loads(CONFIG.read_text())
    raw["private_tuning"] = {**raw["private_tuning"], **table}
    with pytest.raises(ValueError, match=match):
        from_dict(raw)


def test_tuning_private_makes_the_main_rows_accounted(quick, tmp_path):
    from fedpriv.experiments.bench import analysis
    from fedpriv.experiments.bench.config import Forests

    cfg = dataclasses.replace(
        quick,
        tuning="private",
        stages=("main",),
        learners=("logistic",),
        epsilons=(4.0,),
        forests=Forests(seeds=0, learners=()),
    )
    ctx = stages.Context(cfg=cfg, cache=CellCache(tmp_path / "cache"), pool=None)
    rows, chosen = stages.run_main(ctx)
    df = pd.DataFrame(rows, columns=list(stages.ROW_KEYS))
    assert chosen == {} and set(df["variant"]) == {"private"} and set(df["stage"]) == {"main"}
    summary = analysis.main_summary(df)
    assert len(summary) == 1 and summary["n"].iloc[0] == cfg.seeds
    assert summary["epsilon_spent_max"].iloc[0] <= 4.0
    assert 0.55 < summary["auc_mean"].iloc[0] < 1.0
