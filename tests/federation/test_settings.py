"""Run settings: validation, run-config round trip, per-method paper defaults."""

import pytest

from fedpriv.federation.settings import METHOD_DEFAULTS, RunSettings


def test_round_trip_through_a_run_config():
    s = RunSettings(
        method="mlp",
        hidden=8,
        clip_norm=1.5,
        backend="opacus",
        standardise=False,
        participation=0.5,
        participation_accounting="tight",
    )
    again = RunSettings.from_run_config(s.to_run_config())
    assert again == s
    assert s.to_run_config()["clip-norm"] == 1.5
    assert s.to_run_config()["participation-accounting"] == "tight"
    assert RunSettings().participation_accounting == "valid"


def test_participation_accounting_values_are_the_library_enum():
    from fedpriv.federation.settings import PARTICIPATION_ACCOUNTINGS
    from fedpriv.privacy.participation import ParticipationAccounting

    assert PARTICIPATION_ACCOUNTINGS == tuple(m.value for m in ParticipationAccounting)
    cfg = RunSettings.from_run_config({"participation-accounting": "paper"})
    assert cfg.participation_accounting == "paper"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "method",
            "forest",
            r"method must be one of \['boosting', 'logistic', 'mlp', 'lumberjack', "
            r"'random_forest'\]",
        ),
        ("trees", 0, r"trees must be an integer in \[1, inf\); got 0"),
        ("structure_fraction", 1.0, r"structure_fraction must lie in \(0, 1\); got 1.0"),
        ("clip_norm", 0.0, r"clip_norm must lie in \(0, inf\); got 0.0"),
        ("hidden", 0, r"hidden must be an integer in \[1, inf\); got 0"),
        ("backend", "jax", "backend must be 'fast' or 'opacus'; got 'jax'"),
        ("epsilon", -1.0, r"epsilon must lie in \[0, inf\)"),
        (
            "participation_accounting",
            "effective",
            r"participation_accounting must be one of \['valid', 'tight', 'paper'\]; "
            r"got 'effective'",
        ),
    ],
)
def test_out_of_range_values_are_refused_with_the_allowed_range(key, value, message):
    with pytest.raises(ValueError, match=message):
        RunSettings(**{key: value})


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="unknown run-config key 'clip'"):
        RunSettings.from_run_config({"clip": 1.0})


def test_method_defaults_fill_only_what_the_user_did_not_set():
    base = RunSettings().to_run_config()
    mlp = RunSettings.with_method_defaults({**base, "method": "mlp"}, {"method": "mlp"})
    assert (mlp["rounds"], mlp["learning-rate"], mlp["sampling-rate"]) == (800, 3.0, 0.02)
    own = RunSettings.with_method_defaults(
        {**base, "method": "logistic", "rounds": 50}, {"method": "logistic", "rounds": 50}
    )
    assert (own["rounds"], own["learning-rate"]) == (50, 2.0)
    assert RunSettings.with_method_defaults(base, {}) == base  # boosting: pyproject's values
    assert set(METHOD_DEFAULTS) == {"boosting", "logistic", "mlp", "lumberjack", "random_forest"}
    mine = {"method": "lumberjack", "depth": 20, "rounds": 20}
    forest = RunSettings.with_method_defaults({**base, **mine}, mine)
    assert (forest["rounds"], forest["depth"], forest["delta"]) == (20, 20, 1e-6)
    # One round per stage of 7 levels, then the leaf round: depth 100 takes 15 + 1.
    with pytest.raises(ValueError, match="rounds must be 16 for depth=100; got rounds=75"):
        RunSettings(method="lumberjack", rounds=75, depth=100)
    assert RunSettings(method="lumberjack", rounds=8, depth=49).rounds == 8
