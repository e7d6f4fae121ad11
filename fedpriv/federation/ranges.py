"""The allowed range of every run-config key, for ``--help`` and the reference page.

Read off each field's declared constraint (:mod:`fedpriv.federation.constraints`:
``RunSettings``'s fields and each method's configuration dataclass), the same
statement the checks use, so the text cannot drift from them. Choices and
booleans are read off the types (an Enum's values, ``true | false``).
"""

from __future__ import annotations

import typing
from dataclasses import fields
from enum import Enum
from typing import Any

from fedpriv.federation.constraints import constraint_of
from fedpriv.federation.limits import run_size_range

#: What a key without an entry shows (a plugin's key).
UNKNOWN = "see the method's documentation"


def _typed(cls: type, name: str) -> str | None:
    """``true | false`` or an Enum's values for field ``name`` of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    if name not in hints:
        return None
    tp = hints[name]
    if typing.get_origin(tp) is not None:  # X | None
        tp = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    if tp is bool:
        return "true | false"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return " | ".join(str(m.value) for m in tp)
    return None


def _declared(cls: type, name: str) -> str:
    """Field ``name`` of ``cls``: its type's values, else its declared constraint's text
    as a run config holds it (with the memory bound and the notes on other fields)."""
    typed = _typed(cls, name)
    if typed:
        return typed
    c = constraint_of(cls, name)
    return UNKNOWN if c is None else c.text(run=True)


def run_range(key: str) -> str:
    """Allowed values of the run's own key ``key`` (kebab-case)."""
    from fedpriv.data.corpora import LOADERS, client_counts
    from fedpriv.federation.settings import RunSettings
    from fedpriv.methods import method_names

    if key == "method":
        return " | ".join(method_names())
    if key == "dataset":
        return " | ".join(sorted(LOADERS))
    if key == "num-clients":
        per = []
        for name in sorted(LOADERS):
            lo, hi = client_counts(name)
            if hi is not None:
                per.append(f"{name} {lo}" if lo == hi else f"{name} [{lo}, {hi}]")
        return f"{run_size_range('num_clients')}; " + ", ".join(per)
    return _declared(RunSettings, key.replace("-", "_"))


def method_range(method: str, key: str) -> str:
    """Allowed values of method ``method``'s key ``key`` (kebab-case)."""
    from fedpriv.methods import get_method

    return _declared(get_method(method).config_class, key.replace("-", "_"))


def all_ranges() -> dict[str, dict[str, str]]:
    """``{"run": {key: range}, method: {key: range}, ...}`` for every registered key."""
    from fedpriv.federation.settings import RunSettings
    from fedpriv.methods import methods

    out: dict[str, dict[str, Any]] = {
        "run": {k.replace("_", "-"): run_range(k.replace("_", "-")) for k in RunSettings.run_keys()}
    }
    for m in methods():
        keys = [f.name.replace("_", "-") for f in fields(m.config_class)]
        out[m.name] = {k: method_range(m.name, k) for k in keys}
    return out
