"""``--reuse`` without the main stage: the appendix stages build on the reused selection."""

from pathlib import Path

import pandas as pd
import pytest
from fedpriv.experiments.bench.config import load
from fedpriv.experiments.bench.learners import label
from fedpriv.experiments.benchmark import reused_selection

ROOT = Path(__file__).resolve().parents[2]


def _results(tmp_path, picks: dict) -> Path:
    rows = [
        {"stage": "main", "dataset": d, "learner": m, "variant": "selected", "config": cfg,
         "epsilon": e, "seed": s, "metric": "auc", "value": 0.7}
        for (d, e, m), cfg in picks.items()
        for s in range(2)
    ]  # fmt: skip
    rows.append({**rows[0], "stage": "tune", "config": "not a selection"})  # ignored
    path = tmp_path / "results.csv.gz"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_selected_labels_map_back_to_their_grid_points(tmp_path):
    cfg = load(ROOT / "experiments/configs/matched.toml", quick=True)
    points = {m: cfg.grid(m).configs() for m in ("boosting", "dp_gam")}
    want = {("synthetic", 1.0, "boosting"): points["boosting"][1],
            ("synthetic", 4.0, "dp_gam"): points["dp_gam"][0]}  # fmt: skip
    path = _results(tmp_path, {k: label(k[2], p) for k, p in want.items()})
    assert reused_selection(pd.read_csv(path), cfg) == want


def test_a_label_outside_the_grid_is_refused(tmp_path):
    cfg = load(ROOT / "experiments/configs/matched.toml", quick=True)
    other = {**cfg.grid("boosting").configs()[0], "depth": 99}  # a grid that changed
    path = _results(tmp_path, {("synthetic", 1.0, "boosting"): label("boosting", other)})
    with pytest.raises(ValueError, match=r"matches 0 points"):
        reused_selection(pd.read_csv(path), cfg)
