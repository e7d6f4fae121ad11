"""Ablation configs, cells and the pooled-AUC decomposition (issue 9; paper §5.6)."""

import numpy as np
import pytest
from fedpriv.experiments.ablate import plan
from fedpriv.experiments.ablation.cells import AblationCell, auc_decomposition
from fedpriv.experiments.ablation.config import STUDIES, Axes, config_path, from_dict, load
from sklearn.metrics import roc_auc_score

from fedpriv.seeding import derive_generator


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"participation": (1.5,)}, r"axes.participation must be in \(0, 1\]; got 1.5"),
        ({"alpha": (0.0,)}, r"axes.alpha must be in \(0, 1000\]; got 0.0"),
        ({"accounting": ("loose",)}, r"a non-empty subset of \['valid', 'tight', 'paper'\]"),
        ({"n_clients": (1,)}, r"axes.n_clients must be an integer in \[2, 100\]; got 1"),
        ({"covariate_shift": (0.6,)}, r'\["natural"\] when covariate_shift > 0'),
    ],
)
def test_axes_name_the_value_and_the_allowed_range(kw, message):
    with pytest.raises(ValueError, match=message):
        Axes(**kw)


def test_study_errors_name_the_value():
    raw = {"study": {"name": "participation", "epsilon": 2.0, "delta": 1e-5, "seeds": 1}}
    raw["study"]["learners"] = ["boosting"]
    with pytest.raises(ValueError, match=r"seeds must be an integer in \[2, 1000\]; got 1"):
        from_dict(raw)
    raw["study"].update(seeds=2, name="remark1")
    with pytest.raises(ValueError, match=r"participation = \[1.0\] and at least two alphas"):
        from_dict(raw)
    with pytest.raises(ValueError, match="bad ablation config"):
        from_dict({"study": {**raw["study"], "name": "shift", "typo": 1}})


def test_configs_load_and_have_the_paper_grids():
    sizes = {s: len(plan(load(config_path(s)))) for s in STUDIES}
    # 3 α × 3 learners × 10 seeds × (ρ = 1 once + 2 partial ρ × 3 accountings)
    assert sizes == {"participation": 630, "remark1": 120, "clients": 270, "shift": 90}
    quick = {s: len(plan(load(config_path(s), quick=True))) for s in STUDIES}
    assert sum(quick.values()) <= 100
    cfg = load(config_path("participation"))
    assert cfg.params("boosting") == {
        "rounds": 75,
        "depth": 5,
        "learning_rate": 0.4,
        "sampling_rate": 0.05,
        "lam": 0.0,
        "intercept": False,
    }
    assert cfg.axes.accounting == ("valid", "tight", "paper")


def _cell(**kw):
    base = dict(
        partition="dirichlet",
        alpha=0.1,
        zipf_s=1.5,
        participation=1.0,
        accounting="paper",
        epsilon=2.0,
        delta=1e-5,
        seed=0,
        n_rows=6000,
        n_clients=5,
        covariate_shift=0.0,
    )
    return AblationCell.make("boosting", {"rounds": 75}, **{**base, **kw})


def test_cells_normalise_so_equal_experiments_share_a_key():
    assert _cell().accounting == "valid"  # ρ = 1: the same event under every accounting
    assert _cell().key == _cell(accounting="tight").key
    assert _cell(participation=0.5).key != _cell(participation=0.5, accounting="tight").key
    z = _cell(partition="zipf")
    assert z.alpha is None and z.zipf_s == 1.5
    assert _cell(partition="iid", alpha=0.5).key == _cell(partition="iid", alpha=10.0).key
    with pytest.raises(ValueError, match="needs the natural partition"):
        _cell(covariate_shift=0.6)


def test_pooled_auc_splits_exactly_into_within_and_cross_client_pairs():
    rng = derive_generator(0, "test", "auc")
    n = 600
    client = rng.integers(0, 4, n)
    y = (rng.random(n) < 0.2 + 0.15 * client).astype(int)
    p = 0.3 * y + 0.1 * client + rng.random(n)
    p[:50] = np.round(p[:50], 1)  # ties
    d = auc_decomposition(y, p, client)
    w = d["within_pair_fraction"]
    pooled = w * d["auc_within_pairs"] + (1 - w) * d["auc_cross_pairs"]
    assert pooled == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    macro = np.mean([roc_auc_score(y[client == k], p[client == k]) for k in range(4)])
    assert d["auc_macro_within"] == pytest.approx(macro, abs=1e-12)
    assert d["auc_cross_pairs"] > d["auc_within_pairs"]  # membership-correlated scores
    one = auc_decomposition(y, p, np.zeros(n, dtype=int))
    assert one["within_pair_fraction"] == 1.0
    assert one["auc_macro_within"] == pytest.approx(roc_auc_score(y, p))
