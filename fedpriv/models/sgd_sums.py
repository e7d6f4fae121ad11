"""Compiled clipped sums of the built-in DP-SGD models over many clients' rows.

The clients' side of a step (:mod:`fedpriv.clients.dpsgd`): rows of K clients stacked
once (:class:`RowBlocks`), then each step one compiled call
(:mod:`fedpriv.models._sgd_kernels`) returns every client's clipped gradient
sum (:func:`compiled_clipped_sums`), or, in the centring round, its clipped
sum of mapped rows (:func:`compiled_feature_sums`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from fedpriv.models.networks import InputMap, ModelKind, NetworkSpec, check_params

#: Query ``config["stage"]`` of the centring round (the clients' clipped feature sums)
#: and of a DP-SGD step (the clipped gradient sums; a query without a stage is a step).
CENTRE, STEP = "centre", "step"


def clipped_sum_sensitivity(
    *, clip_norm: float, bias_bound: float = 0.0, dims: int
) -> tuple[float, float]:
    """(L1, L2): how far one record moves a clipped sum of ``dims`` floats (add or remove).

    The record's vector is clipped to L2 norm C (``clip_norm``), or, with
    ``bias_bound`` B > 0, its output bias's part to B and the rest to C on its
    own (:func:`compiled_clipped_sums`, the Opacus backend, the centring round's
    rows with B = 0): L2 = √(C² + B²), and L1 ≤ √dims · L2 (Cauchy–Schwarz;
    attained by the joint clip).
    """
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"clip_norm must lie in (0, inf); got {clip_norm!r}")
    if not (math.isfinite(bias_bound) and bias_bound >= 0):
        raise ValueError(f"bias_bound must lie in [0, inf); got {bias_bound!r}")
    if isinstance(dims, bool) or not isinstance(dims, int | np.integer) or dims < 1:
        raise ValueError(f"dims must be an integer in [1, inf); got {dims!r}")
    l2 = math.hypot(clip_norm, bias_bound)
    return math.sqrt(dims) * l2, l2


@dataclass(frozen=True, eq=False)
class RowBlocks:
    """K clients' rows stacked, row-major, checked once for the compiled sums.

    Client c owns rows ``offsets[c] .. offsets[c] + sizes[c]`` of ``X``
    (N × d, float64, C order: a sampled row is read front to back) and the
    same entries of ``y``.
    """

    X: np.ndarray
    y: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray

    def __post_init__(self) -> None:
        X = np.ascontiguousarray(self.X, dtype=np.float64)
        y = np.ascontiguousarray(self.y, dtype=np.float64)
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        sizes = np.ascontiguousarray(self.sizes, dtype=np.int64)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"X must be (N, d) and y (N,); got {X.shape} and {y.shape}")
        if (
            offsets.ndim != 1
            or sizes.shape != offsets.shape
            or (sizes.size and (offsets.min() < 0 or sizes.min() < 0))
            or (sizes.size and (offsets + sizes).max() > X.shape[0])
        ):
            raise ValueError(f"client blocks (offsets {offsets}, sizes {sizes}) exceed N={y.size}")
        for name, value in (("X", X), ("y", y), ("offsets", offsets), ("sizes", sizes)):
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, Xs: list[np.ndarray], ys: list[np.ndarray]) -> RowBlocks:
        """Blocks of the given clients' row-major matrices (one client: not a copy)."""
        sizes = np.array([y.size for y in ys], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        if len(Xs) == 1:
            return cls(Xs[0], ys[0], offsets, sizes)
        return cls(np.concatenate(Xs, axis=0), np.concatenate(ys), offsets, sizes)

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])


def compiled_clipped_sums(
    spec: NetworkSpec,
    params: np.ndarray,
    blocks: RowBlocks,
    clip: float,
    samples: list[np.ndarray],
    input_map: InputMap | None = None,
    *,
    bias_bound: float = 0.0,
) -> np.ndarray:
    """Each client's clipped gradient sum (rows of the (K, P) result), compiled.

    ``bias_bound`` B > 0 clips the output bias's gradient r on its own to B and
    the rest to C (:func:`fedpriv.models.networks.clipped_gradient_sum`); 0
    clips the whole gradient to C. ``samples[c]`` indexes into client c's block. Rows are mapped by
    ``input_map`` (default identity) on the fly; the result equals
    :func:`clipped_gradient_sum` on the mapped rows up to rounding, and is
    bit-identical for a client whether it is served alone or among others
    (:mod:`fedpriv.models._sgd_kernels`).
    """
    from fedpriv.models import _sgd_kernels

    params = check_params(spec, params)
    if blocks.n_features != spec.n_features or len(samples) != blocks.sizes.size:
        raise ValueError(
            f"{len(samples)} samples for {blocks.sizes.size} clients of {blocks.n_features} "
            f"features; the model has {spec.n_features}"
        )
    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"clip must lie in (0, inf); got {clip!r}")
    if not (bias_bound >= 0 and math.isfinite(bias_bound)):
        raise ValueError(f"bias_bound must lie in [0, inf); got {bias_bound!r}")
    imap = input_map or InputMap.identity(spec.n_features)
    if imap.n_features != spec.n_features:
        raise ValueError(f"input map has {imap.n_features} features; the model {spec.n_features}")
    rows, starts = _rows(samples)
    out = np.zeros((len(samples), spec.n_params))
    head = (blocks.X, imap.shift, imap.scale, blocks.y, params)
    tail = (float(clip), float(bias_bound), rows, starts, blocks.offsets, blocks.sizes, out)
    if spec.n_outputs > 1:
        # A label outside 0..K−1 adds nothing (its r would not be softmax − e_y).
        hidden = 0 if spec.kind is ModelKind.LOGISTIC else spec.hidden
        ok = _sgd_kernels.softmax_clipped_sums(*head, hidden, spec.n_classes, *tail)
    elif spec.kind is ModelKind.LOGISTIC:
        ok = _sgd_kernels.logistic_clipped_sums(*head, *tail)
    else:
        ok = _sgd_kernels.mlp_clipped_sums(*head, spec.hidden, *tail)
    if not ok:
        raise ValueError(f"a sample holds a row index outside its client's rows ({blocks.sizes})")
    return out


def compiled_feature_sums(
    blocks: RowBlocks, input_map: InputMap, clip: float, samples: list[np.ndarray]
) -> np.ndarray:
    r"""Each client's Σ_i x̃_i · min(1, R/‖x̃_i‖) over its sample (rows of the (K, d) result).

    x̃ = ``input_map``\ (x); one record moves a sum by at most R = ``clip``.
    """
    from fedpriv.models import _sgd_kernels

    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"clip must lie in (0, inf); got {clip!r}")
    if input_map.n_features != blocks.n_features or len(samples) != blocks.sizes.size:
        raise ValueError(
            f"{len(samples)} samples for {blocks.sizes.size} clients of {blocks.n_features} "
            f"features; the input map has {input_map.n_features}"
        )
    rows, starts = _rows(samples)
    out = np.zeros((len(samples), blocks.n_features))
    args = (rows, starts, blocks.offsets, blocks.sizes, out)
    if not _sgd_kernels.feature_sums(blocks.X, input_map.shift, input_map.scale, clip, *args):
        raise ValueError(f"a sample holds a row index outside its client's rows ({blocks.sizes})")
    return out


def _rows(samples: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The samples' row indices end to end (int64) and where each client's start."""
    rows = np.concatenate(samples) if samples else np.zeros(0, dtype=np.int64)
    if rows.ndim != 1:
        raise ValueError(f"samples must be 1-D arrays of row indices; got shape {rows.shape}")
    if rows.dtype != np.int64:
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"samples must hold integer row indices; got {rows.dtype}")
        rows = rows.astype(np.int64)
    starts = np.array([0, *itertools.accumulate(s.size for s in samples)], dtype=np.int64)
    return rows, starts
