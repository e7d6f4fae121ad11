"""The allowed range of every run-config key, for ``--help`` (one table).

The checks themselves live where the values are parsed
(:mod:`fedpriv.federation.settings` for the run's keys, each configuration
dataclass's ``__post_init__`` for a method's); this table only states them
for people. Choices and booleans are read off the types (an Enum's values,
``true | false``), so only numeric ranges are written here.
``tests/server/test_cli.py`` probes each interval's end points against the
parser, so a range changed there and not here fails a test.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from enum import Enum
from typing import Any

from fedpriv.federation.limits import (
    DELTA_MAX,
    DELTA_MIN,
    EPSILON_MAX,
    SIZE_LIMITS,
    run_size_range,
)


def _most(method: str, key: str) -> str:
    """A size setting's declared upper bound (:data:`fedpriv.federation.limits.SIZE_LIMITS`)."""
    return f"{SIZE_LIMITS[method][key][0]}"


#: Numeric ranges of the run's own keys (kebab-case, as in a run config).
RUN_RANGES: dict[str, str] = {
    "epsilon": f"(0, {EPSILON_MAX:g}] or inf (inf: the non-private reference)",
    "delta": f"({DELTA_MIN:g}, {DELTA_MAX:g}] (a private run)",
    "tolerated-dropouts": "[0, num-clients − 2] (distributed noise)",
    "participation": "(0, 1]",
    "seed": "[0, inf)",
    "split-seed": "[0, inf)",
    "out-dir": "a directory",
    "secagg-threshold": "[0, 1)",
    "round-timeout": "(0, 86400] s",
    "setup-timeout": "(0, 86400] s",
    "node-wait-timeout": "(0, 86400] s",
    "max-aborted-share": "[0, 1]",
    "ping-rounds": run_size_range("ping_rounds"),
    "max-records": f"{run_size_range('max_records')} (and max-records × num-clients × a "
    "record's bound < 2^31)",
    "poll-interval": "(0, 10] s",
}

#: DP-SGD's automatic rounds and sampling rate (fedpriv.strategies.dpsgd_schedule).
AUTO_SCHEDULE = "from the public record bound, fedpriv.strategies.dpsgd_schedule"

#: Numeric ranges of each built-in method's keys (a key's range may differ by method).
METHOD_RANGES: dict[str, dict[str, str]] = {
    "boosting": {
        "rounds": f"[1, {_most('boosting', 'rounds')}] (and rounds × 2^depth ≤ 2^23)",
        "depth": "[1, 12]",
        "learning-rate": "(0, inf)",
        "sampling-rate": "(0, 1]",
        "lam": "[0, inf)",
        "reg-lambda": "(0, inf)",
    },
    "logistic": {
        # centring, 2 recalibration rounds and a step; fewer with shares 0
        "rounds": f"[4, {_most('logistic', 'rounds')}] or 0 (automatic: {AUTO_SCHEDULE})",
        "learning-rate": f"[0, inf) (0: automatic, {AUTO_SCHEDULE})",
        "sampling-rate": f"[0, 1] (0: automatic, {AUTO_SCHEDULE})",
        "clip-norm": "(0, inf)",
        "centre-share": "[0, 1)",
        "recalibrate-share": "[0, 1 − centre-share)",
        "recalibration": "auto | bias | linear",
    },
    "lumberjack": {
        "trees": f"[0, {_most('lumberjack', 'trees')}] (0: automatic; and trees × "
        "max-frontier × 2^stage-height ≤ 2^23)",
        "depth": "[0, 200] (0: automatic)",
        "structure-fraction": "(0, 1)",
        "gate": "[0, inf)",
        "stage-height": "[1, 10]",
        "max-frontier": f"[1, {_most('lumberjack', 'max_frontier')}]",
        "recalibrate-share": "[0, 1)",
    },
    "random_forest": {
        "trees": f"[1, {_most('random_forest', 'trees')}] (and trees × 2^depth ≤ 2^23)",
        "depth": "[0, 16] (0: automatic)",
    },
    "dp_gam": {
        "rounds": f"[2, {_most('dp_gam', 'rounds')}]",
        "bins": "[2, 256]",
        "learning-rate": "(0, inf)",
        "lam": "[0, inf)",
        "reg-lambda": "(0, inf)",
        "max-update": "(0, inf)",
        "interactions": "[0, inf) (at most the candidates' pairs)",
        "interaction-rounds": "[2, inf) (at most rounds − 2 with interactions)",
        "interaction-candidates": f"[2, {_most('dp_gam', 'interaction_candidates')}]",
        "interaction-bins": "[2, 256]",
        "column-order": "cyclic | gain",
        "smooth": "[0, inf) (bins)",
        "binary-group": "[0, inf) (0: one round per binary column)",
    },
    "bdpe": {
        "trees": "[1, 1000]",
        "depth": "[1, 10]",
        "alpha": "(0, 1]",
        "beta-tree": "(0, 1)",
        "split-levels": "[1, 255]",
        "oc-edge": "(0, 1]",
        "oc-k": "[0, inf)",
        "calibrate-share": "[0, 1) (0: no calibration round)",
    },
}
METHOD_RANGES["mlp"] = {
    **METHOD_RANGES["logistic"],
    "rounds": f"[4, {_most('mlp', 'rounds')}] or 0 (automatic: {AUTO_SCHEDULE})",
    "hidden": f"[1, {_most('mlp', 'hidden')}]",
}

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
    typed = _typed(RunSettings, key.replace("-", "_"))
    return typed or RUN_RANGES.get(key, UNKNOWN)


def method_range(method: str, key: str) -> str:
    """Allowed values of method ``method``'s key ``key`` (kebab-case)."""
    from fedpriv.methods import get_method

    typed = _typed(get_method(method).config_class, key.replace("-", "_"))
    return typed or METHOD_RANGES.get(method, {}).get(key, UNKNOWN)


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
