"""Fixed-point encoding in the ring Z_{2^64}, shared by the secure and the plain sums.

Secure aggregation (:mod:`fedpriv.federation.secagg`) masks and sums vectors in
Z_{2^64}; :class:`FixedPointCodec` maps bounded floats into that ring and back,
refusing any configuration whose largest possible sum would wrap. The plain
path (:func:`sum_plain`, ``secure_aggregation=False``) sums the same encodings
without masks, so both paths release bit-identical sums.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from fedpriv.validation import check_count, check_finite_array, check_positive

_INT64_MAX = 2**63 - 1


class SecAggOverflowError(ValueError):
    """The codec's largest possible sum would leave the signed 64-bit range."""


@dataclass(frozen=True, kw_only=True)
class FixedPointCodec:
    """Fixed-point encoding in Z_{2^64}: x ↦ round(x·scale) mod 2^64 (two's complement).

    Parameters
    ----------
    scale : float
        Encoding scale, in (0, inf); each summand's rounding error is ≤ 0.5/scale.
    max_abs : float
        Public bound on |coordinate| of one client's vector (from the clipping
        bound), in (0, inf); :meth:`encode` refuses values beyond it.
    max_summands : int
        Most vectors ever summed, ≥ 1.

    Raises :class:`SecAggOverflowError` if max_summands·(max_abs·scale + 0.5) ≥ 2^63 − 1:
    the largest sum would leave the signed 64-bit range and wrap silently.

    Rounding and DP: two vectors at L2 distance Δ encode at distance up to
    Δ + √d/scale (L1: Δ₁ + d/scale), e.g. more than Δ·scale ticks. The runtimes
    use scale = 2^32, the noise grid's 1/γ, so this is the rounding margin
    every mechanism adds to its sensitivity
    (:func:`fedpriv.federation.runtime.codec_for`,
    :func:`fedpriv.privacy.randomness.rounding_margin`).
    """

    scale: float
    max_abs: float
    max_summands: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "max_abs", check_positive("max_abs", self.max_abs))
        object.__setattr__(self, "max_summands", check_count("max_summands", self.max_summands))
        # encode rounds fl(x·scale) ≤ fl(max_abs·scale) (rounding is monotone), so the float
        # product bounds what it emits; the comparison is exact so no limit case slips through.
        top = self.max_abs * self.scale  # may overflow to inf, which Fraction refuses
        worst = self.max_summands * (Fraction(top) + Fraction(1, 2)) if math.isfinite(top) else top
        if worst >= _INT64_MAX:
            hint = (_INT64_MAX / self.max_summands - 0.5) / self.max_abs
            raise SecAggOverflowError(
                f"max_summands * (max_abs * scale + 0.5) = {self.max_summands} * "
                f"({self.max_abs!r} * {self.scale!r} + 0.5) = {float(worst):.6g} must be "
                f"< 2**63 - 1 = {_INT64_MAX} (signed 64-bit sum); use a smaller scale, "
                f"below {hint:.6g} for these max_abs and max_summands"
            )

    @property
    def resolution(self) -> float:
        """1/scale; each summand is off by at most half of it."""
        return 1.0 / self.scale

    def encode(self, x) -> np.ndarray:
        """Encode a finite float array with every |x_i| ≤ max_abs as uint64."""
        arr = np.asarray(x, dtype=np.float64)
        if arr.size == 0:
            # A round may ask for nothing (Lumberjack once every node is at
            # or under the gate): the empty sum, not an error.
            return np.zeros(arr.shape, dtype=np.uint64)
        # One reduction screens everything (NaN fails ``<=`` too); the slow path names it.
        if not np.abs(arr).max() <= self.max_abs:
            check_finite_array("x", arr)
            i = int(np.argmax(np.abs(arr)))
            # A bound violation means the caller's clipping is broken: fail, never saturate.
            raise ValueError(
                f"|x| must be <= max_abs = {self.max_abs!r} (allowed range [-{self.max_abs!r}, "
                f"{self.max_abs!r}]); found {float(arr.flat[i])!r} at flat index {i}"
            )
        scaled = arr * self.scale
        return np.rint(scaled, out=scaled).astype(np.int64).view(np.uint64)

    def decode(self, s) -> np.ndarray:
        """Decode a uint64 sum of at most ``max_summands`` encodings to float64."""
        arr = np.asarray(s)
        if arr.dtype != np.uint64:
            raise TypeError(f"s must be a uint64 array; got dtype {arr.dtype}")
        return arr.view(np.int64) / self.scale


def sum_plain(vectors: Iterable, codec: FixedPointCodec) -> np.ndarray:
    """Sum fixed-point encodings without masks (the ``secure_aggregation=False`` path).

    ``vectors`` is a sequence of equal-length 1-D arrays (or a 2-D array, one
    vector per row). Same ring as the secure path, so both give bit-identical
    sums: addition mod 2^64 does not depend on the order.
    """
    stacked = np.asarray(vectors if isinstance(vectors, np.ndarray) else list(vectors))
    if stacked.ndim != 2 or not 1 <= stacked.shape[0] <= codec.max_summands:
        raise ValueError(
            f"need 1 to max_summands = {codec.max_summands} vectors of one length; "
            f"got shape {stacked.shape}"
        )
    encoded = codec.encode(stacked)  # refuses NaN, inf and |x| > max_abs
    return codec.decode(encoded.sum(axis=0, dtype=np.uint64))
