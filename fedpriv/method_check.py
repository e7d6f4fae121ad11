"""The contract of a registered method, checked part by part at registration.

:func:`fedpriv.methods.register_method` calls :func:`check_method` for every
method it is asked to check (every plugin's), so that a missing or malformed
part fails there, naming the part, and never in the middle of a run that has
already spent budget. The built-in records skip it at import (it would import
every layer at once; the Flower ClientApp never imports the server half), and
a test runs the same checker over each of them.

The contract, part by part (:class:`fedpriv.methods.Method`):

* ``config``: a frozen, keyword-only dataclass whose every field has a
  default (the paper's setting) and a type a run config spells (``bool``,
  ``int``, ``float``, ``str``, an ``Enum``, or one of them ``| None``); its
  defaults construct, and it has ``rounds`` (the run's federated rounds; 0 when
  automatic, then its ``resolved(epsilon=, delta=, n_records=)`` fixes it), and
  ``sampling_rate`` when the method's family is ``"gaussian-rounds"`` (the
  launchers calibrate that family's noise before any process starts);
* ``strategy``: a callable; when its return annotation names a class, that
  class implements :class:`~fedpriv.federation.protocol.Strategy` (and
  ``noise_std`` if the method has a distributed-noise form). Whatever it
  builds is checked again at every build (:meth:`Method.build_strategy`);
* ``client``: a :class:`~fedpriv.federation.protocol.ClientHandler` subclass
  implementing ``answer`` and ``reply_sensitivity``, built with no arguments;
* ``model``: a :class:`~fedpriv.models.base.ReleasedModel` subclass with
  ``from_arrays`` a classmethod;
* ``estimator``: a :class:`~fedpriv.server.method_estimator.MethodEstimator`
  subclass whose ``method`` is this method's name;
* ``kernels``: a module with a callable ``warm_up()``; ``maths``: a module.

Each part is imported by its path alone, in the manner of the registry.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import types
import typing
from typing import Any

from fedpriv.methods import FAMILIES, Method, resolve

#: Where the contracts live (import paths: the registry imports no layer above it).
STRATEGY = "fedpriv.federation.protocol:Strategy"
CLIENT_HANDLER = "fedpriv.federation.protocol:ClientHandler"
RELEASED_MODEL = "fedpriv.models.base:ReleasedModel"
METHOD_ESTIMATOR = "fedpriv.server.method_estimator:MethodEstimator"
#: The field types a run config can spell (:func:`fedpriv.federation.settings.typed_value`).
SETTING_TYPES = (bool, int, float, str)


class MethodContractError(TypeError):
    """A method's part does not meet its contract (the message names the part)."""


def check_method(method: Method) -> None:
    """Import every part of ``method`` and check its contract (module docstring).

    Raises
    ------
    MethodContractError
        At the first part that fails, e.g. ``method 'toy': client 'pkg.mod:Cls'
        does not implement ClientHandler.reply_sensitivity``.
    """
    if method.family not in FAMILIES:
        raise MethodContractError(
            f"method {method.name!r}: family must be one of {list(FAMILIES)}; got {method.family!r}"
        )
    if not 0.0 < method.delta < 1.0:
        raise MethodContractError(
            f"method {method.name!r}: delta must lie in (0, 1); got {method.delta!r}"
        )
    _check_config(method)
    _check_strategy(method)
    _check_client(method)
    _check_model(method)
    _check_estimator(method)
    _check_module(method, "kernels", method.kernels, needs="warm_up")
    _check_module(method, "maths", method.maths)


# -- helpers -------------------------------------------------------------------
def _fail(method: Method, part: str, path: str, what: str) -> MethodContractError:
    return MethodContractError(f"method {method.name!r}: {part} {path!r} {what}")


def _class(method: Method, part: str, path: str) -> type:
    """The class at ``path``, or a :class:`MethodContractError` naming the part."""
    try:
        obj = resolve(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _fail(method, part, path, f"cannot be imported: {exc}") from exc
    if not isinstance(obj, type):
        raise _fail(method, part, path, f"is not a class (a {type(obj).__name__})")
    return obj


def _implements(method: Method, part: str, path: str, cls: type, contract: str) -> None:
    """``cls`` implements every abstract method of the ABC at ``contract`` and subclasses it."""
    base = resolve(contract)
    missing = [
        name
        for name in sorted(base.__abstractmethods__)
        if not callable(getattr(cls, name, None))
        or getattr(getattr(cls, name), "__isabstractmethod__", False)
    ]
    if missing:
        names = ", ".join(f"{base.__name__}.{name}" for name in missing)
        raise _fail(method, part, path, f"does not implement {names}")
    if not issubclass(cls, base):
        raise _fail(method, part, path, f"does not subclass {contract.replace(':', '.')}")


# -- the parts -----------------------------------------------------------------
def _check_config(method: Method) -> None:
    path = method.config
    cls = _class(method, "config", path)
    params = getattr(cls, "__dataclass_params__", None)
    if not dataclasses.is_dataclass(cls) or not params.frozen:
        raise _fail(method, "config", path, "is not a frozen dataclass (@dataclass(frozen=True))")
    loose = [f.name for f in dataclasses.fields(cls) if f.kw_only is not True]
    if loose:
        raise _fail(method, "config", path, f"has positional field(s) {loose}: make it kw_only")
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # an annotation that does not resolve
        raise _fail(method, "config", path, f"has unresolvable field types: {exc}") from exc
    for f in dataclasses.fields(cls):
        if not _spellable(hints[f.name]):
            raise _fail(
                method, "config", path,
                f"field {f.name!r} has type {hints[f.name]!r}, which a run config cannot "
                "spell (bool, int, float, str, an Enum, or one of them | None)",
            )  # fmt: skip
    try:
        default = cls()
    except (TypeError, ValueError) as exc:
        raise _fail(
            method, "config", path, f"must construct from its defaults (every field has one): {exc}"
        ) from exc
    if callable(getattr(default, "resolved", None)):
        # Automatic settings (0) are resolved from the run's public facts before the
        # rounds are counted: check a resolution (any public n and budget will do).
        default = default.resolved(epsilon=1.0, delta=1e-5, n_records=10_000)
    rounds = getattr(default, "rounds", None)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise _fail(method, "config", path, f"has no 'rounds' (a count ≥ 1); got {rounds!r}")
    if method.family == "gaussian-rounds":
        q = getattr(default, "sampling_rate", None)
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0.0 < q <= 1.0:
            raise _fail(
                method, "config", path,
                f"has no 'sampling_rate' in (0, 1] (family 'gaussian-rounds' calibrates "
                f"its noise with it); got {q!r}",
            )  # fmt: skip


def _spellable(tp: Any) -> bool:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return len(args) == 1 and _spellable(args[0])
    return tp in SETTING_TYPES or (isinstance(tp, type) and issubclass(tp, enum.Enum))


def _check_strategy(method: Method) -> None:
    path = method.strategy
    try:
        factory = resolve(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _fail(method, "strategy", path, f"cannot be imported: {exc}") from exc
    if not callable(factory):
        raise _fail(method, "strategy", path, "is not callable (build(config, context))")
    built = _return_class(factory)
    if built is None:
        return  # checked when built (Method.build_strategy)
    _implements(method, "strategy", path, built, STRATEGY)
    if method.distributed_noise and not callable(getattr(built, "noise_std", None)):
        raise _fail(
            method, "strategy", path,
            f"builds {built.__name__}, which has no noise_std(query), but the method "
            "declares a distributed-noise form",
        )  # fmt: skip


def _return_class(factory: Any) -> type | None:
    """The class a factory's return annotation names, if it resolves to one."""
    if isinstance(factory, type):
        return factory  # a class used as its own factory
    if not inspect.isfunction(factory):
        return None
    annotation = inspect.get_annotations(factory).get("return")
    if isinstance(annotation, str):  # postponed: evaluate it in the factory's module
        try:
            annotation = eval(annotation, factory.__globals__)
        except Exception:
            return None
    return annotation if isinstance(annotation, type) else None


def _check_client(method: Method) -> None:
    path = method.client
    cls = _class(method, "client", path)
    _implements(method, "client", path, cls, CLIENT_HANDLER)
    try:
        cls()
    except Exception as exc:
        raise _fail(method, "client", path, f"cannot be built with no arguments: {exc}") from exc


def _check_model(method: Method) -> None:
    path = method.model
    cls = _class(method, "model", path)
    _implements(method, "model", path, cls, RELEASED_MODEL)
    if not isinstance(inspect.getattr_static(cls, "from_arrays"), classmethod):
        raise _fail(method, "model", path, "has a from_arrays that is not a classmethod")


def _check_estimator(method: Method) -> None:
    path = method.estimator
    cls = _class(method, "estimator", path)
    base = resolve(METHOD_ESTIMATOR)
    if not issubclass(cls, base):
        raise _fail(
            method, "estimator", path, f"does not subclass {METHOD_ESTIMATOR.replace(':', '.')}"
        )
    if getattr(cls, "method", None) != method.name:
        raise _fail(
            method, "estimator", path,
            f"is the estimator of method {getattr(cls, 'method', None)!r}, not {method.name!r}",
        )  # fmt: skip


def _check_module(method: Method, part: str, name: str, *, needs: str | None = None) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise _fail(method, part, name, f"cannot be imported: {exc}") from exc
    if needs is not None and not callable(getattr(module, needs, None)):
        raise _fail(method, part, name, f"has no {needs}()")
