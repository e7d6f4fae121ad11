"""Ablation study configuration: frozen dataclasses read from one TOML file per study.

Each study (``experiments/configs/ablate_<study>.toml``) is a Cartesian grid
of federation conditions (:class:`Axes`) crossed with learners and seeds at one
(ε, δ), benchmark paper §5.6. As in :mod:`fedpriv.experiments.bench.config`, the
optional ``[quick]`` table is deep-merged over the rest by ``--quick`` and
every range check names the value found and the allowed range.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.experiments.bench import paper
from fedpriv.experiments.bench.config import (
    LEARNERS,
    _check,
    _check_count,
    _check_range,
    _check_subset,
    _merge,
    _tuple,
)

STUDIES = ("participation", "remark1", "clients", "shift")
PARTITIONS = ("dirichlet", "iid", "zipf", "natural")
ACCOUNTINGS = ("valid", "tight", "paper")
SETTINGS_SOURCES = ("paper", "custom")
#: The hyper-parameters each learner accepts in ``[settings.<learner>]``.
SETTING_KEYS = {
    "boosting": ("rounds", "depth", "learning_rate", "sampling_rate", "lam", "intercept"),
    "logistic": ("rounds", "learning_rate", "clip_norm", "sampling_rate"),
    "mlp": ("hidden", "rounds", "learning_rate", "clip_norm", "sampling_rate"),
}


@dataclass(frozen=True)
class Axes:
    """The federation conditions of a study; the study runs their Cartesian product.

    Parameters
    ----------
    participation : tuple of float
        Client participation ρ, each in (0, 1] (paper §5.6: {1, 0.5, 0.25}).
    alpha : tuple of float
        Dirichlet label-skew α, each in (0, 1000] (used by ``dirichlet`` only).
    accounting : tuple of str
        Participation accounting, a subset of ``valid``, ``tight``, ``paper``
        (:mod:`fedpriv.privacy.participation`; ``paper`` is not a valid guarantee).
    n_clients : tuple of int
        Number of clients K, each in [2, 100].
    partition : tuple of str
        ``dirichlet`` (label skew α), ``iid``, ``zipf`` (size imbalance, exponent
        ``zipf_s``) or ``natural`` (the synthetic generator's clients; needed for
        covariate shift and within-client AUC).
    covariate_shift : tuple of float
        γ, each in [0, 10]; γ > 0 needs ``partition = ["natural"]``.
    zipf_s : float
        Zipf exponent in [0, 10] (paper: 1.5).
    """

    participation: tuple[float, ...] = (1.0,)
    alpha: tuple[float, ...] = (0.5,)
    accounting: tuple[str, ...] = ("valid",)
    n_clients: tuple[int, ...] = (5,)
    partition: tuple[str, ...] = ("dirichlet",)
    covariate_shift: tuple[float, ...] = (0.0,)
    zipf_s: float = 1.5

    def __post_init__(self) -> None:
        _check("axes.participation", self.participation, bool(self.participation), "non-empty")
        for rho in self.participation:
            _check_range("axes.participation", rho, 0.0, 1.0)
        for a in self.alpha:
            _check_range("axes.alpha", a, 0.0, 1000.0)
        _check_subset("axes.accounting", self.accounting, ACCOUNTINGS)
        for k in self.n_clients:
            _check_count("axes.n_clients", k, 2, 100)
        _check_subset("axes.partition", self.partition, PARTITIONS)
        for g in self.covariate_shift:
            _check_range("axes.covariate_shift", g, 0.0, 10.0, open_lo=False)
        _check_range("axes.zipf_s", self.zipf_s, 0.0, 10.0, open_lo=False)
        if "dirichlet" in self.partition:
            _check("axes.alpha", self.alpha, bool(self.alpha), "non-empty with dirichlet")
        shifted = any(g > 0 for g in self.covariate_shift)
        ok = not shifted or self.partition == ("natural",)
        _check("axes.partition", self.partition, ok, '["natural"] when covariate_shift > 0')


@dataclass(frozen=True)
class AblationConfig:
    """One ablation study of benchmark paper §5.6 at one (ε, δ).

    Parameters
    ----------
    name : str
        The study, one of :data:`STUDIES`.
    epsilon, delta : float
        Budget of every fit: ε in (0, 100], δ in (0, 0.1] (paper: 2, 1e-5).
    seeds : int
        Run seeds 0 … seeds − 1, in [2, 1000]; data and partition are frozen
        across run seeds (paper §4.1), so conditions are paired by seed.
    learners : tuple of str
        Subset of ``boosting``, ``logistic``, ``mlp``.
    axes : Axes
        The conditions.
    settings : tuple
        (learner, sorted (name, value) pairs): fixed hyper-parameters; missing
        learners take the paper's selected settings (TARGETS.md, paper Table 5).
    settings_source : str
        ``paper`` (the published settings) or ``custom``: printed in the report.
    n_rows : int
        Synthetic rows, in [500, 1,000,000] (6,000 = 4,800 train + val, paper Table 4).
    processes : int
        Pool size, 1 or 2.
    diagnostic_shifts : tuple of float
        Extra γ values, each in [0, 10], at which the shift study's data check
        (:mod:`fedpriv.experiments.ablation.shift`) runs; no private fits.
    """

    name: str
    epsilon: float
    delta: float
    seeds: int
    learners: tuple[str, ...]
    axes: Axes = field(default_factory=Axes)
    settings: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    settings_source: str = "paper"
    n_rows: int = 6_000
    processes: int = 2
    secure_aggregation: bool = False
    diagnostic_shifts: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _check("name", self.name, self.name in STUDIES, f"one of {list(STUDIES)}")
        _check_range("epsilon", self.epsilon, 0.0, 100.0)
        _check_range("delta", self.delta, 0.0, 0.1)
        _check_count("seeds", self.seeds, 2, 1000)
        _check_subset("learners", self.learners, LEARNERS)
        _check(
            "settings_source",
            self.settings_source,
            self.settings_source in SETTINGS_SOURCES,
            f"one of {list(SETTINGS_SOURCES)}",
        )
        _check_count("n_rows", self.n_rows, 500, 1_000_000)
        _check_count("processes", self.processes, 1, 2)
        for g in self.diagnostic_shifts:
            _check_range("diagnostic_shifts", g, 0.0, 10.0, open_lo=False)
        for learner, params in self.settings:
            _check("settings learner", learner, learner in LEARNERS, f"one of {list(LEARNERS)}")
            bad = [k for k, _ in params if k not in SETTING_KEYS[learner]]
            _check(f"settings.{learner}", bad, not bad, f"keys among {list(SETTING_KEYS[learner])}")
        if self.name == "remark1":
            ok = self.axes.participation == (1.0,) and len(self.axes.alpha) >= 2
            _check("remark1 axes", self.axes, ok, "participation = [1.0] and at least two alphas")

    def params(self, learner: str) -> dict[str, Any]:
        """The fixed hyper-parameters of ``learner`` (the paper's at ``epsilon`` when unset)."""
        base = paper.selected("synthetic", learner, self.epsilon)
        return {**base, **dict(dict(self.settings).get(learner, ()))}


def from_dict(raw: dict[str, Any], *, quick: bool = False) -> AblationConfig:
    """Build a config from parsed TOML (``quick``: merge the ``[quick]`` table first)."""
    raw = dict(raw)
    over = raw.pop("quick", {})
    if quick:
        raw = _merge(raw, over)
    study = {k: _tuple(v) for k, v in raw.get("study", {}).items()}
    settings = tuple(
        (learner, tuple(sorted(table.items())))
        for learner, table in raw.get("settings", {}).items()
    )
    try:
        axes = Axes(**{k: _tuple(v) for k, v in raw.get("axes", {}).items()})
        return AblationConfig(axes=axes, settings=settings, **study)
    except TypeError as err:  # unknown or missing keys
        raise ValueError(f"bad ablation config: {err}") from None


def config_path(study: str) -> Path:
    """``experiments/configs/ablate_<study>.toml``."""
    _check("study", study, study in STUDIES, f"one of {list(STUDIES)}")
    return Path(__file__).resolve().parents[1] / "configs" / f"ablate_{study}.toml"


def load(path: str | Path, *, quick: bool = False) -> AblationConfig:
    """Read an ablation TOML file (see ``experiments/configs/ablate_participation.toml``)."""
    with open(path, "rb") as fh:
        return from_dict(tomllib.load(fh), quick=quick)
