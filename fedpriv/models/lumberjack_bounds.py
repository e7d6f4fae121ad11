"""Public caps on Lumberjack's growth: every data-sized structure, from public values.

A hostile client can add to every count it returns (up to the shim's public
per-client range), which an honest sum never does; without caps every node
then passes the sparse threshold and the trees, the stage queries and the
replies grow exponentially with the depth. The caps below are stated from
public quantities only — the public record bound n (``StrategyContext.n_records``),
the calibration (σ, τ, gate), the trees k, depth d, the stages' heights
h_s, the classes C and ``max_frontier`` — and they are applied to the
*released* Heavy bits in a public order (smallest path key first), so they
are post-processing and cost no privacy.

The per-level cap B (:func:`heavy_level_cap`). Every record adds 1 to one
node per level per tree, so an honest level's counts sum to at most n.
Fix z ≥ 0 and call a node *big* if its count is at least
c*(z) = max(gate + 1, ⌊τ − zσ⌋): at most ⌊n / c*⌋ nodes of a level are big.
A Heavy node is ⊤ itself or an ancestor of a ⊤ node in its stage
(Algorithm 1's MarkUp); an ancestor of a big node is big, so the Heavy
nodes of a level are at most ⌊n / c*⌋ plus the number N of ⊤ answers on
non-big nodes in that tree's stage (each adds at most one Heavy node per
level). A non-big node has count ≤ τ − zσ − 1, so it answers ⊤ with
probability ≤ Φ̄(z) (noise N(0, σ²) on the 2^-32 grid); a node at or under
the gate never does, and each record enters at most q = 1 + ⌊log₂ max_s h_s⌋
queries per tree per stage (Lemma 3), so at most ⌊n·q / (gate + 1)⌋ queried
nodes are at risk and N is dominated by Binomial(⌊n·q/(gate+1)⌋, Φ̄(z)).
With s(z) its (1 − β)-quantile, β = :data:`HONEST_FAILURE` / (k · S · |Z|)
(a union bound over the k trees, S stages and the |Z| values of z tried),

    B = min( ⌊n / (gate + 1)⌋,  min_{z ∈ Z} ⌊n / c*(z)⌋ + s(z) ),

and an honest run has more than B Heavy nodes in some level with probability
at most :data:`HONEST_FAILURE`. Without privacy (CheckThreshold is
``count > 0``) B = n. Adult (n = 26,049, ε = 1, k = 30, d = 49): B = 115;
heart (n = 391, ε = 2, k = 4, d = 21): B = 19.

Without a declared record bound (a strategy built by hand in a test) the
frontier alone bounds a level: a stage grows from at most 2·max_frontier
roots, so a level above its bottom holds at most
B_F = max_frontier · 2^{max_s h_s − 1} Heavy nodes
(:func:`structural_level_cap`); the cap used is min(B, B_F).

The derived caps (:class:`GrowthCaps`), per tree unless said otherwise:

* frontier (Heavy bottom nodes a stage grows from): F = min(max_frontier, B);
* nodes of the released tree: N = Σ_{l=0..d} min(2^l, 2B) ≤ 1 + 2·B·d
  (a level holds both children of at most B Heavy nodes);
* leaves: L = (N + 1) / 2 (a full binary tree);
* stage s's reply (all k trees): k·(2^{h_0} − 1) for s = 0, else
  k·2F·(2^{h_s} − 1) counts;
* the leaf round's reply: k·C·L counts.

Memory: the server holds the released structure (k·N nodes, five 8-byte
arrays each) and one stage's subtrees, k·2F·(2^h − 1) nodes with their
public ranges (2·n_numeric floats) and used-feature masks; a client holds
a (k, n_c) candidate array and one reply. So the server's memory is
O(k·(N + 2F·2^h·(2·n_numeric + n_binary))) bytes·8, whatever the counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedpriv.models.heavy_hitters import mark_heavy_hitters
from fedpriv.models.lumberjack import Stage
from fedpriv.validation import check_count

#: Probability, over an honest run's noise, that a cap binds (removes a Heavy node).
HONEST_FAILURE = 1e-9
#: The noise margins tried (in units of σ); the smallest resulting cap is used.
MARGINS = tuple(np.arange(0.25, 12.01, 0.25))


def heavy_level_cap(
    *,
    n_records: int,
    n_trees: int,
    heights: list[int],
    gate: int = 0,
    tau: float | None = None,
    sigma: float | None = None,
    failure: float = HONEST_FAILURE,
) -> int:
    """B: the most Heavy nodes one level of one tree holds in an honest run (module docstring).

    Parameters
    ----------
    n_records : int
        Public bound n on the run's records (each adds 1 to one node per level).
    n_trees, heights : int, list of int
        k and the stages' heights h_s (the union bound's k·S; q = 1 + ⌊log₂ max h_s⌋).
    gate, tau, sigma : int, float, float
        The sparse threshold's gate, τ and σ (Algorithm 2); ``tau=None``: no
        privacy, CheckThreshold is ``count > 0`` and B = n.
    failure : float
        Bound on the probability that an honest level exceeds B.

    Returns
    -------
    int
        B ≥ 1.
    """
    n = check_count("n_records", n_records)
    k = check_count("n_trees", n_trees)
    gate = check_count("gate", gate, minimum=0)
    if not 0.0 < failure < 1.0:
        raise ValueError(f"failure must lie in (0, 1); got {failure!r}")
    if tau is None:
        return n  # non-private: every non-empty node (≥ 1 record) may split
    if not (math.isfinite(tau) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"tau and sigma must be finite, sigma > 0; got {tau!r}, {sigma!r}")
    q = max(check_count("height", h) for h in heights).bit_length()
    at_risk = n * q // (gate + 1)
    beta = failure / (k * len(heights) * len(MARGINS))
    best = n // (gate + 1)  # deterministic: a Heavy node holds more than `gate` records
    for z in MARGINS:
        big = max(gate + 1, math.floor(tau - z * sigma))
        # Smallest s with P(Binomial(at_risk, Φ̄(z)) > s) <= beta.
        s = int(stats.binom.isf(beta, at_risk, stats.norm.sf(z)))
        best = min(best, n // big + s)
    return max(best, 1)


def structural_level_cap(max_frontier: int, heights: list[int]) -> int:
    """B_F = max_frontier · 2^{max h_s − 1}: Heavy nodes a level can hold under the frontier cap.

    Level j of a stage (0 at its roots, at most 2·max_frontier of them) holds
    2·max_frontier·2^j nodes; j ≤ h − 2 above the bottom, whose Heavy nodes
    the frontier cap cuts to max_frontier.
    """
    f = check_count("max_frontier", max_frontier)
    return f << (max(check_count("height", h) for h in heights) - 1)


@dataclass(frozen=True, kw_only=True)
class GrowthCaps:
    """The public caps on one run's structures (module docstring for the formulas)."""

    n_trees: int
    depth: int
    heights: tuple[int, ...]
    n_classes: int
    #: B: Heavy nodes kept per level per tree.
    level: int
    #: F = min(max_frontier, B): Heavy bottom nodes a stage grows from, per tree.
    frontier: int

    def __post_init__(self) -> None:
        check_count("level", self.level)
        check_count("frontier", self.frontier)
        if self.frontier > self.level:
            raise ValueError(f"frontier must lie in [1, level={self.level}]; got {self.frontier}")
        if sum(self.heights) != self.depth:
            raise ValueError(f"heights must sum to depth={self.depth}; got {self.heights}")

    @property
    def nodes_per_tree(self) -> int:
        """N = Σ_{l=0..d} min(2^l, 2B): splits and leaves of one released tree."""
        return sum(min(1 << min(level, 62), 2 * self.level) for level in range(self.depth + 1))

    @property
    def leaves_per_tree(self) -> int:
        """L = (N + 1) / 2: a full binary tree of at most N nodes."""
        return (self.nodes_per_tree + 1) // 2

    def stage_reply(self, stage: int) -> int:
        """Counts in stage ``stage``'s reply, all trees: k·roots·(2^{h_s} − 1)."""
        roots = 1 if stage == 0 else 2 * self.frontier
        return self.n_trees * roots * ((1 << self.heights[stage]) - 1)

    @property
    def leaf_reply(self) -> int:
        """Counts in the leaf round's reply: k·C·L."""
        return self.n_trees * self.n_classes * self.leaves_per_tree

    def reply_length(self, round_: int) -> int:
        """The cap on round ``round_``'s reply length (the stages, then the leaves)."""
        if round_ < len(self.heights):
            return self.stage_reply(round_)
        return self.leaf_reply


def growth_caps(
    *,
    n_records: int | None,
    n_trees: int,
    heights: list[int],
    n_classes: int,
    max_frontier: int,
    gate: int = 0,
    tau: float | None = None,
    sigma: float | None = None,
) -> GrowthCaps:
    """The run's caps: B = min(B_F, B(n)) per level, F = min(max_frontier, B).

    ``n_records=None`` (no declared record bound): B = B_F, the frontier's own.
    ``tau=None``: no privacy (CheckThreshold is ``count > 0``).
    """
    level = structural_level_cap(max_frontier, heights)
    if n_records is not None:
        level = min(
            level,
            heavy_level_cap(
                n_records=n_records,
                n_trees=n_trees,
                heights=heights,
                gate=gate,
                tau=tau,
                sigma=sigma,
            ),
        )
    return GrowthCaps(
        n_trees=n_trees,
        depth=sum(heights),
        heights=tuple(heights),
        n_classes=n_classes,
        level=level,
        frontier=min(max_frontier, level),
    )


def heavy_bits(
    stage: Stage,
    block: np.ndarray,
    check: Callable[[np.ndarray], np.ndarray],
    caps: GrowthCaps,
) -> list[np.ndarray]:
    """One tree's stage split bits: Algorithm 1's Heavy, at most B per level, F at the bottom.

    ``block`` holds the stage's node counts level by level and ``check`` is
    CheckThreshold. Nothing grows under a cut node; a level over its cap keeps
    the Heavy nodes with the smallest path keys (module docstring).
    """
    widths = [stage.n_roots << level for level in range(len(stage.key))]
    if stage.n_roots == 0:
        return [np.zeros(0, dtype=bool) for _ in widths]
    levels = np.split(block, np.cumsum(widths)[:-1])
    parents = [np.zeros(widths[0], dtype=np.int64)]
    parents += [np.arange(w, dtype=np.int64) // 2 for w in widths[1:]]
    heavy, _ = mark_heavy_hitters(levels, parents, check)
    for level, mask in enumerate(heavy):
        if level:
            mask &= heavy[level - 1][parents[level]]  # nothing grows under a cut node
        cap = caps.frontier if level + 1 == len(heavy) else caps.level
        on = np.flatnonzero(mask)
        if on.size > cap:
            # Post-processing of released bits: keep the Heavy nodes with the
            # smallest path keys (a public order); the others become leaves.
            keep = on[np.argsort(stage.key[level][on], kind="stable")[:cap]]
            mask[:] = False
            mask[keep] = True
    return heavy
