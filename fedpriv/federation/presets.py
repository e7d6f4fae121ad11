"""Named presets: a job's settings under one name, read the same way by every entry point.

A :class:`Preset` is a partial run config (kebab-case keys, as ``--set`` writes
them). A run's settings are three layers, in this order
(:func:`compose`): the defaults (:class:`~fedpriv.federation.settings.RunSettings`
and the method's configuration dataclass, stated once there), the preset's
values that apply, the user's overrides. The run's method is the user's, else
the preset's, else ``RunSettings.method``. A preset's run keys (``dataset``,
``epsilon``, ``poll-interval``, ...) apply to any method; its method keys apply to
a run of its own method only (``learning-rate`` and ``lam`` are keys of several
methods, and the main job's values are DP-EBM's): ``--preset main-job --set
method=boosting`` runs boosting at its own defaults on the preset's run keys. A
preset without a ``method`` gives its method keys to whichever method has them.

Every entry point takes ``--preset NAME``: ``fedpriv run`` (in process and
``--flower``), ``python -m fedpriv.server.simulate`` (default :data:`MAIN_JOB`, the
README's first command) and ``python -m fedpriv.server.deploy`` (default
:data:`DEPLOY_DEMO`, or :data:`DEPLOY_FILES` with ``--data``); the estimators take one
through ``from_preset`` (:mod:`fedpriv.server.method_estimator`). Without a preset
every entry point runs the same defaults. No Flower imports.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fedpriv.federation.limits import SettingError, kebab

#: ``--preset none``: no preset (the defaults), for a launcher whose default is one.
NO_PRESET = "none"
#: The main job: ``python -m fedpriv.server.simulate`` without ``--preset``.
MAIN_JOB = "main-job"
#: ``python -m fedpriv.server.deploy`` on a bundled corpus (no ``--data``).
DEPLOY_DEMO = "deploy-demo"
#: ``python -m fedpriv.server.deploy --data FILE ...``: the nodes' own files.
DEPLOY_FILES = "deploy-files"


@dataclass(frozen=True, kw_only=True)
class Preset:
    """A named partial run config.

    Attributes
    ----------
    name : str
        What ``--preset`` takes.
    summary : str
        One line for ``--help``.
    values : mapping
        Run-config values, kebab-case keys (snake_case is accepted and respelled);
        ``method`` names the method whose keys the other values set.
    """

    name: str
    summary: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        values = {kebab(str(k).replace("-", "_")): v for k, v in self.values.items()}
        object.__setattr__(self, "values", MappingProxyType(values))

    @property
    def method(self) -> str | None:
        """The method the preset's method keys belong to (``None``: any that has them)."""
        method = self.values.get("method")
        return None if method in (None, "") else str(method)

    def applied(self, method: str) -> dict[str, Any]:
        """The values a run of ``method`` takes from this preset (module docstring)."""
        from fedpriv.federation.settings import RunSettings
        from fedpriv.methods import get_method

        run = {kebab(k) for k in RunSettings.run_keys()}
        mine = {kebab(k) for k in get_method(method).config_fields}
        own = self.method in (None, method)
        return {
            k: v
            for k, v in self.values.items()
            if k != "method" and (k in run or (own and k in mine))
        }


_PRESETS: dict[str, Preset] = {}


def register_preset(preset: Preset, *, replace: bool = False) -> Preset:
    """Add ``preset`` to the registry (``replace=True`` to redefine a name)."""
    if preset.name == NO_PRESET or not preset.name:
        raise ValueError(f"preset name must not be empty or {NO_PRESET!r}; got {preset.name!r}")
    if preset.name in _PRESETS and not replace and _PRESETS[preset.name] != preset:
        raise ValueError(f"preset {preset.name!r} is already registered")
    _PRESETS[preset.name] = preset
    return preset


def preset_names() -> list[str]:
    return list(_PRESETS)


def presets() -> list[Preset]:
    return list(_PRESETS.values())


def get_preset(name: str | Preset | None) -> Preset | None:
    """The preset ``name`` (``None``, ``""`` or ``"none"``: no preset); an unknown name is
    a :class:`SettingError` naming the registered ones and the closest."""
    if name is None or isinstance(name, Preset):
        return name
    if name in ("", NO_PRESET):
        return None
    try:
        return _PRESETS[name]
    except KeyError:
        close = difflib.get_close_matches(name, preset_names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SettingError(
            f"preset must be one of {[*preset_names(), NO_PRESET]}{hint}; got {name!r}"
        ) from None


def run_method(overrides: Mapping[str, Any], preset: Preset | None) -> str:
    """The run's method: the user's, else the preset's, else ``RunSettings.method``."""
    from fedpriv.federation.settings import RunSettings

    given = overrides.get("method")
    if given not in (None, ""):
        return str(given)
    return (preset.method if preset is not None else None) or RunSettings.method


def compose(overrides: Mapping[str, Any], preset: str | Preset | None = None) -> dict[str, Any]:
    """The run config of ``overrides`` over ``preset`` (kebab-case keys; keys absent
    here take their defaults): the preset's values that apply to the run's method,
    then the user's, ``method`` always set. Unchecked: the settings parser
    (:meth:`RunSettings.from_run_config`) checks every value."""
    from fedpriv.methods import get_method

    chosen = get_preset(preset)
    overrides = {kebab(str(k).replace("-", "_")): v for k, v in overrides.items()}
    method = run_method(overrides, chosen)
    try:
        get_method(method)
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    own = {} if chosen is None else chosen.applied(method)
    return {**own, **overrides, "method": method}


# -- the built-in presets ---------------------------------------------------------------
register_preset(
    Preset(
        name=MAIN_JOB,
        summary=(
            "the main job: DP histogram boosting (dp_gam) on Diabetes 130-US, half Newton "
            "steps, lam 10, 8 bins, columns by residual gain; the simulation polls every 10 ms"
        ),
        # The strongest learner on the bundled corpora (README, "DP histogram boosting").
        # On Diabetes 130-US, K = 5, ε = 2 (10 seeds of the matched benchmark's cells,
        # fedpriv.experiments.gam_check --bench): AUC 0.6450 ± 0.0013 here, against
        # 0.6387 ± 0.0034 at the learner's defaults (16 bins, cyclic order, learning-rate
        # 1, lam 5); gain order alone: 0.638 ± 0.001 against 0.631 ± 0.005 cyclic.
        # poll-interval: a simulation's pulls are in-process calls to the SuperLink's
        # state, so the server polls every 10 ms (0.1 s quantised rounds into 0.1 or
        # 0.2 s as Flower's own fetch loop drifted); unused in process.
        values={
            "method": "dp_gam",
            "dataset": "diabetes130",
            "column-order": "gain",
            "learning-rate": 0.5,
            "lam": 10.0,
            "bins": 8,
            "poll-interval": 0.01,
        },
    )
)
#: A deployed round starts a ClientApp process per message: ~26 s on 2 loaded cores
#: (BRFSS, K = 3), against ~0.4 s simulated, so the round timeout is the simulation's
#: 30 s × 4.
DEPLOYED_ROUND_TIMEOUT = 120.0
register_preset(
    Preset(
        name=DEPLOY_DEMO,
        summary="a small DP-boosting demo on BRFSS: 3 nodes, 5 rounds of depth 4, ε = 2",
        values={
            "dataset": "brfss",
            "num-clients": 3,
            "rounds": 5,
            "depth": 4,
            "epsilon": 2.0,
            "round-timeout": DEPLOYED_ROUND_TIMEOUT,
        },
    )
)
register_preset(
    Preset(
        name=DEPLOY_FILES,
        # The method's defaults, as `fedpriv run` fits them in process (boosting: T = 75,
        # depth 5, ε = 2). The demo's T = 5, depth 4 released a model far below the
        # in-process fit of the same files (the README's three hospital files, scored on
        # fresh rows: AUC 0.70 ± 0.05 against 0.767 ± 0.010 over 10 fits; deployed at
        # these defaults, 0.772).
        summary="the nodes' own files: DP boosting at its defaults, deployed round timeout",
        values={"method": "boosting", "round-timeout": DEPLOYED_ROUND_TIMEOUT},
    )
)
