"""Each setting's range is declared once, on its field, and the checks honour it.

Every field of every registered method's configuration and of ``RunSettings`` has a
declared constraint, or a type that states its values (a boolean, an Enum); each
declared interval's end points are accepted or refused exactly as its text says,
through the run-config parser (the run's bounds, with the memory bound ``most``) and
through the configuration dataclass itself (the library's bounds).
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields
from enum import Enum

import pytest

from fedpriv.federation.constraints import Interval, Options, Text, constraint_of, constraints
from fedpriv.federation.ranges import UNKNOWN, method_range, run_range
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.methods import methods

#: Fields whose values a registry states (the methods, the bundled corpora).
REGISTRY_KEYS = {"method", "dataset"}
#: Other fields a run needs set for an end point to be judged on its own: DP-SGD's
#: fewest rounds need no centring and no recalibration round, and its shares' ends
#: the other share at 0; the clients' bounds
#: hold on a user's file (a bundled corpus has its own client counts).
_SGD = {
    "rounds": {"centre-share": 0.0, "recalibrate-share": 0.0},
    "centre_share": {"recalibrate-share": 0.0},  # their sum stays below 1
    "recalibrate_share": {"centre-share": 0.0},
}
ALONE = {
    "logistic": _SGD,
    "mlp": _SGD,
    "run": {"num_clients": {"csv": "rows.csv"}},
}


def _owners():
    yield "run", RunSettings
    for m in methods():
        yield m.name, m.config_class


def _plain(tp):
    if typing.get_origin(tp) is not None:  # X | None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


@pytest.mark.parametrize(("owner", "cls"), list(_owners()), ids=[o for o, _ in _owners()])
def test_every_setting_declares_its_range_or_has_a_type_that_states_it(owner, cls):
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name == "config" or (owner == "run" and f.name in REGISTRY_KEYS):
            continue
        tp = _plain(hints[f.name])
        c = constraint_of(cls, f.name)
        if tp is bool or (isinstance(tp, type) and issubclass(tp, Enum)):
            assert c is None, (owner, f.name)  # the type says it: declared once
            continue
        assert isinstance(c, Interval | Options | Text), (owner, f.name)
        if isinstance(c, Interval):
            assert (tp is int) == (c.kind is int), (owner, f.name)
            default = f.default
            assert default is None or c.accepts(default), (owner, f.name, default)
        key = f.name.replace("_", "-")
        shown = run_range(key) if owner == "run" else method_range(owner, key)
        assert shown != UNKNOWN
        if owner != "run" or f.name != "num_clients":  # which adds the corpora's counts
            assert shown == c.text(run=True)


def _ends(c: Interval, *, run: bool):
    """(value, accepted) at each finite end of ``c`` and one step outside it."""

    def step(x, way):
        return x + way if c.kind is int else math.nextafter(x, way * math.inf)

    closed_lo, closed_hi = c.ends
    high = c.most[0] if run and c.most else c.high
    closed_hi = closed_hi or (run and c.most is not None)
    out = []
    if c.low is not None:
        low = c.kind(c.low)
        out += [(low, closed_lo or (bool(c.zero) and low == 0)), (step(low, +1), True)]
        out.append((step(low, -1), bool(c.zero) and step(low, -1) == 0))
    if high is not None:
        high = c.kind(high)
        out += [(high, closed_hi), (step(high, -1), True), (step(high, +1), False)]
    if c.zero:
        out.append((c.kind(0), True))
    if c.inf:
        out.append((math.inf, True))
    return out


def _cases():
    for owner, cls in _owners():
        for name, c in constraints(cls).items():
            if isinstance(c, Interval):
                yield owner, cls, name, c


CASES = list(_cases())


@pytest.mark.parametrize(
    ("owner", "cls", "name", "c"), CASES, ids=[f"{o}-{n}" for o, _, n, _ in CASES]
)
def test_each_end_point_is_accepted_or_refused_as_the_range_says(owner, cls, name, c):
    key = name.replace("_", "-")
    alone = ALONE.get(owner, {}).get(name, {})
    base = alone if owner == "run" else {"method": owner, **alone}
    for value, accepted in _ends(c, run=True):
        try:
            RunSettings.from_run_config({**base, key: value})
            got = True
        except SettingError:
            got = False
        assert got is accepted, (owner, key, value, c.text(run=True))
    if owner == "run":
        return
    # The configuration dataclass itself: the library's range (no memory bound).
    plain = {k.replace("-", "_"): v for k, v in alone.items()}
    for value, accepted in _ends(c, run=False):
        try:
            cls(**plain, **{name: value})
            got = True
        except (TypeError, ValueError):
            got = False
        assert got is accepted, (owner, name, value, c.text())


def test_the_probes_cover_every_declared_interval():
    assert len(CASES) >= 60
    assert {o for o, *_ in CASES} == {"run"} | {m.name for m in methods()}


def test_a_value_of_the_wrong_type_or_outside_is_refused_in_the_one_message_format():
    c = Interval(1, 12, kind=int)
    with pytest.raises(ValueError, match=r"^depth must be an integer in \[1, 12\]; got 13$"):
        c.check("depth", 13)
    with pytest.raises(TypeError, match=r"^depth must be an integer in \[1, 12\]; got 2\.0 "):
        c.check("depth", 2.0)
    with pytest.raises(TypeError, match=r"^depth must be an integer in .*; got True \(bool\)"):
        c.check("depth", True)
    r = Interval(0, 1, closed="right")
    with pytest.raises(ValueError, match=r"^alpha must lie in \(0, 1\]; got 2\.0$"):
        r.check("alpha", 2.0)
    for bad in (math.nan, math.inf, 0.0):
        with pytest.raises(ValueError):
            r.check("alpha", bad)
    auto = Interval(0, None, closed="neither", zero="0: automatic")
    assert auto.check("lr", 0) == 0 and auto.text() == "(0, inf) or 0 (0: automatic)"
    with pytest.raises(ValueError, match=r"^lr must lie in \(0, inf\) or 0 \(0: automatic\)"):
        auto.check("lr", -1.0)
    sized = Interval(1, None, kind=int, most=(10, "why"), note="and more")
    assert sized.text() == "[1, inf)" and sized.text(run=True) == "[1, 10] (and more)"
