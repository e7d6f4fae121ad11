"""How many points a PLD needs, known before it is built: the guard on its size.

A pessimistic PLD stores its privacy-loss distribution on a grid of step
``vdi`` (dp-accounting's ``value_discretization_interval``), so its size is
the width of the loss range divided by ``vdi`` (Doroshenko et al. 2022,
"Connect the Dots", §3). The width explodes in two places:

* **little noise**: the loss of a Gaussian with noise multiplier z spans
  about ``1/(2z²) + 20/z`` nats (its tails truncated at a mass of e⁻⁵⁰), so
  z = 1e-3 needs 5·10⁹ points at 1e-4; a Laplace of parameter b spans 2/b;
* **composition**: T self-compositions spread the loss by ~√T standard
  deviations plus the Chernoff tail margin dp-accounting keeps
  (``common.compute_self_convolve_bounds``).

fedpriv builds no PLD, and composes none, whose grid would pass
:data:`MAX_PLD_POINTS`; it raises :class:`PLDSizeError` *before* allocating.
The count is the PLD's own: the connect-the-dots bounds of the mechanism
(``connect_dots_bounds``, analytic) for a leaf, dp-accounting's Chernoff
bound for a self-composition, the sum of widths for a composition.

A second trap is dp-accounting's sparse self-composition, which computes
``size ** count`` as an exact integer (26 s at count = 10⁷):
:func:`dense` converts first.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

PLD = pld_lib.PrivacyLossDistribution

#: Largest PLD grid fedpriv builds or composes, in points: 2²¹ ≈ 2.1 M, a
#: 16 MiB dense PMF and an FFT working set near 0.25 GiB (a few seconds of
#: one core). A paper run (boosting: ε = 2, T = 75, q = 0.05) needs ≈ 1.7·10⁵
#: points at the ledger's 1e-4; ε ≈ 60 on that plan needs 1.4·10⁶.
MAX_PLD_POINTS = 2**21

#: dp-accounting's default ``tail_mass_truncation`` of ``compose`` and
#: ``self_compose``: each composition moves up to this much probability into
#: the infinite-loss bin, so a composed PLD certifies no δ at or below it.
TAIL_MASS_TRUNCATION = 1e-15

#: Largest sparse PMF dp-accounting keeps sparse (``pld_pmf._MAX_PMF_SPARSE_SIZE``).
_SPARSE_LIMIT = 1000


class PLDSizeError(ValueError):
    """A PLD would need more than its point budget; nothing was allocated.

    Attributes
    ----------
    points : float
        Points the PLD would need (``inf`` if the width overflows).
    limit : int
        The budget it was checked against.
    """

    def __init__(self, what: str, points: float, limit: int) -> None:
        self.points = points
        self.limit = limit
        shown = "more than 1e308" if math.isinf(points) else f"{points:.3g}"
        super().__init__(
            f"{what} needs a PLD of {shown} points, over the limit of {limit} "
            f"(fedpriv.privacy.pld_size.MAX_PLD_POINTS = 2**21)"
        )


def check_points(what: str, points: float, limit: int) -> None:
    """Raise :class:`PLDSizeError` if ``points`` exceeds ``limit``."""
    if not points <= limit:
        raise PLDSizeError(what, points, limit)


def grid_points(loss_lower: float, loss_upper: float, vdi: float) -> float:
    """Points of a grid of step ``vdi`` covering [``loss_lower``, ``loss_upper``]."""
    if not (math.isfinite(loss_lower) and math.isfinite(loss_upper)):
        return math.inf
    return math.ceil(loss_upper / vdi) - math.floor(loss_lower / vdi) + 1.0


def _loss_points(make_loss, sampling_probability: float, vdi: float) -> float:
    adjacencies = [plm.AdjacencyType.REMOVE]
    if sampling_probability < 1.0:
        adjacencies.append(plm.AdjacencyType.ADD)
    points = 0.0
    for adjacency in adjacencies:
        try:
            with np.errstate(all="ignore"):  # inf/NaN bounds are caught below
                bounds = make_loss(adjacency).connect_dots_bounds()
        except (OverflowError, ZeroDivisionError, FloatingPointError):
            return math.inf  # σ² under- or overflows: far outside any usable grid
        points = max(points, grid_points(bounds.epsilon_lower, bounds.epsilon_upper, vdi))
    return points


def gaussian_points(noise_multiplier: float, sampling_probability: float, vdi: float) -> float:
    """Points of the connect-the-dots PLD of a (Poisson-subsampled) Gaussian, sensitivity 1.

    The loss range is the privacy loss at dp-accounting's tail truncation
    points (mass e⁻⁵⁰ each side), mapped through subsampling; both
    adjacency directions below q = 1. Analytic: nothing is allocated.
    """
    return _loss_points(
        lambda adjacency: plm.GaussianPrivacyLoss(
            noise_multiplier,
            sensitivity=1.0,
            pessimistic_estimate=True,
            sampling_prob=sampling_probability,
            adjacency_type=adjacency,
        ),
        sampling_probability,
        vdi,
    )


def laplace_points(parameter: float, sampling_probability: float, vdi: float) -> float:
    """Points of the connect-the-dots PLD of a (subsampled) Laplace of parameter b (loss ±1/b)."""
    return _loss_points(
        lambda adjacency: plm.LaplacePrivacyLoss(
            parameter,
            sensitivity=1.0,
            sampling_prob=sampling_probability,
            adjacency_type=adjacency,
        ),
        sampling_probability,
        vdi,
    )


def _pmfs(pld: PLD) -> tuple[pld_pmf.PLDPmf, ...]:
    # private: dp-accounting exposes no getter for the two adjacency PMFs
    return (pld._pmf_remove,) if pld._symmetric else (pld._pmf_remove, pld._pmf_add)


def pmf_span(pmf: pld_pmf.PLDPmf) -> int:
    """Points of ``pmf`` as a dense array (a sparse PMF densifies to its key range)."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = pmf._loss_probs
        return (max(keys) - min(keys) + 1) if keys else 0
    return int(pmf.size)


def span(pld: PLD) -> int:
    """Points of the larger of ``pld``'s two PMFs, dense."""
    return max(pmf_span(p) for p in _pmfs(pld))


def _stays_sparse(pmf: pld_pmf.PLDPmf, count: int) -> bool:
    # dp-accounting keeps a self-composition sparse iff size**count ≤ 1000.
    return isinstance(pmf, pld_pmf.SparsePLDPmf) and (
        pmf.size <= 1 or count * math.log(pmf.size) <= math.log(_SPARSE_LIMIT)
    )


def self_compose_points(pld: PLD, count: int, limit: int = MAX_PLD_POINTS) -> float:
    """Points dp-accounting's ``self_compose(count)`` allocates for ``pld``.

    The dense path convolves by FFT over the range of its Chernoff bound
    (``compute_self_convolve_bounds`` at tail mass 1e-15): the bound itself is
    computed only when the no-truncation width ``(n − 1)·count + 1`` would
    pass ``limit``.
    """
    points = 0.0
    for pmf in _pmfs(pld):
        if count <= 1 or _stays_sparse(pmf, count):
            continue
        n = pmf_span(pmf)
        out = (n - 1.0) * count + 1.0
        if out > limit and n <= limit:
            probs = pmf.to_dense_pmf()._probs
            lo, hi = pld_common.compute_self_convolve_bounds(probs, count, TAIL_MASS_TRUNCATION)
            out = hi - lo + 1.0
        points = max(points, out, float(n))
    return points


def dense(pld: PLD, count: int) -> PLD:
    """``pld`` with a PMF that would leave the sparse path at ``count`` made dense.

    Same distribution; it only steers dp-accounting's ``self_compose`` away
    from the exact ``size ** count`` it computes on the sparse path.
    """
    pmfs = _pmfs(pld)
    if all(count <= 1 or _stays_sparse(p, count) for p in pmfs):
        return pld
    dense_pmfs = [p if _stays_sparse(p, count) else p.to_dense_pmf() for p in pmfs]
    return PLD(*dense_pmfs)


def compose_points(a: PLD, b: PLD) -> float:
    """Points of the dense convolution of ``a`` and ``b`` (before tail truncation)."""
    return float(span(a) + span(b) - 1)


__all__ = [
    "MAX_PLD_POINTS",
    "TAIL_MASS_TRUNCATION",
    "PLDSizeError",
    "check_points",
    "compose_points",
    "dense",
    "gaussian_points",
    "grid_points",
    "laplace_points",
    "pmf_span",
    "self_compose_points",
    "span",
]
