"""Generators derive from one run seed; the same path gives the same stream everywhere."""

import subprocess
import sys

import numpy as np
import pytest

from fedpriv.seeding import derive_generator


def test_same_path_same_stream_different_path_different_stream():
    a = derive_generator(7, "client", 3, "round", 2).random(4)
    b = derive_generator(7, "client", 3, "round", 2).random(4)
    c = derive_generator(7, "client", 3, "round", 3).random(4)
    d = derive_generator(8, "client", 3, "round", 2).random(4)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c) and not np.allclose(a, d)


def test_string_paths_are_stable_across_processes():
    code = "from fedpriv.seeding import derive_generator as g; print(repr(g(1, 'server').random()))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert outs == {repr(derive_generator(1, "server").random()) + "\n"}


@pytest.mark.parametrize("seed", [-1, 1.5, True, "7"])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, inf\)"):
        derive_generator(seed)
