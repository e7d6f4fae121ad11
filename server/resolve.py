"""One resolver of a run's settings, shared by every entry point.

:func:`resolve` turns the user's overrides and a preset
(:mod:`fedpriv.federation.presets`) into a :class:`ResolvedRun`: the
:class:`~fedpriv.federation.settings.RunSettings` every key filled in, plus the facts
derived from the data, each by one rule:

* **K**: on a bundled corpus ``RunSettings.num_clients`` moved into the corpus's public
  range (Heart: its 4 hospitals) unless set; on a CSV, one client per value of its
  client column (:func:`fedpriv.server.preflight.named_clients`; a contradicting
  ``num-clients`` is refused), else ``num-clients`` for an IID split;
* **max-records**: declared, else a bundled corpus's largest client (public); on
  your own files a Flower run needs it declared, an in-process fit without it first
  releases a record count (:mod:`fedpriv.server.fit_size`);
* the preset applied (its name kept), the noise plan calibrated, and for a Flower run
  every file its processes will open checked (in process the loader reads them next).

``fedpriv run`` in process (:mod:`fedpriv.server.cli_run`) and ``fedpriv cv``, ``fedpriv
run --flower`` and ``python -m fedpriv.server.simulate``
(:func:`fedpriv.server.simulate.resolve_simulation`), ``fedpriv deploy``
(:mod:`fedpriv.server.deploy`) all call it; the estimators take the
same settings (:meth:`fedpriv.server.method_estimator.MethodEstimator.from_settings`,
``from_preset``). So one job has one set of defaults and one K, and the files a run
writes (``config.json``, ``privacy.json``) name the settings it ran.

An in-process fit reads its rows after the settings are checked: K of a CSV is then
taken from the rows as loaded (:meth:`ResolvedRun.with_clients`, the same rule), the
file is not read twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.server.preflight import (
    check_plan,
    check_run_files,
    corpus_clients,
    file_clients,
    named_clients,
)

from fedpriv.data.node import DataSource, declared_max_records
from fedpriv.federation.presets import Preset, compose, get_preset
from fedpriv.federation.settings import RunSettings, SettingError, run_size_range

__all__ = ["ResolvedRun", "resolve"]

#: The run-config keys that name a run's rows (enough to count a csv's clients).
_SOURCE_KEYS = ("method", "dataset", "schema", "csv", "split-seed", "max-records")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """A run's settings, every key and derived fact filled in (module docstring).

    Attributes
    ----------
    settings : RunSettings
        The run's settings: K and the record bound as derived, the preset applied.
    preset : str or None
        The preset's name (``None``: the defaults).
    num_clients_given : int or None
        The user's own ``num-clients`` (``None``: unset).
    """

    settings: RunSettings
    preset: str | None = None
    #: The user's own ``num-clients`` (``None``: unset), checked against the K of the rows.
    num_clients_given: int | None = None

    @property
    def run_config(self) -> dict[str, Any]:
        """The complete run config (kebab-case keys), as a Flower run is submitted and as
        every result file records it."""
        return self.settings.to_run_config()

    def with_clients(self, names: Sequence[str], *, where: str) -> ResolvedRun:
        """This run on rows held by the clients ``names`` (``()``: no client column, an
        IID split into ``num-clients``): K derived as for a CSV the launcher reads
        (:func:`~fedpriv.server.preflight.named_clients`), a contradicting
        ``num-clients`` refused."""
        k = named_clients(names, where=where, given=self.num_clients_given)
        if k is None or k == self.settings.num_clients:
            return self
        return dataclasses.replace(self, settings=_replace(self.settings, num_clients=k))


def _replace(settings: RunSettings, **changes: Any) -> RunSettings:
    try:
        return dataclasses.replace(settings, **changes)
    except (TypeError, ValueError) as exc:
        raise SettingError(str(exc)) from None


def resolve(
    overrides: Mapping[str, Any],
    *,
    preset: str | Preset | None = None,
    flower: bool = True,
    whole: bool = False,
) -> ResolvedRun:
    """The run of ``overrides`` (run-config keys) over ``preset``, checked before anything
    starts; raises :class:`~fedpriv.federation.settings.SettingError` (one line naming
    the key, the value and the allowed range).

    ``flower``: a Flower run, whose nodes read a CSV's clients from the file now and
    need a declared ``max-records`` on it. ``False``: an in-process fit, which reads
    its rows next (:meth:`ResolvedRun.with_clients`) and may release a record count
    instead. ``whole``: every row in training (``fedpriv cv``), where a bundled corpus's
    bound, its training split's, does not apply.
    """
    chosen = get_preset(preset)
    given = {str(k).replace("_", "-"): v for k, v in overrides.items()}
    merged = compose(given, chosen)
    own = {} if chosen is None else chosen.applied(merged["method"])
    user_k = given.get("num-clients")
    csv = merged.get("csv")
    if csv not in (None, "") and flower:
        if merged.get("max-records") in (None, ""):  # the nodes may not count their rows
            raise SettingError(
                f"max-records must be declared (an integer in {run_size_range('max_records')}: "
                f"the public bound on records per client) for a run on csv {csv!r}; got unset"
            )
        # One node per client of the file, whatever a preset says: K before the rest of
        # the settings (some, e.g. tolerated-dropouts, are checked against it). In process
        # the rows are read next, and give K then (ResolvedRun.with_clients).
        source = {k: merged.get(k, "") for k in _SOURCE_KEYS}
        k = file_clients(RunSettings.from_run_config(source), given=user_k)
        merged = merged if k is None else {**merged, "num-clients": k}
    elif csv in (None, "") and "num-clients" not in given and "num-clients" not in own:
        # A bundled corpus: the default K moved into its own range (4 for Heart).
        merged = {**merged, "num-clients": corpus_clients(merged)}
    settings = RunSettings.from_run_config(merged)
    if flower:  # every file its nodes will open, now (in process the loader reads them next)
        check_run_files(settings)
    source = DataSource.of(settings)
    if settings.max_records is None and source.bundled and not whole:
        # The run config carries the public bound: the bundled corpus's largest client.
        bound = declared_max_records(settings.dataset, settings.num_clients, settings.split_seed)
        settings = _replace(settings, max_records=bound)
    if (n := settings.public_records) is not None:
        # The method's automatic settings (DP-SGD's schedule, Lumberjack's sizes) from
        # the ServerApp's own public n and training's budget: the run config then carries
        # the rounds and q every process (the nodes' plans) sees.
        settings = settings.for_records(n)
    check_plan(settings)
    name = None if chosen is None else chosen.name
    return ResolvedRun(settings=settings, preset=name, num_clients_given=user_k)


def absolute(path: str | Path) -> str:
    """A file's path as every process of a run (and its ``config.json``) names it."""
    return str(Path(path).expanduser().resolve())
