"""Registration checks a method's whole contract, part by part, before any run.

Every registered method (the built-ins, unchecked at import) passes the same
checker a plugin's registration runs; a plugin missing a part is refused at
registration with the part's name, and stays out of the registry.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import fedpriv.methods as registry
from fedpriv.federation.protocol import ClientHandler, Strategy
from fedpriv.method_check import MethodContractError, check_method
from fedpriv.methods import (
    StrategyContext,
    get_method,
    method_names,
    methods,
    register_method,
    unregister_method,
)
from fedpriv.models.base import ReleasedModel
from tests.federation.test_toy_method import NAME, TOY, install, write_plugin

HERE = __name__


@pytest.fixture
def toy():
    """The toy registered (checked) for one test; a broken variant tries to replace it."""
    module = importlib.import_module(TOY)
    register_method(module.METHOD, replace=True)
    yield module
    unregister_method(NAME)


@pytest.mark.parametrize("name", method_names())
def test_every_registered_method_meets_the_contract(name):
    m = get_method(name)
    check_method(m)  # imports every part: raises naming the first that fails
    assert issubclass(m.model_class, ReleasedModel)
    assert issubclass(registry.resolve(m.client), ClientHandler)
    strategy = m.build_strategy(
        m.make_config(), StrategyContext(schema=None, n_features=3, n_records=100)
    )
    assert isinstance(strategy, Strategy) and not isinstance(strategy, type)


# -- broken parts: each misses one piece of its contract ------------------------------
class HalfClient(ClientHandler):
    """Implements neither of the handler's methods."""


class NoSensitivity(ClientHandler):
    def answer(self, query, data, sample, state, key=None):
        return np.zeros(2)


class DuckClient:
    """Has both methods but is no ClientHandler."""

    def answer(self, query, data, sample, state, key=None):
        return np.zeros(2)

    def reply_sensitivity(self, query):
        raise ValueError


class NeedsArgsClient(ClientHandler):
    def __init__(self, module) -> None:
        self.module = module

    def answer(self, query, data, sample, state, key=None):
        return np.zeros(2)

    def reply_sensitivity(self, query):
        raise ValueError


@dataclass(kw_only=True)
class LooseConfig:
    rounds: int = 1
    sampling_rate: float = 0.5


@dataclass(frozen=True)
class PositionalConfig:
    rounds: int = 1
    sampling_rate: float = 0.5


@dataclass(frozen=True, kw_only=True)
class NoRateConfig:
    rounds: int = 1


@dataclass(frozen=True, kw_only=True)
class ListConfig:
    rounds: int = 1
    sampling_rate: float = 0.5
    widths: list = dataclasses.field(default_factory=list)


class _Scores:
    """predict_proba, decision_function and to_arrays of a model releasing nothing."""

    def predict_proba(self, X):
        return np.zeros(len(X))

    def decision_function(self, X):
        return np.zeros(len(X))

    def to_arrays(self):
        return {}


class ArraylessModel(_Scores, ReleasedModel):
    """Every part of the model contract but ``from_arrays``."""


class StaticModel(_Scores):
    """Every method of a model, but not a :class:`ReleasedModel` subclass."""

    def from_arrays(self, arrays):
        return self


class QuietStrategy(Strategy):
    """A strategy without noise_std: no distributed-noise form."""

    def begin(self, **kw):
        pass

    def next_query(self):
        return None

    def update(self, query, aggregate):
        pass

    def model(self):
        return None

    def node_stages(self):
        return []


def build_quiet(config, context) -> QuietStrategy:
    return QuietStrategy()


def build_plain(config, context):
    return object()


BROKEN = [
    ("config", f"{HERE}:LooseConfig", "is not a frozen dataclass"),
    (
        "config",
        f"{HERE}:PositionalConfig",
        r"has positional field\(s\) \['rounds', 'sampling_rate'\]",
    ),
    ("config", f"{HERE}:NoRateConfig", "has no 'sampling_rate' in \\(0, 1\\]"),
    ("config", f"{HERE}:ListConfig", "field 'widths' has type <class 'list'>"),
    ("strategy", f"{HERE}:HERE", "is not callable"),
    ("strategy", f"{HERE}:build_quiet", "has no noise_std"),
    (
        "client",
        f"{HERE}:HalfClient",
        "does not implement ClientHandler.answer, ClientHandler.reply_sensitivity$",
    ),
    ("client", f"{HERE}:DuckClient", "does not subclass fedpriv.federation.protocol.ClientHandler"),
    ("client", f"{HERE}:NeedsArgsClient", "cannot be built with no arguments"),
    ("client", f"{HERE}:Missing", "cannot be imported"),
    ("model", f"{HERE}:ArraylessModel", "does not implement ReleasedModel.from_arrays"),
    ("model", f"{HERE}:StaticModel", "does not subclass fedpriv.models.base.ReleasedModel"),
    ("estimator", "fedpriv.server.estimators:DPBoostingClassifier", "of method 'boosting'"),
    ("estimator", f"{HERE}:StaticModel", "does not subclass fedpriv.server.method_estimator"),
    ("kernels", "tests.federation.toy_estimator", r"has no warm_up\(\)"),
    ("maths", "tests.federation.no_such_module", "cannot be imported"),
]


@pytest.mark.parametrize(
    ("part", "path", "match"), BROKEN, ids=[f"{p}-{m[:24]}" for p, _, m in BROKEN]
)
def test_a_missing_part_is_refused_at_registration_naming_it(toy, part, path, match):
    broken = dataclasses.replace(toy.METHOD, **{part: path})
    expected = re.escape(f"method {NAME!r}: {part} {path!r} ") + ".*" + match
    with pytest.raises(MethodContractError, match=expected):
        register_method(broken, replace=True)
    assert get_method(NAME) == toy.METHOD  # the checked record stays, the broken one is out


def test_the_message_names_the_method_the_part_and_what_it_lacks(toy):
    broken = dataclasses.replace(toy.METHOD, name="toy", client=f"{HERE}:NoSensitivity")
    with pytest.raises(MethodContractError) as err:
        register_method(broken)
    assert str(err.value) == (
        f"method 'toy': client '{HERE}:NoSensitivity' does not implement "
        "ClientHandler.reply_sensitivity"
    )
    assert "toy" not in method_names()


def test_a_strategy_factory_building_no_strategy_is_refused_before_the_run(toy):
    plain = dataclasses.replace(toy.METHOD, strategy=f"{HERE}:build_plain")
    context = StrategyContext(schema=None, n_features=2, n_records=10)
    with pytest.raises(
        TypeError, match=r"built a object, not a fedpriv\.federation\.protocol\.Strategy"
    ):
        plain.build_strategy(toy.ToyConfig(), context)
    quiet = dataclasses.replace(toy.METHOD, strategy=f"{HERE}:build_quiet")
    with pytest.raises(TypeError, match="QuietStrategy whose method is None"):
        quiet.build_strategy(toy.ToyConfig(), context)
    assert toy.METHOD.build_strategy(toy.ToyConfig(), context).method == NAME


def test_an_entry_point_may_name_a_module_and_a_broken_plugin_fails_every_lookup(tmp_path):
    assert NAME not in method_names()
    mp = pytest.MonkeyPatch()
    try:
        mp.delitem(sys.modules, "tests.federation.toy_plugin", raising=False)
        install(mp, write_plugin(tmp_path / "a", {NAME: "tests.federation.toy_plugin"}))
        assert NAME in method_names()  # importing the named module registered it
    finally:
        unregister_method(NAME)
        mp.undo()
    mp = pytest.MonkeyPatch()
    try:
        site = write_plugin(tmp_path / "b", {"broken": f"{HERE}:register_broken"}, "broken")
        install(mp, site)
        for _ in range(2):  # not loaded: the next lookup tries again, and fails again
            with pytest.raises(MethodContractError, match="does not implement") as err:
                methods()
            assert f"while loading fedpriv plugin broken = '{HERE}:register_broken'" in (
                err.value.__notes__
            )
        assert "toy_broken" not in registry._REGISTRY
    finally:
        mp.undo()


def register_broken() -> None:
    toy = importlib.import_module(TOY)
    register_method(dataclasses.replace(toy.METHOD, name="toy_broken", client=f"{HERE}:HalfClient"))
