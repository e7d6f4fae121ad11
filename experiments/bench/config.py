"""Study configuration: frozen dataclasses read from a TOML file, validated on construction.

One TOML file describes a whole study (``experiments/configs/matched.toml``).
Its optional ``[quick]`` table is deep-merged over the rest by ``--quick``, so
the smoke run and the full run share one file. Every range check names the
value found and the allowed range.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.methods import methods

DATASETS = ("synthetic", "brfss", "diabetes130")
#: Bundled corpora with more than two classes (the multiclass stage's).
MULTICLASS_DATASETS = ("brfss3",)
#: The tuned learners (every round one Gaussian release: subsampled, or of every
#: record for the histogram learner) and the forests, from the method registry.
LEARNERS = tuple(m.name for m in methods() if m.family in ("gaussian-rounds", "histogram"))
#: Tuned learners of the main stage: fedpriv's, and interpret's pooled DP-EBM (the ``ebm``
#: extra; :mod:`fedpriv.experiments.bench.dp_ebm`).
TUNED = (*LEARNERS, "dp_ebm")
#: Learners benchmarked at fixed settings (no tuning): the forests, and bdpe_α (pure-ε
#: releases calibrated to the study's (ε, δ)).
FORESTS = tuple(m.name for m in methods() if m.family in ("forest", "pure"))
MULTICLASS_LEARNERS = tuple(m.name for m in methods() if m.multiclass)
TUNING_MODES = ("validation", "paper", "private")
STAGES = ("main", "ablations", "sweep", "tstar", "mia", "multiclass", "private_tuning")
LOSSES = ("1-auc", "logloss")


def _check(name: str, value: Any, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}; got {value!r}")


def _check_range(name: str, value: float, lo: float, hi: float, *, open_lo: bool = True) -> None:
    inside = (value > lo if open_lo else value >= lo) and value <= hi
    bracket = "(" if open_lo else "["
    _check(name, value, inside and not math.isnan(value), f"in {bracket}{lo:g}, {hi:g}]")


def _check_count(name: str, value: int, lo: int = 1, hi: int = 10_000) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    _check(name, value, ok, f"an integer in [{lo}, {hi}]")


def _check_subset(name: str, values: tuple, allowed: tuple) -> None:
    bad = [v for v in values if v not in allowed]
    _check(name, values, bool(values) and not bad, f"a non-empty subset of {list(allowed)}")


@dataclass(frozen=True)
class Grid:
    """One learner's search space (benchmark paper Table 5): parameter → candidate values."""

    learner: str
    values: tuple[tuple[str, tuple[Any, ...]], ...]

    def __post_init__(self) -> None:
        _check("grid learner", self.learner, self.learner in TUNED, f"one of {list(TUNED)}")
        for name, vals in self.values:
            _check(f"grids.{self.learner}.{name}", vals, len(vals) > 0, "a non-empty list")

    def configs(self) -> list[dict[str, Any]]:
        """Every combination, in a fixed order."""
        out: list[dict[str, Any]] = [{}]
        for name, vals in self.values:
            out = [{**c, name: v} for c in out for v in vals]
        return out


@dataclass(frozen=True)
class Forests:
    """Fixed, cheaper forest rows (issue 7): no tuning, fewer seeds (documented in the report)."""

    seeds: int = 5
    lumberjack: tuple[tuple[str, Any], ...] = (("trees", 10), ("depth", 30))
    random_forest: tuple[tuple[str, Any], ...] = (("trees", 20), ("depth", 10))
    bdpe: tuple[tuple[str, Any], ...] = (("trees", 20), ("depth", 4))
    learners: tuple[str, ...] = FORESTS

    def __post_init__(self) -> None:
        _check_count("forests.seeds", self.seeds, 0, 100)
        if self.learners:
            _check_subset("forests.learners", self.learners, FORESTS)

    def settings(self) -> dict[str, dict[str, Any]]:
        """Each fixed learner's settings, by learner name."""
        return {name: dict(getattr(self, name)) for name in FORESTS}


@dataclass(frozen=True)
class Ablations:
    """Paper Table 8 at one ε: fixed-T boosting, few-step MLP, wide MLP."""

    epsilon: float = 2.0
    seeds: int = 20
    datasets: tuple[str, ...] = ("diabetes130", "brfss")
    boosting_fixed_rounds: int = 150
    mlp_few_steps: int = 100
    mlp_wide_hidden: int = 128

    def __post_init__(self) -> None:
        _check_range("ablations.epsilon", self.epsilon, 0.0, 100.0)
        _check_count("ablations.seeds", self.seeds, 0, 1000)
        if self.datasets:
            _check_subset("ablations.datasets", self.datasets, DATASETS)
        _check_count("ablations.boosting_fixed_rounds", self.boosting_fixed_rounds, 1, 5000)
        _check_count("ablations.mlp_few_steps", self.mlp_few_steps, 1, 10_000)
        _check_count("ablations.mlp_wide_hidden", self.mlp_wide_hidden, 1, 4096)


@dataclass(frozen=True)
class Sweep:
    """Figure 3 and the data of the T* fit (Appendix A.4): iteration sweeps on one dataset."""

    dataset: str = "brfss"
    epsilon: float = 2.0
    rounds: tuple[int, ...] = (25, 50, 100, 200, 400)
    steps: tuple[int, ...] = (100, 200, 400, 800, 1200)
    seeds: int = 20
    fit_epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    fit_seeds: int = 10

    def __post_init__(self) -> None:
        _check("sweep.dataset", self.dataset, self.dataset in DATASETS, f"one of {list(DATASETS)}")
        _check_range("sweep.epsilon", self.epsilon, 0.0, 100.0)
        for t in (*self.rounds, *self.steps):
            _check_count("sweep.rounds/steps", t, 1, 10_000)
        _check("sweep.rounds", self.rounds, len(self.rounds) >= 2, "at least two values")
        for e in self.fit_epsilons:
            _check_range("sweep.fit_epsilons", e, 0.0, 100.0)
        _check_count("sweep.seeds", self.seeds, 1, 1000)
        _check_count("sweep.fit_seeds", self.fit_seeds, 1, 1000)


@dataclass(frozen=True)
class TStar:
    """Appendix A.4: where T* is resolved and which loss the model L(T) fits."""

    deltas: tuple[float, ...] = (1e-6, 1e-5, 1e-4)
    sampling_rates: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.3)
    loss: str = "1-auc"

    def __post_init__(self) -> None:
        for d in self.deltas:
            _check_range("tstar.deltas", d, 0.0, 0.1)
        for q in self.sampling_rates:
            _check_range("tstar.sampling_rates", q, 0.0, 1.0)
        _check("tstar.loss", self.loss, self.loss in LOSSES, f"one of {list(LOSSES)}")


@dataclass(frozen=True)
class MIA:
    """§5.1/§5.5: the off-path ensemble and the loss-threshold membership attack."""

    seeds: int = 10
    members: int = 1200
    epsilons: tuple[float, ...] = (0.5, 2.0, 8.0)
    offpath: tuple[tuple[str, Any], ...] = (
        ("rounds", 200),
        ("depth", 6),
        ("learning_rate", 0.4),
        ("sampling_rate", 1.0),
    )
    learners: tuple[str, ...] = (*LEARNERS, *FORESTS)

    def __post_init__(self) -> None:
        _check_count("mia.seeds", self.seeds, 0, 1000)
        _check_count("mia.members", self.members, 50, 100_000)
        for e in self.epsilons:
            _check_range("mia.epsilons", e, 0.0, 100.0)
        _check_subset("mia.learners", self.learners, (*LEARNERS, *FORESTS))


@dataclass(frozen=True)
class Multiclass:
    """The multiclass rows: each learner at its binary ``source`` dataset's selection.

    No tuning of its own: a tuned learner reuses the main stage's selection on
    ``source`` at the same ε (the same rows, two classes fewer), a forest its
    fixed setting, so the stage costs only its evaluation fits.
    """

    dataset: str = "brfss3"
    source: str = "brfss"
    epsilons: tuple[float, ...] = (0.5, 2.0, 8.0)
    seeds: int = 10
    learners: tuple[str, ...] = MULTICLASS_LEARNERS

    def __post_init__(self) -> None:
        _check(
            "multiclass.dataset",
            self.dataset,
            self.dataset in MULTICLASS_DATASETS,
            f"one of {list(MULTICLASS_DATASETS)}",
        )
        _check("multiclass.source", self.source, self.source in DATASETS, f"one of {DATASETS}")
        for e in self.epsilons:
            _check_range("multiclass.epsilons", e, 0.0, 100.0)
        _check_count("multiclass.seeds", self.seeds, 1, 1000)
        _check_subset("multiclass.learners", self.learners, MULTICLASS_LEARNERS)


@dataclass(frozen=True)
class PrivateTuning:
    """Accounted tuning (Papernot & Steinke 2022; :mod:`fedpriv.experiments.bench.private_tuning`).

    K ~ TNB(``eta``, γ) with γ solved for E[K] = ``mean_runs`` (``distribution
    = "tnb"``), or K ~ Poisson(``mean_runs``); each run draws a grid point,
    trains on ``train`` and releases its validation AUC from a score
    histogram of ``val_bins`` bins per class with Gaussian noise of multiplier
    ``val_noise`` (Δ₂ = 1). ``datasets``/``epsilons``/``learners``/``seeds``
    size the ``private_tuning`` stage; ``tuning = "private"`` uses the study's.
    """

    distribution: str = "tnb"
    eta: float = 1.0
    mean_runs: float = 5.0
    val_noise: float = 10.0
    val_bins: int = 20
    seeds: int = 5
    datasets: tuple[str, ...] = ("brfss", "diabetes130")
    epsilons: tuple[float, ...] = (1.0, 4.0)
    learners: tuple[str, ...] = ("logistic", "boosting")

    def __post_init__(self) -> None:
        allowed = ("tnb", "poisson")
        _check(
            "private_tuning.distribution",
            self.distribution,
            self.distribution in allowed,
            f"one of {list(allowed)}",
        )
        _check_range("private_tuning.eta", self.eta, -1.0, 100.0)
        lo = 1.0 if self.distribution == "tnb" else 0.0
        _check_range("private_tuning.mean_runs", self.mean_runs, lo, 1000.0)
        _check_range("private_tuning.val_noise", self.val_noise, 0.0, 1e6)
        _check_count("private_tuning.val_bins", self.val_bins, 2, 1000)
        _check("private_tuning.val_bins", self.val_bins, self.val_bins % 2 == 0, "even")
        _check_count("private_tuning.seeds", self.seeds, 1, 1000)
        _check_subset("private_tuning.datasets", self.datasets, DATASETS)
        for e in self.epsilons:
            _check_range("private_tuning.epsilons", e, 0.0, 100.0)
        _check_subset("private_tuning.learners", self.learners, LEARNERS)


@dataclass(frozen=True)
class StudyConfig:
    """A whole matched-accounting study (benchmark paper §4.2 protocol).

    ``tuning="validation"`` selects each learner's configuration per (dataset,
    ε) by mean validation AUC over ``tune_seeds`` fits on the training split:
    the paper's protocol, whose privacy cost on the validation rows is *not*
    accounted. ``tuning="paper"`` skips tuning and uses the paper's selected
    settings (TARGETS.md, paper Table 5): public constants, so the ledger of
    each fit is the whole privacy cost. ``tuning="private"`` tunes per seed
    with the accounted random search of ``private_tuning`` (its selection is
    inside each row's ε).
    """

    name: str
    datasets: tuple[str, ...]
    epsilons: tuple[float, ...]
    delta: float
    seeds: int
    tune_seeds: int
    tuning: str
    learners: tuple[str, ...]
    grids: tuple[Grid, ...]
    n_clients: int = 5
    processes: int = 2
    secure_aggregation: bool = False
    forests: Forests = field(default_factory=Forests)
    ablations: Ablations = field(default_factory=Ablations)
    sweep: Sweep = field(default_factory=Sweep)
    tstar: TStar = field(default_factory=TStar)
    mia: MIA = field(default_factory=MIA)
    multiclass: Multiclass = field(default_factory=Multiclass)
    private_tuning: PrivateTuning = field(default_factory=PrivateTuning)
    stages: tuple[str, ...] = ("main", "ablations", "sweep", "tstar", "mia")
    grid_points: int = 0  # > 0: every tuned learner's grid has exactly this many points

    def __post_init__(self) -> None:
        _check_subset("datasets", self.datasets, DATASETS)
        _check("epsilons", self.epsilons, len(self.epsilons) > 0, "a non-empty list")
        for e in self.epsilons:
            _check_range("epsilons", e, 0.0, 100.0)
        _check_range("delta", self.delta, 0.0, 0.1)
        _check_count("seeds", self.seeds, 2, 1000)
        _check_count("tune_seeds", self.tune_seeds, 1, 100)
        _check("tuning", self.tuning, self.tuning in TUNING_MODES, f"one of {list(TUNING_MODES)}")
        _check_subset("learners", self.learners, TUNED)
        _check_count("n_clients", self.n_clients, 2, 100)
        _check_count("processes", self.processes, 1, 2)
        _check_subset("stages", self.stages, STAGES)
        grids = {g.learner for g in self.grids}
        missing = [n for n in self.learners if n not in grids]
        if self.tuning in ("validation", "private") and missing:
            raise ValueError(f"grids must cover every learner; missing {missing}")
        for g in self.grids:  # a symmetric study: the same search effort for every learner
            n = len(g.configs())
            if self.grid_points and g.learner in self.learners and n != self.grid_points:
                raise ValueError(
                    f"grids.{g.learner} must have grid_points={self.grid_points} points; got {n}"
                )
        if "private_tuning" in self.stages:
            missing = [n for n in self.private_tuning.learners if n not in grids]
            if missing:
                raise ValueError(
                    f"grids must cover every private_tuning learner; missing {missing}"
                )

    def grid(self, learner: str) -> Grid:
        return next(g for g in self.grids if g.learner == learner)


def _tuple(v: Any) -> Any:
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def _pairs(table: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, _tuple(v)) for k, v in table.items()))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


_SECTIONS = {
    "ablations": Ablations,
    "sweep": Sweep,
    "tstar": TStar,
    "multiclass": Multiclass,
    "private_tuning": PrivateTuning,
}


def from_dict(raw: dict[str, Any], *, quick: bool = False) -> StudyConfig:
    """Build a config from parsed TOML (``quick``: merge the ``[quick]`` table first)."""
    raw = dict(raw)
    over = raw.pop("quick", {})
    if quick:
        raw = _merge(raw, over)
    study = {k: _tuple(v) for k, v in raw.get("study", {}).items()}
    grids = tuple(
        Grid(learner=name, values=tuple((k, _tuple(v)) for k, v in table.items()))
        for name, table in raw.get("grids", {}).items()
    )
    kw: dict[str, Any] = {
        name: cls(**{k: _tuple(v) for k, v in raw[name].items()})
        for name, cls in _SECTIONS.items()
        if name in raw
    }
    if "forests" in raw:
        f = dict(raw["forests"])
        kw["forests"] = Forests(
            seeds=f.get("seeds", 5),
            lumberjack=_pairs(f.get("lumberjack", dict(Forests.lumberjack))),
            random_forest=_pairs(f.get("random_forest", dict(Forests.random_forest))),
            bdpe=_pairs(f.get("bdpe", dict(Forests.bdpe))),
            learners=_tuple(f.get("learners", list(FORESTS))),
        )
    if "mia" in raw:
        m = dict(raw["mia"])
        off = m.pop("offpath", None)
        kw["mia"] = MIA(
            **{k: _tuple(v) for k, v in m.items()},
            **({"offpath": _pairs(off)} if off is not None else {}),
        )
    try:
        return StudyConfig(grids=grids, **study, **kw)
    except TypeError as err:  # unknown or missing keys
        raise ValueError(f"bad study config: {err}") from None


def load(path: str | Path, *, quick: bool = False) -> StudyConfig:
    """Read a study TOML file (see ``experiments/configs/matched.toml``)."""
    with open(path, "rb") as fh:
        return from_dict(tomllib.load(fh), quick=quick)
