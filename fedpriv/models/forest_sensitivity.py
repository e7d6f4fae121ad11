"""How far one record moves a forest's count replies: the one formula per reply kind.

Used by the server halves (to calibrate their noise) and the client halves (to tell
a node the sensitivity of each query it answers,
:meth:`~fedpriv.federation.protocol.ClientHandler.reply_sensitivity`), so the two
can never disagree. Every function returns (L1, L2) of the whole reply.
"""

from __future__ import annotations

import math

from fedpriv.validation import check_count


def leaf_count_sensitivity(trees: int, *, disjoint: bool) -> tuple[float, float]:
    """Class counts of every leaf of ``trees`` trees, one count per record per tree it
    feeds: every tree (L1 k, L2 √k), or one tree of its client's drawing (1, 1)."""
    k = check_count("trees", trees)
    if disjoint:
        return 1.0, 1.0
    return float(k), math.sqrt(k)


def stage_count_sensitivity(trees: int, height: int) -> tuple[float, float]:
    """Lumberjack's stage counts: one count per level of a ``height``-level stage per
    tree (a record walks one path of each tree): L1 k·h, L2 √(k·h)."""
    m = check_count("trees", trees) * check_count("height", height)
    return float(m), math.sqrt(m)


def level_sum_sensitivity(candidates: int) -> tuple[float, float]:
    """bdpe's level sums (:func:`fedpriv.models.bdpe.level_sums`): a record's weight
    w ∈ [0, 1] in its node's (w¹, w⁰) and in the left side of at most every one of the
    ``candidates`` splits, one class each: L1 1 + G, L2 √(1 + G)."""
    g = check_count("candidates", candidates)
    return float(1 + g), math.sqrt(1 + g)


def record_count_sensitivity() -> tuple[float, float]:
    """Counts in which each record counts once, in one cell (bdpe's calibration
    counts): L1 = L2 = 1."""
    return 1.0, 1.0


def leaf_mass_sensitivity() -> tuple[float, float]:
    """bdpe's leaf sums (w¹, w⁰) per leaf, from a last level's reply: one record's
    weight w ∈ [0, 1] lies in one leaf's one class sum."""
    return 1.0, 1.0


#: The part of a last level's reply that bdpe's Laplace leaves release.
LEAF_MASSES = "leaf_masses"
