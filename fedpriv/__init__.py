"""fedpriv: federated learning on sensitive tabular data under record-level DP.

``fedpriv`` is the only import name the package installs. The library
(privacy, data, models, federation core) lives in ``fedpriv.privacy``,
``fedpriv.data``, ``fedpriv.models`` and ``fedpriv.federation`` and never
imports Flower; the application layers are ``fedpriv.strategies`` (server
halves), ``fedpriv.clients`` (client halves and the Flower ClientApp),
``fedpriv.server`` (ServerApp, launchers, estimators, CLI) and
``fedpriv.experiments``. Imports point one way: experiments → server,
strategies, clients → the library.

The public estimators are importable from here (``from fedpriv import
DPGAMClassifier``); they are loaded on first use, so ``import fedpriv`` stays
light and the library layer imports no application module.
"""

from pathlib import Path as _Path

from fedpriv import _layout

__version__ = "0.1.0"

_layout.install(_Path(__file__).parent)

#: Public names served lazily (PEP 562), besides every registered method's estimator
#: (its record names it: :mod:`fedpriv.methods`, plugins' included).
_LAZY = {
    "MethodEstimator": "fedpriv.server.method_estimator",
    "PrivacyBudget": "fedpriv.privacy",
    "PrivacyLedger": "fedpriv.privacy",
    "SecretKey": "fedpriv.privacy.randomness",
    "load_dataset": "fedpriv.data",
}


def _public() -> dict[str, str]:
    """Every lazily served name and the module it comes from."""
    from fedpriv.methods import methods

    estimators = dict(reversed(m.estimator.split(":")) for m in methods())
    return {**estimators, **_LAZY}


def __getattr__(name: str):
    """Import a public name on first use (module docstring); ``__all__`` is computed."""
    if name == "__all__":
        return ["__version__", *sorted(_public())]
    module = _LAZY.get(name) or (_public().get(name) if not name.startswith("_") else None)
    if module is None:
        raise AttributeError(f"module 'fedpriv' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public()})
