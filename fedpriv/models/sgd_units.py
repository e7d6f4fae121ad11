"""DP-SGD with unit-level privacy: one clipped sum per unit (per-unit gradient clipping).

With a schema's ``unit_column`` (:mod:`fedpriv.privacy.units`) neighbouring datasets
differ by one unit with up to m records. A client then samples whole units (Poisson,
rate q per unit) and, for each sampled unit u, sums its records' per-example
gradients and clips that sum:

    Σ_u clip_C(Σ_{i ∈ u} ∇ℓ(θ; x_i, y_i)),

so one unit moves a step's reply by at most C (√(C² + B²) with the output bias
clipped on its own to B): the per-record sensitivity, now per unit, with q the
units' rate (the "user-level" DP-SGD of McMahan et al. 2018, "Learning
differentially private recurrent language models", with each client's units
clipped at the client). The centring round clips each row to R, sums a unit's
rows and clips that sum to R again.

Clipping per record instead (each of a unit's m gradients to C) lets one unit
move a step by m·C: record-level sensitivity on unit data, the broken twin of
the unit audit (``experiments/audit/units.py``).

Plain numpy over :func:`fedpriv.models.networks.per_example_gradients`, by blocks
of whole units (the n × P gradients are never all materialised).
"""

from __future__ import annotations

import numpy as np

from fedpriv.models.networks import NetworkSpec, clip_factors, per_example_gradients

#: Rows per block of gradients (a block is extended to its last unit's end).
BLOCK_ROWS = 4096


def _blocks(units: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The rows ordered by unit, and [start, stop) blocks of about :data:`BLOCK_ROWS`
    rows that never cut a unit."""
    order = np.argsort(units, kind="stable")
    sorted_units = units[order]
    n, out, start = units.size, [], 0
    while start < n:
        stop = min(start + BLOCK_ROWS, n)
        while stop < n and sorted_units[stop] == sorted_units[stop - 1]:
            stop += 1
        out.append((start, stop))
        start = stop
    return order, out


def _unit_sums(values: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Per-unit sums of ``values`` (rows already ordered by unit), one row per unit."""
    if values.shape[0] == 0:
        return np.zeros((0, values.shape[1]))
    starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
    return np.add.reduceat(values, starts, axis=0)


def _clip_rows(sums: np.ndarray, clip: float, bias_bound: float, n_bias: int) -> np.ndarray:
    """Σ of the rows of ``sums`` each clipped to ``clip`` (its last ``n_bias`` entries to
    ``bias_bound`` on their own when ``bias_bound`` > 0)."""
    if bias_bound == 0:
        return clip_factors(np.linalg.norm(sums, axis=1), clip) @ sums
    rest, bias = sums[:, :-n_bias], sums[:, -n_bias:]
    return np.concatenate(
        [
            clip_factors(np.linalg.norm(rest, axis=1), clip) @ rest,
            clip_factors(np.linalg.norm(bias, axis=1), bias_bound) @ bias,
        ]
    )


def unit_clipped_gradient_sum(
    spec: NetworkSpec,
    params: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    units: np.ndarray,
    clip: float,
    *,
    bias_bound: float = 0.0,
) -> np.ndarray:
    """Σ_u clip(Σ_{i ∈ u} g_i) over the units of the (mapped) rows ``X``: one unit moves
    it by at most √(C² + B²) (module docstring). ``units``: each row's unit code."""
    units = np.asarray(units)
    out = np.zeros(spec.n_params)
    order, blocks = _blocks(units)
    for start, stop in blocks:
        rows = order[start:stop]
        grads = per_example_gradients(spec, params, X[rows], y[rows])
        sums = _unit_sums(grads, units[rows])
        out += _clip_rows(sums, clip, bias_bound, spec.n_outputs)
    return out


def unit_clipped_feature_sum(X: np.ndarray, units: np.ndarray, clip: float) -> np.ndarray:
    """Σ_u clip_R(Σ_{i ∈ u} clip_R(x_i)) over the (mapped) rows ``X``: one unit moves it
    by at most R = ``clip`` (the centring round's unit-level sum)."""
    X = np.asarray(X, dtype=np.float64)
    units = np.asarray(units)
    rows = clip_factors(np.linalg.norm(X, axis=1), clip)[:, None] * X
    order = np.argsort(units, kind="stable")
    sums = _unit_sums(rows[order], units[order])
    return _clip_rows(sums, clip, 0.0, 0) if sums.size else np.zeros(X.shape[1])
