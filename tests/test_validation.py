"""fedpriv.validation: strict checks whose errors name the key, the value and the range."""

import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedpriv.validation import (
    check_choice,
    check_count,
    check_delta,
    check_finite,
    check_finite_array,
    check_generator,
    check_int,
    check_open_unit,
    check_positive,
    check_probability,
)

finite_positive = st.floats(min_value=0.0, exclude_min=True, allow_infinity=False)
non_integer_floats = st.floats(allow_nan=True, allow_infinity=True).filter(
    lambda x: not math.isfinite(x) or x != int(x)
)


@given(finite_positive)
def test_every_finite_positive_float_passes_check_positive(x):
    assert check_positive("x", x) == x
    assert check_positive("x", x, allow_inf=True) == x


@given(st.floats(max_value=0.0) | st.just(math.nan) | st.just(math.inf))
def test_nonpositive_nan_and_inf_fail_check_positive(x):
    with pytest.raises(ValueError, match=r"x must lie in \(0, inf\); got"):
        check_positive("x", x)


@given(non_integer_floats)
def test_every_non_integer_float_fails_check_int(x):
    with pytest.raises(TypeError, match=r"rounds must be an integer in \[1, inf\); got"):
        check_int("rounds", x, minimum=1)


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_every_integer_in_range_passes_check_int_and_outside_fails(n):
    assert check_int("n", n) == n
    assert check_int("n", np.int64(n % 2**62)) == n % 2**62
    if n >= 3:
        assert check_count("n", n, minimum=3) == n
    else:
        with pytest.raises(ValueError, match=rf"n must be an integer in \[3, inf\); got {n}$"):
            check_count("n", n, minimum=3)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_passes_check_finite(x):
    assert check_finite("x", x) == x


def test_message_names_key_value_and_range():
    with pytest.raises(TypeError, match=r"^rounds must be an integer in \[1, inf\); got 2\.7 "):
        check_int("rounds", 2.7, minimum=1)
    with pytest.raises(ValueError, match=r"^depth must be an integer in \[1, 64\]; got 65$"):
        check_int("depth", 65, minimum=1, maximum=64)
    with pytest.raises(ValueError, match=r"^depth must be an integer in \(-inf, 64\]; got 65$"):
        check_int("depth", 65, maximum=64)
    with pytest.raises(ValueError, match=r"^lr must lie in \(-inf, inf\); got nan$"):
        check_finite("lr", math.nan)
    with pytest.raises(ValueError, match=r"^eps must lie in \(0, inf\]; got -1\.0$"):
        check_positive("eps", -1.0, allow_inf=True)


@pytest.mark.parametrize(
    "check",
    [check_positive, check_finite, check_delta, check_probability, check_open_unit],
)
def test_bool_and_non_numbers_are_not_real_numbers(check):
    for bad in (True, False, "0.5", None, np.bool_(True)):
        with pytest.raises(TypeError, match=r"^rate must be a real number in .*; got .*\(\w+\)$"):
            check("rate", bad)


def test_bool_and_integral_float_are_not_integers():
    for bad in (True, np.bool_(False), 3.0, np.float64(3.0), "3"):
        with pytest.raises(TypeError, match=r"^k must be an integer in \[0, inf\); got "):
            check_count("k", bad, minimum=0)


@pytest.mark.parametrize(
    ("check", "inside", "outside", "allowed"),
    [
        (check_delta, [0.0, 0.5, np.nextafter(1.0, 0.0)], [1.0, -1e-300, math.nan], "[0, 1)"),
        (check_probability, [1e-300, 1.0], [0.0, 1.0 + 1e-15, math.nan], "(0, 1]"),
        (check_open_unit, [1e-300, 0.5], [0.0, 1.0, math.nan, math.inf], "(0, 1)"),
        (check_positive, [1e-300, 1e300], [0.0, -0.0, math.inf, math.nan], "(0, inf)"),
    ],
)
def test_interval_ends(check, inside, outside, allowed):
    for x in inside:
        assert check("p", x) == x
    for x in outside:
        with pytest.raises(ValueError, match=rf"^p must lie in {re.escape(allowed)}"):
            check("p", x)


def test_infinity_only_where_allowed():
    assert check_positive("epsilon", math.inf, allow_inf=True) == math.inf
    for check in (check_finite, check_positive):
        with pytest.raises(ValueError, match="got inf"):
            check("epsilon", math.inf)


def test_check_choice_compares_value_and_type():
    assert check_choice("backend", "fast", ("fast", "opacus")) == "fast"
    assert check_choice("depth", 3, (1, 3)) == 3
    only = r"^backend must be one of \['fast', 'opacus'\]; got 'jax'$"
    with pytest.raises(ValueError, match=only):
        check_choice("backend", "jax", ("fast", "opacus"))
    # == alone would accept these: True == 1 and 1.0 == 1.
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match=r"must be one of \[1, 2\]; got"):
            check_choice("k", bad, (1, 2))
    assert check_choice("flag", True, (True, False)) is True


def test_finite_array_and_generator():
    assert check_finite_array("v", [1, 2]).dtype == np.float64
    with pytest.raises(ValueError, match=r"v must be finite everywhere .* found nan at index \(1,"):
        check_finite_array("v", [0.0, np.nan])
    with pytest.raises(ValueError, match=r"v must be non-empty; got shape \(0,\)"):
        check_finite_array("v", [])
    with pytest.raises(ValueError, match=r"v must be 2-dimensional; got shape \(2,\)"):
        check_finite_array("v", [0.0, 1.0], ndim=2)
    rng = np.random.default_rng(0)
    assert check_generator("rng", rng) is rng
    with pytest.raises(TypeError, match=r"rng must be an injected numpy\.random\.Generator"):
        check_generator("rng", np.random)


def test_importing_validation_loads_neither_the_privacy_package_nor_flower():
    code = (
        "import sys, fedpriv.validation; "
        "print(sorted(m for m in sys.modules if m.startswith(('fedpriv.privacy', 'flwr'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
