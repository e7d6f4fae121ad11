"""One run-config value, typed and checked: the parsing rules every setting shares.

A run config's values arrive as TOML scalars or strings (``--set key=value``);
:func:`typed_value` checks each against its field's type strictly (an integer
key refuses 2.7, a boolean refuses "false", ``""`` means the default).
:func:`config_from_values` builds a method's configuration from such values,
naming each key as the user wrote it (:func:`respell`). Used by
:class:`fedpriv.federation.settings.RunSettings` and the estimators.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, fields
from enum import Enum
from numbers import Integral, Real
from typing import Any

import numpy as np

from fedpriv.federation.limits import (
    SettingError,
    check_model_size,
    check_sizes,
    kebab,
)
from fedpriv.methods import Method
from fedpriv.validation import check_delta

#: The run-config spelling of "use the default".
UNSET = ""


def typed_value(key: str, annotation: Any, value: Any, *, allowed: str = "") -> Any:
    """``value`` checked against ``annotation`` without any lossy cast.

    ``int`` takes integers only (not 2.7, not ``True``); ``float`` takes finite
    reals (an integer is widened); ``bool`` takes booleans only; an Enum takes
    one of its values; ``str`` takes strings. ``allowed``: the key's range as
    ``--help`` states it (e.g. ``[1, 10000]``), named in a number's error.
    """
    in_ = f" in {allowed}" if allowed[:1] in ("[", "(") else ""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        parse = getattr(annotation, "parse", None)
        try:
            return parse(value) if parse else annotation(value)
        except ValueError:
            allowed = [m.value for m in annotation]
            raise SettingError(f"{key} must be one of {allowed}; got {value!r}") from None
    boolean = isinstance(value, bool | np.bool_)
    if annotation is bool:
        if not boolean:
            raise SettingError(f"{key} must be true or false; got {value!r}")
        return bool(value)
    if annotation is int:
        if boolean or not isinstance(value, Integral):
            raise SettingError(f"{key} must be an integer{in_}; got {value!r}")
        return int(value)
    if annotation is float:
        if boolean or not isinstance(value, Real):
            raise SettingError(f"{key} must be a number{in_}; got {value!r}")
        x = float(value)
        if key == "epsilon" and not x > 0:  # the run's one range (check_supported_budget)
            raise SettingError(f"epsilon must lie{in_ or ' in (0, inf]'}; got {value!r}")
        if math.isnan(x) or (math.isinf(x) and key != "epsilon"):
            raise SettingError(f"{key} must be a finite number{in_}; got {value!r}")
        return x
    if annotation is str:
        if not isinstance(value, str):
            raise SettingError(f"{key} must be a string; got {value!r}")
        return value
    raise TypeError(f"{key}: unsupported setting type {annotation!r}")


def _hints(cls: type) -> dict[str, Any]:
    """Each field's type, ``X | None`` read as ``X`` (``None`` is spelled ``""``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        out[f.name] = tp
    return out


def config_from_values(method: Method, values: Mapping[str, Any], *, spell=kebab) -> Any:
    """``method``'s configuration from snake_case ``values`` (strictly typed; errors
    name each key as ``spell`` writes it: kebab-case for a run config)."""
    from fedpriv.federation.ranges import method_range

    hints = _hints(method.config_class)
    kwargs = {
        k: typed_value(spell(k), hints[k], v, allowed=method_range(method.name, kebab(k)))
        for k, v in values.items()
        if v != UNSET
    }
    check_sizes(method.name, kwargs, spell=spell)
    try:
        config = method.make_config(**kwargs)
    except (TypeError, ValueError) as exc:
        # A configuration checks its fields by their Python names: name them as the
        # user wrote them (kebab-case in a run config), as every other error does.
        raise SettingError(respell(str(exc), method.config_fields, spell)) from None
    check_model_size(method.name, config, spell=spell)
    return config


def respell(message: str, names: Iterable[str], spell=kebab) -> str:
    """``message`` with each snake_case field name in ``names`` written by ``spell``."""
    for name in sorted((n for n in names if "_" in n), key=len, reverse=True):
        message = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", spell(name), message)
    return message


def method_defaults(method: Method) -> dict[str, Any]:
    """The method's settings and their defaults (the paper's), snake_case."""
    out = {}
    for f in fields(method.config_class):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        out[f.name] = default.value if isinstance(default, Enum) else default
    return out


def check_budget(epsilon: Any, delta: Any) -> None:
    """ε in (0, ∞] (∞: the non-private reference) and, for a private run, δ in (0, 1): the
    mathematical ranges, an estimator's as a library. A run's boundary
    (:class:`RunSettings`) narrows both to what its calibration certifies
    (:func:`fedpriv.federation.limits.check_supported_budget`)."""
    eps = typed_value("epsilon", float, epsilon)
    if math.isfinite(eps):
        dlt = check_delta("delta", typed_value("delta", float, delta))
        if dlt == 0:
            raise SettingError(f"delta must lie in (0, 1); got {delta!r}")


#: Run settings checked by their own code, each with its reason: the budget
#: (check_supported_budget), the sizes (check_run_sizes) and the dropouts (whose bound
#: is another setting).
_OWN_CHECKS = ("epsilon", "delta", "num_clients", "max_records", "ping_rounds",
               "tolerated_dropouts")  # fmt: skip


def check_values(settings_class: type, values: Mapping[str, Any]) -> None:
    """Strict types and ranges of a run's own settings in ``values`` (snake_case), by
    the fields of ``settings_class`` (:class:`~fedpriv.federation.settings.RunSettings`)."""
    from fedpriv.federation.constraints import constraint_of, constraints
    from fedpriv.federation.limits import check_run_sizes

    hints = _hints(settings_class)
    for key, value in values.items():
        if value is not None:
            typed_value(key, hints[key], value)
    if "epsilon" in values:
        check_budget(values["epsilon"], values.get("delta"))
    check_run_sizes(values)  # num-clients, max-records, ping-rounds: what fits in memory
    dropouts = values.get("tolerated_dropouts")
    if dropouts is not None and dropouts < 0:
        # Checked whatever the noise mode: a value that only distributed noise reads
        # is still refused where it is wrong, not when the mode changes.
        allowed = constraint_of(settings_class, "tolerated_dropouts").text(run=True)
        raise SettingError(f"tolerated-dropouts must be an integer in {allowed}; got {dropouts!r}")
    declared = constraints(settings_class)
    for key, value in values.items():
        if key in declared and key not in _OWN_CHECKS and value is not None:
            declared[key].check(key, value)
