"""Run settings: strict parsing before start, one default per key, keys from the registry."""

import math
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from fedpriv.strategies.dpsgd import MLPConfig

from fedpriv.federation.settings import (
    PARTICIPATION_ACCOUNTINGS,
    RunSettings,
    SettingError,
    method_defaults,
)
from fedpriv.methods import get_method, methods

ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_through_a_run_config():
    s = RunSettings(
        method="mlp",
        participation=0.5,
        config=MLPConfig(
            hidden=8,
            clip_norm=1.5,
            backend="opacus",
            standardise=False,
            participation_accounting="tight",
        ),
    )
    rc = s.to_run_config()
    assert RunSettings.from_run_config(rc) == s
    assert (rc["clip-norm"], rc["participation-accounting"], rc["hidden"]) == (1.5, "tight", 8)
    assert RunSettings().config.participation_accounting == "valid"


def test_participation_accounting_values_are_the_library_enum():
    from fedpriv.privacy.participation import ParticipationAccounting

    assert PARTICIPATION_ACCOUNTINGS == tuple(m.value for m in ParticipationAccounting)
    cfg = RunSettings.from_run_config({"participation-accounting": "paper"})
    assert cfg.config.participation_accounting == "paper"


@pytest.mark.parametrize(
    ("run_config", "message"),
    [
        ({"method": "forest"}, r"method must be one of \['boosting', 'logistic', 'mlp'"),
        ({"rounds": 2.7}, r"^rounds must be an integer in \[1, 10000\] .*; got 2.7$"),
        ({"rounds": True}, r"^rounds must be an integer in \[1, 10000\] .*; got True$"),
        ({"secure-aggregation": "false"}, r"^secure-aggregation must be true or false"),
        ({"epsilon": math.nan}, r"^epsilon must lie in \(0, inf\] \(inf = non-private\); got nan"),
        ({"epsilon": 0.0}, r"^epsilon must lie in \(0, inf\]"),
        ({"delta": 1.0}, r"^delta must lie in \[0, 1\); got 1.0"),
        (
            {"learning-rate": math.inf},
            r"^learning-rate must be a finite number in \(0, inf\); got inf",
        ),
        ({"method": "lumberjack", "trees": 0}, r"trees must be an integer in \[1, inf\); got 0"),
        (
            {"method": "lumberjack", "structure-fraction": 1.0},
            r"structure_fraction must lie in \(0, 1\); got 1.0",
        ),
        ({"method": "mlp", "hidden": 0}, r"hidden must be an integer in \[1, inf\); got 0"),
        (
            {"method": "logistic", "backend": "jax"},
            r"backend must be one of \['fast', 'opacus'\]; got 'jax'",
        ),
        (
            {"participation-accounting": "effective"},
            r"participation-accounting must be one of \['valid', 'tight', 'paper'\]",
        ),
        ({"trees": 3}, r"key 'trees' does not apply to method 'boosting'; boosting takes: "),
        ({"clip": 1.0}, r"unknown run-config key 'clip'"),
        # A dataset's public client counts: Heart is 4 hospitals.
        (
            {"dataset": "heart", "num-clients": 3},
            r"num_clients must lie in \[4, 4\] for dataset 'heart'; got 3",
        ),
        (
            {"dataset": "diabetes130", "num-clients": 22},
            r"num_clients must lie in \[2, 21\] for dataset 'diabetes130'; got 22",
        ),
        ({"dataset": "no-such-corpus"}, r"dataset must be one of \["),
        ({"round-timeout": 0.0}, r"round_timeout must lie in \(0, 86400\] seconds"),
        ({"setup-timeout": -1.0}, r"setup_timeout must lie in \(0, 86400\] seconds"),
        # Secure aggregation needs two parties: K = 1 is refused for every corpus.
        (
            {"dataset": "adult", "num-clients": 1},
            r"^num_clients must be an integer in \[2, 1000\]; got 1 \(secure aggregation needs "
            r"two parties",
        ),
        ({"num-clients": 0}, r"^num_clients must be an integer in \[2, 1000\]"),
        ({"num-clients": 1001}, r"^num_clients must be an integer in \[2, 1000\]; got 1001"),
        ({"max-records": 10**9 + 1}, r"^max_records must be an integer in \[1, 1000000000\]"),
        ({"ping-rounds": 1001}, r"^ping_rounds must be an integer in \[0, 1000\]; got 1001"),
        ({"max-aborted-share": 1.5}, r"^max_aborted_share must lie in \[0, 1\]; got 1.5$"),
        ({"max-aborted-share": -0.1}, r"^max_aborted_share must lie in \[0, 1\]"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_key_value_and_range(run_config, message):
    with pytest.raises(SettingError, match=message) as info:
        RunSettings.from_run_config(run_config)
    assert "\n" not in str(info.value)


def test_empty_string_means_the_default_and_epsilon_inf_is_the_non_private_run():
    s = RunSettings.from_run_config({k.replace("_", "-"): "" for k in RunSettings.all_keys()})
    assert s == RunSettings()
    assert RunSettings.from_run_config({"epsilon": math.inf}).private is False
    assert RunSettings().private and RunSettings().epsilon == 2.0


def test_each_method_brings_its_paper_defaults_and_delta():
    lj = RunSettings.from_run_config({"method": "lumberjack"})
    assert (lj.config.trees, lj.config.depth, lj.delta) == (30, 49, 1e-6)
    assert lj.rounds == 8  # 7 stages of 7 levels, then the leaf round: derived, never set
    mlp = RunSettings.from_run_config({"method": "mlp", "rounds": 50})
    assert (mlp.rounds, mlp.config.learning_rate, mlp.config.sampling_rate) == (50, 3.0, 0.02)
    assert RunSettings.from_run_config({"method": "random_forest"}).rounds == 1
    assert RunSettings().rounds == 75 and RunSettings().delta == 1e-5


def test_timeouts_and_abort_tolerance_defaults():
    s = RunSettings()
    # A round of in-memory work takes ~0.3 s (simulation) to a few s (deployment): a
    # dead node stalls its rounds for seconds, not minutes; the key exchange, where
    # nodes load their rows and compile kernels, keeps the long wait.
    assert (s.round_timeout, s.setup_timeout, s.node_wait_timeout) == (30.0, 300.0, 300.0)
    assert s.max_aborted_share == 0.25
    assert RunSettings.from_run_config({"max-aborted-share": 0}).max_aborted_share == 0.0


def test_pyproject_lists_every_key_once_with_the_empty_default():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        app = tomllib.load(fh)["tool"]["flwr"]["app"]["config"]
    assert sorted(app) == sorted(k.replace("_", "-") for k in RunSettings.all_keys())
    assert set(app.values()) == {""}  # defaults live in the code, stated once


def test_registry_records_resolve_and_their_configs_are_frozen_and_keyword_only():
    for m in methods():
        cfg = m.make_config()
        with pytest.raises(AttributeError):
            cfg.rounds = 1  # frozen
        with pytest.raises(TypeError):
            m.config_class(1)  # keyword-only
        assert m.client_handler() is not None
        assert m.estimator_class.method == m.name
        assert set(method_defaults(m)) == set(m.config_fields)
    assert get_method("mlp").config_class is MLPConfig


@pytest.mark.parametrize(
    ("launcher", "args", "key"),
    [
        ("fedpriv.server.simulate", ["--set", "rounds=2.7"], "rounds"),
        (
            "fedpriv.server.deploy",
            ["--set", "method=lumberjack", "--set", "epsilon=nan"],
            "epsilon",
        ),
        (
            "fedpriv.server.simulate",
            ["--set", "dataset=heart", "--set", "num-clients=3"],
            "num_clients",
        ),
    ],
)
def test_launchers_exit_2_with_one_line_before_any_process_starts(launcher, args, key, tmp_path):
    cp = subprocess.run(
        [sys.executable, "-m", launcher, *args, "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cp.returncode == 2
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], cp.stderr
    assert not any(tmp_path.iterdir())  # nothing was started, nothing written


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        # The PLD's size bounds z below: refused by the declared range before calibrating.
        ({"epsilon": 1e6}, "epsilon must lie in (0, 20] or be inf"),
        ({"sampling-rate": 1e-9}, "sampling-rate must exceed"),  # (0, δ)-DP without noise
        ({"method": "logistic", "delta": 1e-300}, "delta must lie in (1e-15, 0.01]"),
    ],
)
def test_a_plan_no_noise_can_certify_is_refused_before_anything_starts(overrides, key):
    from fedpriv.server.launch import resolve_run

    with pytest.raises(SettingError) as err:
        resolve_run({}, overrides)
    assert key in str(err.value)
