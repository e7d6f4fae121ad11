"""Bad run settings, one row per case: each is refused before anything is allocated or
started, in one line naming the key, the value and the allowed range (the CLI: exit 2)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedpriv.federation.limits import (
    DELTA_MAX,
    EPSILON_MAX,
    FOREST_MAX_AUTO_DEPTH,
    MAX_MODEL_ENTRIES,
    SIZE_LIMITS,
    kebab,
)
from fedpriv.federation.settings import RunSettings, SettingError, parse_overrides

REFUSED = {
    # sizes: a finite bound per key, with the range in the message
    "boosting-rounds-1e9": (
        {"rounds": 10**9},
        r"^rounds must be an integer in \[1, 10000\] \(and rounds × 2\^depth ≤ 2\^23\); got "
        r"1000000000 \(one tree is kept per round: a larger value does not fit in memory\)$",
    ),
    "boosting-rounds-float-1e9": (
        {"rounds": 1e9},
        r"^rounds must be an integer in \[1, 10000\] .*; got 1000000000\.0$",
    ),
    "boosting-rounds-times-leaves": (
        {"rounds": 2049, "depth": 12},
        r"^rounds × 2\^depth tree leaves must be at most 8,388,608 \(2\^23, what fits in "
        r"memory\); got 8,392,704: lower one of them$",
    ),
    "logistic-rounds": (
        {"method": "logistic", "rounds": 100_001},
        r"^rounds must be an integer in \[1, 100000\] or 0 \(0: automatic; from the public "
        r"record bound, fedpriv.strategies.dpsgd_schedule; .*\); got 100001",
    ),
    "mlp-hidden": (
        {"method": "mlp", "hidden": 10**6},
        r"^hidden must be an integer in \[1, 4096\]; got 1000000",
    ),
    "lumberjack-trees": (
        {"method": "lumberjack", "trees": 513},
        r"^trees must be an integer in \[0, 512\] \(0: automatic; and trees × max-frontier × "
        r"2\^stage-height ≤ 2\^23\); got 513",
    ),
    "lumberjack-frontier": (
        {"method": "lumberjack", "max-frontier": 10**7},
        r"^max-frontier must be an integer in \[1, 2048\]; got 10000000",
    ),
    "lumberjack-product": (
        {"method": "lumberjack", "trees": 512, "max-frontier": 2048},
        r"^trees × max-frontier × 2\^stage-height nodes per stage must be at most 8,388,608",
    ),
    "forest-trees": (
        {"method": "random_forest", "trees": 10**6},
        r"^trees must be an integer in \[1, 4096\] \(and trees × 2\^depth ≤ 2\^23\); got 1000000",
    ),
    "forest-deep-trees": (
        {"method": "random_forest", "trees": 200, "depth": 16},
        r"^trees × 2\^depth leaves \(depth 0: up to 2\^10\) must be at most 8,388,608 .*got "
        r"13,107,200",
    ),
    "gam-rounds": (
        {"method": "dp_gam", "rounds": 10**8},
        r"^rounds must be an integer in \[2, 10000\]; got 100000000",
    ),
    "gam-candidates": (
        {"method": "dp_gam", "interaction-candidates": 65},
        r"^interaction-candidates must be an integer in \[2, 64\]; got 65",
    ),
    "gam-pair-cells": (
        {
            "method": "dp_gam",
            "interactions": 3,
            "interaction-candidates": 64,
            "interaction-bins": 256,
        },
        r"^C\(interaction-candidates, 2\) × interaction-bins² pair cells must be at most "
        r"8,388,608 .*got 132,120,576",
    ),
    # the budget the calibration certifies
    "epsilon-1e6": (
        {"epsilon": 1e6},
        r"^epsilon must lie in \(0, 20\] or inf \(inf: the non-private reference\); got "
        r"1000000\.0: a larger ε cannot be calibrated",
    ),
    "epsilon-just-above": ({"epsilon": 20.001}, r"^epsilon must lie in \(0, 20\]"),
    "delta-1e-300": (
        {"method": "logistic", "delta": 1e-300},
        r"^delta must lie in \(1e-15, 0\.01\]; got 1e-300: a PLD puts up to 1e-15 of its mass "
        r"at infinite loss",
    ),
    "delta-at-truncation": ({"delta": 1e-15}, r"^delta must lie in \(1e-15, 0\.01\]; got 1e-15"),
    "delta-large": ({"delta": 0.5}, r"^delta must lie in \(1e-15, 0\.01\]; got 0\.5"),
    # tolerated dropouts: refused whatever the noise mode
    "dropouts-negative-central": (
        {"tolerated-dropouts": -1},
        r"^tolerated-dropouts must be an integer in \[0, num-clients − 2\] \(read by "
        r"distributed noise; unused under central noise\); got -1$",
    ),
    "dropouts-negative-distributed": (
        {"tolerated-dropouts": -1, "noise": "distributed"},
        r"^tolerated-dropouts must be an integer in \[0, num-clients − 2\]",
    ),
    "distributed-noise-exponential-leaves": (
        {"method": "random_forest", "noise": "distributed", "leaf-mechanism": "exponential"},
        r"^noise = 'distributed' needs leaf-mechanism = 'gaussian' \(noisy counts\), not "
        r"'exponential'",
    ),
    "distributed-noise-laplace-leaves": (
        {"method": "random_forest", "noise": "distributed", "leaf-mechanism": "laplace"},
        r"needs leaf-mechanism = 'gaussian' \(noisy counts\), not 'laplace'",
    ),
    "dataset-unknown": (
        {"dataset": "nope"},
        r"^dataset must be one of \['adult', .*\]; got 'nope'; for your own file use --csv",
    ),
    "dropouts-too-many-distributed": (
        {"tolerated-dropouts": 4, "noise": "distributed", "dataset": "adult"},
        r"tolerated-dropouts must lie in \[0, 3\] for 5 clients",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_bad_setting_is_refused_in_one_line_before_anything_is_built(case):
    run_config, message = REFUSED[case]
    with pytest.raises(SettingError) as err:
        RunSettings.from_run_config(run_config)
    text = str(err.value)
    assert re.search(message, text), text
    assert "\n" not in text


ACCEPTED = {
    "budget-at-its-limits": {"epsilon": EPSILON_MAX, "delta": DELTA_MAX},
    "non-private": {"epsilon": float("inf"), "delta": 1e-300},  # δ unused without noise
    "boosting-deep-and-long-within-memory": {"rounds": 2048, "depth": 12},
    "dropouts-zero-central": {"tolerated-dropouts": 0},
    "distributed-noise-gaussian-leaves": {"method": "random_forest", "noise": "distributed"},
    "dropouts-default-with-two-clients": {"dataset": "adult", "num-clients": 2},
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_settings_at_the_edges_of_their_ranges_are_accepted(case):
    RunSettings.from_run_config(ACCEPTED[case])


@pytest.mark.parametrize(
    ("method", "key"), [(m, k) for m, keys in SIZE_LIMITS.items() for k in keys]
)
def test_each_size_limit_admits_its_maximum_and_refuses_one_more(method, key):
    most = SIZE_LIMITS[method][key][0]
    settings = RunSettings.from_run_config({"method": method, kebab(key): most})
    assert getattr(settings.config, key) == most
    with pytest.raises(SettingError, match=rf"^{kebab(key)} must be an integer in \[\d+, {most}\]"):
        RunSettings.from_run_config({"method": method, kebab(key): most + 1})


def test_the_declared_limits_agree_with_the_code_they_stand_for():
    from fedpriv.strategies.random_forest import MAX_AUTO_DEPTH

    from fedpriv.models.networks import NetworkSpec

    assert FOREST_MAX_AUTO_DEPTH == MAX_AUTO_DEPTH
    most = SIZE_LIMITS["mlp"]["hidden"][0]
    NetworkSpec(kind="mlp", n_features=3, hidden=most)
    with pytest.raises(ValueError, match="hidden must lie in"):
        NetworkSpec(kind="mlp", n_features=3, hidden=most + 1)
    # The product bound admits every method's defaults with room to spare.
    for method in SIZE_LIMITS:
        from fedpriv.federation.limits import model_entries

        found = model_entries(method, RunSettings(method=method).config)
        assert found is None or found[0] <= MAX_MODEL_ENTRIES / 2, (method, found)


@pytest.mark.parametrize("steps", [3, 4])
def test_every_accepted_budget_calibrates_on_the_hardest_plan(steps):
    """ε = EPSILON_MAX at δ = DELTA_MAX on a few unsampled steps (the plan whose PLD floor
    is lowest) calibrates; its twin, ε twice as large, is past that floor: the declared
    limit is what the calibrator supports, not an arbitrary number."""
    from fedpriv.privacy.calibration import calibrate_gaussian_noise_multiplier
    from fedpriv.privacy.calibration_range import CalibrationRangeError

    plan = {"target_delta": DELTA_MAX, "sampling_probability": 1.0, "steps": steps}
    cal = calibrate_gaussian_noise_multiplier(target_epsilon=EPSILON_MAX, **plan)
    assert cal.epsilon <= EPSILON_MAX
    with pytest.raises(CalibrationRangeError, match="target_epsilon must lie in"):
        calibrate_gaussian_noise_multiplier(target_epsilon=2 * EPSILON_MAX, **plan)


def test_an_estimator_refuses_a_size_before_fitting():
    # Estimators build their configuration through the same parser: a size that does
    # not fit in memory is refused before a single array is allocated.
    from fedpriv.server.estimators import DPBoostingClassifier

    X, y = np.zeros((20, 2)), np.arange(20) % 2
    with pytest.raises(SettingError, match=r"^rounds must be an integer in \[1, 10000\]"):
        DPBoostingClassifier(rounds=10**9, epsilon=1.0).fit(X, y)


PARSED = {
    "epsilon=2": ("epsilon", 2),
    "delta=1e-5": ("delta", 1e-5),
    "secure-aggregation=false": ("secure-aggregation", False),
    'method="mlp"': ("method", "mlp"),
    "dataset=heart": ("dataset", "heart"),  # a bare string
}
REFUSED_SET = {
    "epsilon=": r"^--set epsilon= has an empty value \(an unset shell variable\?\); give a "
    r"value, or leave epsilon out for its default$",
    'epsilon=""': r"^--set epsilon= has an empty value",
    "epsilon=  ": r"^--set epsilon= has an empty value",
    "epsilon": r"^--set expects key=value; got 'epsilon'$",
    "=2": r"^--set expects key=value; got '=2'$",
}


@pytest.mark.parametrize("item", PARSED)
def test_set_values_are_read_as_toml(item):
    assert parse_overrides([item]) == dict([PARSED[item]])


@pytest.mark.parametrize("item", REFUSED_SET)
def test_an_empty_set_value_is_an_error_naming_the_key(item):
    with pytest.raises(SettingError, match=REFUSED_SET[item]):
        parse_overrides(["rounds=3", item])


def test_the_pyprojects_empty_defaults_still_mean_the_default():
    # The twin of the row above: "" from pyproject.toml (every key listed) is the default.
    rc = {kebab(k): "" for k in RunSettings.all_keys()}
    assert RunSettings.from_run_config(rc) == RunSettings()


CLI = {
    "dataset-flag-unknown": (["--dataset", "nope"], r"dataset must be one of \["),
    "rounds-1e9": (["--set", "rounds=1000000000"], r"rounds must be an integer in \[1, 10000\]"),
    "rounds-float": (
        ["--set", "rounds=1e9"],
        r"rounds must be an integer in \[1, 10000\] .*; got 1000000000\.0",
    ),
    "epsilon-1e6": (["--set", "epsilon=1e6"], r"epsilon must lie in \(0, 20\] or inf"),
    "delta-1e-300": (["--set", "delta=1e-300"], r"delta must lie in \(1e-15, 0\.01\]"),
    "dataset-unknown": (["--set", "dataset=nope"], r"dataset must be one of \["),
    "empty-epsilon": (
        ["--set", "epsilon=", "--set", "rounds=1"],
        r"--set epsilon= has an empty value",
    ),
}


@pytest.mark.parametrize(("sets", "message"), CLI.values(), ids=list(CLI))
def test_the_cli_exits_2_before_loading_or_writing(sets, message, caplog, tmp_path):
    from fedpriv.server.cli import main

    out = tmp_path / "out"
    named = any(s.startswith("dataset=") or s == "--dataset" for s in sets)
    dataset = [] if named else ["--dataset", "heart"]
    code = main(["run", *dataset, *sets, "--out", str(out)])
    assert code == 2, caplog.text
    assert re.search(message, caplog.text), caplog.text
    assert not out.exists()  # nothing fitted, nothing written


@pytest.mark.parametrize(
    "source", [["--dataset", "heart"], ["--set", "dataset=heart"]], ids=["flag", "set"]
)
def test_a_csv_and_a_dataset_together_are_refused_not_one_dropped(source, capsys, tmp_path):
    from fedpriv.server.cli import main

    csv = tmp_path / "rows.csv"
    csv.write_text("a,y\n1,0\n")
    code = main(["run", "--csv", str(csv), "--schema", str(tmp_path / "s.toml"), *source])
    assert code == 2
    assert "--csv and --dataset name two different data sources" in capsys.readouterr().err


def test_a_budget_outside_the_calibrators_range_is_one_line_exit_2(caplog, monkeypatch):
    """An estimator-path calibration that cannot reach its target ends as exit 2."""
    from fedpriv.server import cli

    from fedpriv.privacy.calibration_range import CalibrationRangeError

    def refuse(**kwargs):
        raise CalibrationRangeError("epsilon 1e6 lies outside the calibrated range")

    monkeypatch.setattr(cli, "run_in_process", refuse)
    assert cli.main(["run", "--dataset", "heart"]) == 2
    assert "outside the calibrated range" in caplog.text
