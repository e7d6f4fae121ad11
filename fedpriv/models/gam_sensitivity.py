"""How far one record moves each DP-EBM reply: the one formula the server and the node share.

Every reply is *normalised* where the client computes it, so that a node can
bound it from the query's public settings alone and see one noise level:

* a column round (``term``), a pair round (``pair``), the binary group
  (``group``: divided by √s, :func:`fedpriv.models.gam_group.group_sensitivity`)
  and the pair selection (``select``: divided by √P, P candidate pairs) all have
  the L2 sensitivity of one column's per-bin reply, :func:`column_sensitivity`,
  and are released with the plan's one multiplier z: one stage, ``term``;
* round 0 (``intercept``): each block (the intercept's sums and, with a sketch,
  the numeric columns' fine histograms) is divided by its own sensitivity, so the
  reply's is √B for B blocks; its B releases at z compose exactly to one Gaussian
  release of multiplier z/√B at sensitivity √B, as the node accounts it.

L1 is bounded by √d · L2 for a reply of d values (Cauchy–Schwarz): every DP-EBM
release is Gaussian, and the bound only grows with the reply, so a shorter reply
of a stage never exceeds its stage's.
"""

from __future__ import annotations

import math

from fedpriv.models.gam import INTERCEPT_SENSITIVITY, L2_SENSITIVITY
from fedpriv.models.gam_softmax import intercept_sensitivity, term_sensitivity

#: The stages of a run, and which query phases belong to each.
INTERCEPT_STAGE, TERM_STAGE = "intercept", "term"
STAGE_OF = {
    "intercept": INTERCEPT_STAGE,
    "term": TERM_STAGE,
    "group": TERM_STAGE,
    "pair": TERM_STAGE,
    "select": TERM_STAGE,
}


def column_sensitivity(n_classes: int) -> float:
    """L2 sensitivity of one column's (or pair's) per-bin ``[Σg | Σh]``: one logit
    (two classes, √(1 + 1/16)) or C (softmax)."""
    return L2_SENSITIVITY if n_classes == 2 else term_sensitivity(n_classes)


def head_sensitivity(n_classes: int) -> float:
    """L2 sensitivity of round 0's intercept sums (before normalising)."""
    return INTERCEPT_SENSITIVITY if n_classes == 2 else intercept_sensitivity(n_classes)


def intercept_blocks(grid: int) -> int:
    """Blocks of round 0's reply: the intercept's, and the fine histograms' if ``grid``."""
    return 2 if grid > 0 else 1


def reply_sensitivity(
    phase: str, *, n_classes: int, grid: int, reply_length: int
) -> tuple[str, float, float]:
    """(stage, L1, L2) of one normalised reply (module docstring)."""
    if phase not in STAGE_OF:
        raise ValueError(f"phase must be one of {sorted(STAGE_OF)}; got {phase!r}")
    if phase == "intercept":
        l2 = math.sqrt(intercept_blocks(grid))
    else:
        l2 = column_sensitivity(n_classes)
    return STAGE_OF[phase], math.sqrt(reply_length) * l2, l2
