"""Cells draw private randomness from the injected key (per cell), never from their seed."""

import pytest
from fedpriv.experiments import keys
from fedpriv.experiments.bench.cells import Cell, fit_cell

from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_hex

CELL = Cell.make(
    "fit", "synthetic", "boosting", {"rounds": 3, "depth": 2}, epsilon=1.0, delta=1e-5, seed=0
)


@pytest.fixture
def inject(monkeypatch):
    """``inject(i)``: this process's experiments key becomes test key i (None: unset)."""

    def _inject(i):
        if i is None:
            monkeypatch.delenv(KEY_ENV, raising=False)
        else:
            monkeypatch.setenv(KEY_ENV, key_hex(i))
        keys.process_key.cache_clear()  # read once per process: start a new "process"

    yield _inject
    keys.process_key.cache_clear()


def _without_timing(result):
    return {k: v for k, v in result.items() if k != "seconds"}


def test_a_cell_replays_under_an_injected_key_and_not_under_another(inject):
    inject(0)
    first, again = fit_cell(CELL), fit_cell(CELL)
    assert _without_timing(first) == _without_timing(again)
    inject(1)
    other = fit_cell(CELL)
    assert other["noise_multiplier"] == first["noise_multiplier"]  # same public plan
    assert other["auc"] != first["auc"]  # other noise and coins


def test_one_subkey_per_cell_and_fresh_entropy_without_a_key(inject):
    other_cell = Cell.make(
        "fit", "synthetic", "boosting", {"rounds": 3, "depth": 2}, epsilon=1.0, delta=1e-5, seed=1
    )
    inject(0)
    key, cache_key = keys.secret_key_for("cell", CELL.key), CELL.key
    assert keys.secret_key_for("cell", CELL.key) == key
    assert keys.secret_key_for("cell", other_cell.key) != key
    inject(1)
    assert keys.secret_key_for("cell", CELL.key) != key
    assert CELL.key == cache_key  # the cache key never depends on the secret
    inject(None)
    fresh = keys.process_key()
    assert fresh.certified and keys.process_key() is fresh  # read once per process
    inject(None)
    assert keys.process_key() != fresh  # a new process draws a new key
