"""Accounted hyper-parameter tuning: ``tuning = "private"`` and the ``private_tuning`` stage.

Papernot & Steinke (2022), Algorithm 1, per (dataset, ε, learner) and
evaluation seed s:

1. **calibrate** the per-run budget ε_b so that the best-of-K procedure is
   (ε, δ)-DP, K ~ TNB(η, γ) (Theorem 2) or Poisson(μ) (Theorem 6); a base
   run's curve is the maximum over the grid's configurations, each one its
   training plan at (ε_b, δ) plus its DP validation score
   (:func:`fedpriv.privacy.tuning_calibration.calibrate_base_epsilon`);
2. **charge** the selection to the cell's ledger (budget (ε, δ)) as one
   :class:`~fedpriv.privacy.events.TunedSelectionDpEvent`: over budget
   raises here, before any run draws noise. Its ε is the RDP figure (no PLD
   rule exists for the selection), and that is the row's ``epsilon_spent``;
3. draw K and K grid points uniformly from a private generator keyed by the
   cell (:func:`fedpriv.experiments.keys.secret_key_for`), never by a public seed;
4. run each: fit on ``train`` at (ε_b, δ), release the validation AUC from
   a noisy score histogram (:mod:`fedpriv.evaluation.dp`, Gaussian with
   multiplier ``val_noise``, Δ₂ = 1: one record moves one count by one), and
   check that the fit's own ledger spent no more than its planned curve;
5. release the run with the best noisy validation AUC; the row holds its
   *test* metrics (the benchmark's evaluation, never seen by the selection).

**K stays hidden.** The theorems bound the best run's (model, score), not
the pair (K, best): K is drawn privately and no row reports it (only E[K]).
The cell cache under ``OUT/cache`` holds every run's results, like the
validation mode's tuning cells: it is the harness's own record, not a release.

**Trust.** The validation score is part of the base run and must be DP: with
an exact score the theorems' premise fails and the choice of the best run
leaks the validation rows, which is what ``tuning = "validation"`` does
without accounting it. K = 0 (possible under Poisson) releases nothing: the
row then scores the constant predictor (AUC ½).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event
from fedpriv.experiments.bench.cells import content_key
from fedpriv.experiments.bench.learners import label
from fedpriv.experiments.bench.private_tuning_report import (  # noqa: F401 - re-exported
    report_section,
    summary,
)

from fedpriv.privacy.tuning import RunsDistribution

#: Bump when a change alters what a run computes.
RUN_VERSION = "private-run-2"
#: First public run seed of the base runs (apart from evaluation and tuning seeds).
RUN_SEED0 = 20_000
#: Test metrics a row carries (``binary_metrics``' keys).
TEST_METRICS = (
    "auc",
    "auprc",
    "brier",
    "brier_base",
    "sensitivity_at_prevalence",
    "specificity_at_prevalence",
)


@dataclass(frozen=True)
class RunCell:
    """One base run: fit on ``train`` at the per-run (ε_b, δ), DP-score ``val``, score ``test``."""

    dataset: str
    learner: str
    params: tuple[tuple[str, Any], ...]
    epsilon: float  # per-run ε_b
    delta: float
    seed: int
    val_noise: float
    val_bins: int
    n_clients: int = 5
    secure_aggregation: bool = False

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        return content_key(RUN_VERSION, self)


def distribution(pt) -> RunsDistribution:
    """The law of K from a :class:`~fedpriv.experiments.bench.config.PrivateTuning` section."""
    if pt.distribution == "poisson":
        return RunsDistribution.poisson(mean=pt.mean_runs)
    return RunsDistribution.tnb(eta=pt.eta, mean=pt.mean_runs)


def releases(params: dict[str, Any]) -> tuple[int, float]:
    """(Gaussian releases T, Poisson rate q) of a base run with ``params``.

    A gaussian-rounds learner releases once per round at its ``sampling_rate``;
    the histogram learner (``dp_gam``, no ``sampling_rate``) every record once
    per round, plus the quantile sketch when ``quantile_bins`` (its default).
    The fit's ledger is checked against this plan after every run.
    """
    if "sampling_rate" in params:
        return int(params["rounds"]), float(params["sampling_rate"])
    return int(params["rounds"]) + int(params.get("quantile_bins", True)), 1.0


def _sgd_train_event(
    learner: str, params: dict[str, Any], epsilon: float, delta: float
) -> dp_event.DpEvent:
    """A DP-SGD base run's stages (centring, steps, recalibration), calibrated jointly to
    (ε_b, δ) exactly as the learner plans them (:mod:`fedpriv.strategies.dpsgd_plan`)."""
    import dataclasses

    from fedpriv.strategies.dpsgd import LogisticConfig, MLPConfig

    from fedpriv.models import sgd_recalibration as recal
    from fedpriv.privacy.noise_plan import StagePlan, joint_multipliers
    from fedpriv.privacy.participation import plan_event as rounds_event

    kind = MLPConfig if learner == "mlp" else LogisticConfig
    names = {f.name for f in dataclasses.fields(kind)}
    cfg = kind(**{k: v for k, v in params.items() if k in names})
    cs, rs = cfg.centre_share, cfg.recalibrate_share
    steps = cfg.rounds - int(cs > 0) - recal.ROUNDS * int(rs > 0)
    stages = [StagePlan(share=1.0 - cs - rs, l2_sensitivity=1.0, sampling_rate=cfg.sampling_rate,
                        rounds=steps)]  # fmt: skip
    if cs > 0:
        stages.insert(0, StagePlan(share=cs, l2_sensitivity=1.0, sampling_rate=1.0, rounds=1))
    if rs > 0:
        stages.append(
            StagePlan(share=rs, l2_sensitivity=1.0, sampling_rate=1.0, rounds=recal.ROUNDS)
        )
    zs = joint_multipliers(stages, epsilon=epsilon, delta=delta, participation=1.0,
                           accounting=cfg.participation_accounting)  # fmt: skip
    return dp_event.ComposedDpEvent(
        [
            rounds_event(
                z,
                sampling_probability=st.sampling_rate,
                participation=1.0,
                steps=st.rounds,
                accounting=cfg.participation_accounting,
            )
            for z, st in zip(zs, stages, strict=True)
        ]
    )


def plan_event(
    params: dict[str, Any],
    epsilon: float,
    delta: float,
    val_noise: float,
    learner: str | None = None,
) -> dp_event.DpEvent:
    """A whole base run's event: its releases at (ε_b, δ) and the validation release.

    DP-SGD (``learner`` ``logistic``/``mlp``): its stages, jointly calibrated as the
    learner does (:func:`_sgd_train_event`). Else T (subsampled) Gaussians: the
    learners calibrate z with
    :func:`~fedpriv.privacy.participation.calibrate_participation_noise_multiplier`
    (full participation here); the same call, cached, gives the same z.
    """
    from fedpriv.privacy.participation import (
        calibrate_participation_noise_multiplier,
    )
    from fedpriv.privacy.participation import (
        plan_event as rounds_event,
    )

    if learner in ("logistic", "mlp"):
        train = _sgd_train_event(learner, params, epsilon, delta)
        return dp_event.ComposedDpEvent((train, dp_event.GaussianDpEvent(val_noise)))
    steps, q = releases(params)
    z = calibrate_participation_noise_multiplier(
        target_epsilon=epsilon,
        target_delta=delta,
        sampling_probability=q,
        participation=1.0,
        steps=steps,
    ).noise_multiplier
    train = rounds_event(z, sampling_probability=q, participation=1.0, steps=steps)
    return dp_event.ComposedDpEvent((train, dp_event.GaussianDpEvent(val_noise)))


@functools.cache
def calibrate(
    configs: tuple,
    epsilon: float,
    delta: float,
    dist: RunsDistribution,
    val_noise: float,
    learner: str | None = None,
):
    """Per-run budget of one (ε, learner) grid (the dataset does not enter the plan)."""
    from fedpriv.privacy.tuning_calibration import calibrate_base_epsilon

    if learner in ("logistic", "mlp"):  # the stages depend on more than (T, q)
        plans = [dict(c) for c in dict.fromkeys(configs)]
    else:
        plans = [{"rounds": t, "sampling_rate": q}
                 for t, q in dict.fromkeys(releases(p) for p in map(dict, configs))]  # fmt: skip
    return calibrate_base_epsilon(
        target_epsilon=epsilon,
        target_delta=delta,
        candidates=lambda eb: [plan_event(p, eb, delta, val_noise, learner) for p in plans],
        distribution=dist,
    )


def run_base(cell: RunCell) -> dict[str, Any]:
    """Fit, check the fit's spend against its plan, DP-score ``val``, score ``test``."""

    from fedpriv.experiments.bench import learners
    from fedpriv.experiments.keys import secret_key_for

    from fedpriv.evaluation.dp import binned_auc, score_histogram
    from fedpriv.evaluation.metrics import base_rate_brier, binary_metrics
    from fedpriv.privacy import GaussianMechanism, accounting

    key = secret_key_for("private_run", cell.key)
    clf, ds, seconds = learners.fitted(cell, "train", key.derive("fit"))
    planned = plan_event(cell.param_dict, cell.epsilon, cell.delta, cell.val_noise, cell.learner)
    spent = accounting.rdp_curve(dp_event.ComposedDpEvent([e.event for e in clf.ledger_.entries]))
    val_release = accounting.rdp_curve(dp_event.GaussianDpEvent(cell.val_noise))
    if np.any(spent + val_release > accounting.rdp_curve(planned) * (1 + 1e-9) + 1e-12):
        raise RuntimeError(
            f"{cell.learner} {label(cell.learner, cell.param_dict)} spent more than its "
            f"planned base run at epsilon={cell.epsilon:g}: the selection's event does not "
            "cover it"
        )
    Xv, yv = ds.xy("val")
    hist = score_histogram(clf.predict_proba(Xv)[:, 1], yv, bins=cell.val_bins)
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=cell.val_noise)
    noisy = mech.apply(hist, rng=key.generator("val"))
    Xt, yt = ds.xy("test")
    out = {k: v for k, v in binary_metrics(yt, clf.predict_proba(Xt)[:, 1]).items()}
    out["brier_base"] = base_rate_brier(ds.xy("train")[1], yt)
    out["val_auc_dp"] = float(np.clip(binned_auc(noisy)[0], 0.0, 1.0))
    out["seconds"] = seconds
    return out


def _draws(dataset: str, eps: float, learner: str, seed: int, n_grid: int, dist) -> list[int]:
    """K, then K grid indices, from the cell's private generator."""
    from fedpriv.experiments.keys import secret_key_for

    rng = secret_key_for("private_tuning", dataset, learner, repr(float(eps)), seed).generator("k")
    k = dist.sample(rng)
    return [int(i) for i in rng.integers(0, n_grid, size=k)]


def run_private(
    ctx,
    *,
    stage: str,
    datasets: tuple[str, ...],
    epsilons: tuple[float, ...],
    learners: tuple[str, ...],
    seeds: int,
) -> list[dict]:
    """Rows of variant ``"private"``: per (dataset, ε, learner, seed), the selected run's test
    metrics, E[K], the per-run ε and the ledger's ε."""
    import time

    from fedpriv.privacy import PrivacyBudget, PrivacyLedger

    cfg, pt = ctx.cfg, ctx.cfg.private_tuning
    dist = distribution(pt)
    t0 = time.perf_counter()
    plan: dict[tuple, tuple[Any, list[RunCell]]] = {}
    for m in learners:
        grid = cfg.grid(m).configs()
        configs = tuple(tuple(sorted(c.items())) for c in grid)
        for e in epsilons:
            cal = calibrate(configs, float(e), cfg.delta, dist, pt.val_noise, m)
            for d in datasets:
                for s in range(seeds):
                    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=e, delta=cfg.delta))
                    # Charged before any run draws noise: over budget raises here.
                    ledger.spend(cal.event, label=f"private tuning {d} {m} seed {s}")
                    runs = [
                        RunCell(
                            d,
                            m,
                            configs[i],
                            cal.base_epsilon,
                            cfg.delta,
                            RUN_SEED0 + 1000 * s + j,
                            pt.val_noise,
                            pt.val_bins,
                            cfg.n_clients,
                            cfg.secure_aggregation,
                        )
                        for j, i in enumerate(_draws(d, e, m, s, len(configs), dist))
                    ]
                    plan[(d, e, m, s)] = (cal, ledger.report(), runs)
    ctx.timing.append(
        {
            "stage": f"{stage} (per-run budget calibration)",
            "cells": 0,
            "wall_seconds": time.perf_counter() - t0,
            "cell_seconds": 0.0,
        }
    )
    res = ctx.run(stage, [c for _, _, runs in plan.values() for c in runs], runner=run_base)
    rows = []
    for (d, e, m, s), (cal, report, runs) in plan.items():
        best = max(runs, key=lambda c: res[c]["val_auc_dp"], default=None)
        metrics = {k: (res[best][k] if best else _constant(k)) for k in TEST_METRICS}
        metrics.update(
            val_auc_dp=res[best]["val_auc_dp"] if best else math.nan,
            expected_runs=dist.expected_runs,
            base_epsilon=cal.base_epsilon,
            epsilon_spent=report.epsilon,
            epsilon_rdp=report.accounting.epsilon_rdp,
        )
        base = {
            "stage": stage,
            "dataset": d,
            "learner": m,
            "variant": "private",
            "config": label(m, best.param_dict) if best else "none (K = 0)",
            "epsilon": e,
            "seed": s,
        }
        rows += [{**base, "metric": k, "value": float(v)} for k, v in metrics.items()]
    return rows


def _constant(metric: str) -> float:
    """The constant predictor's test metric (K = 0: nothing released)."""
    return 0.5 if metric == "auc" else math.nan


def run_stage(ctx) -> list[dict]:
    """The ``private_tuning`` stage on its own section's datasets, ε, learners and seeds."""
    pt = ctx.cfg.private_tuning
    return run_private(
        ctx,
        stage="private_tuning",
        datasets=pt.datasets,
        epsilons=pt.epsilons,
        learners=pt.learners,
        seeds=pt.seeds,
    )
