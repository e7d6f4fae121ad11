"""bdpe_α: boosted DP ensembles of greedy decision trees with the M_α loss.

Nock & Henecka, "Boosted and Differentially Private Ensembles of Decision
Trees" (the paper below; arXiv 2001.09384). The text fedpriv ships lost most
of its equations in extraction; each formula here is reconstructed from the
surrounding text and the cited sources and derived in its docstring:
Kearns & Mansour 1996 (KM: the Bayes risks 2min(u, 1−u) and 2√(u(1−u)) as
splitting criteria), Nock & Nielsen 2008/2009 (NN: canonical links and
balanced convex surrogates), Friedman & Schuster 2010 (FS: split scores by
the exponential mechanism, sensitivity of a weighted criterion).

Notation. Labels y ∈ {0, 1} (y± = 2y − 1 ∈ {−1, +1}); a node ν holds
non-normalised weights w¹(ν) = Σ_{i∈ν, y=1} w_i and w⁰(ν) = Σ_{i∈ν, y=0} w_i,
each w_i ∈ [0, 1]; m is the public bound on the number of records.

* **Bayes risks** (KM; the paper, §3): Matsushita L^Mat(u) = 2√(u(1 − u)),
  0/1 L^{0/1}(u) = 2 min(u, 1 − u) (both scaled so L(½) = 1, as KM do), and
  the M_α risk, their convex combination (the paper's eq. (10))
  ``L_α = α L^Mat + (1 − α) L^{0/1}``, α ∈ [0, 1].
* **Weighted node risk** (the paper's f_L, eq. (6), after FS): the
  perspective ``P_α(w¹, w⁰) = (w¹ + w⁰) L_α(w¹/(w¹ + w⁰))``
  ``= α·2√(w¹w⁰) + (1 − α)·2 min(w¹, w⁰)`` (0 on an empty node).
* **Split score**: the decrease of the weighted risk,
  ``s(g) = P_α(ν) − P_α(ν_left(g)) − P_α(ν_right(g))`` ≥ 0 (concavity).
* **Sensitivity** (reconstructs Theorem 3 for M_α; :func:`score_sensitivity`).
* **Canonical link** ψ_α = −L_α′, its inverse, the balanced convex surrogate
  F_α(z) = (−L_α)*(−z) and the boosting weights w = −F_α′(y±H) = ψ_α⁻¹(−y±H)
  (NN 2008, Thm. 2; the paper's eq. (14) is the same mirror update written
  recursively: ψ(w_{t+1}) = ψ(w_t) − β_t y± h_t).
* **Leveraging coefficient** β_t = a · w̄_t · η_t (the paper, §5, with
  a = α/M² at the centre of its interval, π = 0).
* **Objective calibration** (O.C., the paper's §6): :func:`calibrated_alpha`.

Pure functions over numpy arrays; the federated orchestration is
:mod:`fedpriv.strategies.bdpe` and :mod:`fedpriv.clients.bdpe`.
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.models.bdpe_calibration import (  # noqa: F401 - re-exported
    CALIBRATION_BINS,
    MIN_SLOPE,
    bin_centres,
    calibration_edges,
    max_platt_slope,
    platt_fit,
)

#: Leaf class rates are clipped to [LEAF_CLIP, 1 − LEAF_CLIP] before the link, so
#: every leaf value is bounded by M = ψ_α(1 − LEAF_CLIP) (the paper's M, §5).
LEAF_CLIP = 0.02


def _alpha(alpha: float) -> float:
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha!r}")
    return a


def bayes_risk(u, alpha: float) -> np.ndarray:
    """L_α(u) = α·2√(u(1 − u)) + (1 − α)·2 min(u, 1 − u) (the paper's eq. (10)).

    Concave, symmetric about ½, L_α(0) = L_α(1) = 0, L_α(½) = 1.
    """
    a = _alpha(alpha)
    u = np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0)
    return a * 2.0 * np.sqrt(u * (1.0 - u)) + (1.0 - a) * 2.0 * np.minimum(u, 1.0 - u)


def node_risk(w1, w0, alpha: float) -> np.ndarray:
    """Weighted node risk P_α(w¹, w⁰) = (w¹ + w⁰)·L_α(w¹/(w¹ + w⁰)).

    The perspective of L_α (the paper's f_L, eq. (6)): with u = w¹/(w¹ + w⁰),
    (w¹ + w⁰)·2√(u(1 − u)) = 2√(w¹w⁰) and (w¹ + w⁰)·2 min(u, 1 − u) =
    2 min(w¹, w⁰), so no division is needed and an empty node has risk 0.
    Negative sums (noise) are clipped to 0 first.
    """
    a = _alpha(alpha)
    p = np.maximum(np.asarray(w1, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(w0, dtype=np.float64), 0.0)
    return a * 2.0 * np.sqrt(p * n) + (1.0 - a) * 2.0 * np.minimum(p, n)


def split_scores(left: np.ndarray, total: np.ndarray, alpha: float) -> np.ndarray:
    """Score of every candidate split of every node: the decrease of weighted M_α risk.

    Parameters
    ----------
    left : ndarray, (N, G, 2)
        (w¹, w⁰) of the left child of each of the G candidates at each of N nodes.
    total : ndarray, (N, 2)
        (w¹, w⁰) of each node.

    Returns
    -------
    ndarray, (N, G)
        s(g) = P_α(ν) − P_α(left) − P_α(ν − left).
    """
    left = np.asarray(left, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    right = total[:, None, :] - left
    parent = node_risk(total[:, 0], total[:, 1], alpha)[:, None]
    return (
        parent
        - node_risk(left[..., 0], left[..., 1], alpha)
        - node_risk(right[..., 0], right[..., 1], alpha)
    )


def score_sensitivity(alpha: float, max_records: int) -> float:
    """Δ_α(m) = 2α√m + 2(1 − α): how far one record moves any split score.

    Reconstruction of the paper's Theorem 3 for the M_α risk (its Lemma 5
    interpolation), under add/remove-one with weights in [0, 1] and at most
    m records besides the one added. Derivation: a record of class 1 and
    weight t ≤ 1 lands in one child ν of a candidate split (and in the
    node), raising w¹(ν) by t. P_α is concave and positively homogeneous, so
    superadditive: P(x + e) ≥ P(x) + P(e) = P(x) since P(e) = 0 for a
    one-class e; every term of a score can only rise, by

    * Matsushita part: 2√((w¹ + t)w⁰) − 2√(w¹w⁰), decreasing in w¹ and
      increasing in w⁰ ≤ m, at most 2√(t·m) ≤ 2√m (w¹ = 0, w⁰ = m: the
      perspective ``Ľ(1, m)`` at which the paper says the bound is tight);
    * 0/1 part: 2 min(w¹ + t, w⁰) − 2 min(w¹, w⁰) ≤ 2t ≤ 2.

    Both maxima are attained at the same sample (w¹ = 0, w⁰ = m, t = 1), so
    Δ_α = 2α√m + 2(1 − α) exactly (m ≥ 1). A score s = P(ν) − P(left) −
    P(right) moves by a rise of P(ν) minus a rise of one child's P, each in
    [0, Δ_α], so |Δs| ≤ Δ_α. α = 1 gives 2√m (the cost the paper calls
    "considerable"); α = 0 gives 2, within 1 of FS's bound for the max
    operator. Checked by brute force in ``tests/models/test_bdpe.py``.
    """
    a = _alpha(alpha)
    if int(max_records) < 1:
        raise ValueError(f"max_records must lie in [1, inf); got {max_records!r}")
    return 2.0 * a * math.sqrt(int(max_records)) + 2.0 * (1.0 - a)


def matsushita_inverse_link(z) -> np.ndarray:
    """ψ_Mat⁻¹(z) = ½(1 + z/√(4 + z²)), the inverse of ψ_Mat(u) = (2u − 1)/√(u(1 − u)).

    Check: with u = ½(1 + z/√(4 + z²)), 2u − 1 = z/√(4 + z²) and u(1 − u) =
    1/(4 + z²), so (2u − 1)/√(u(1 − u)) = z.
    """
    z = np.asarray(z, dtype=np.float64)
    return 0.5 * (1.0 + z / np.sqrt(4.0 + z * z))


def link(u, alpha: float) -> np.ndarray:
    """Canonical link ψ_α(u) = −L_α′(u) = α(2u − 1)/√(u(1 − u)) + 2(1 − α)·sign(2u − 1).

    L^{0/1} is not differentiable at ½: its superdifferential there is
    [−2, 2], and ψ_α(½) = 0 (the midpoint). ``u`` must lie in (0, 1).
    """
    a = _alpha(alpha)
    u = np.asarray(u, dtype=np.float64)
    if np.any((u <= 0.0) | (u >= 1.0)):
        raise ValueError("the canonical link needs u in (0, 1)")
    return a * (2.0 * u - 1.0) / np.sqrt(u * (1.0 - u)) + 2.0 * (1.0 - a) * np.sign(2.0 * u - 1.0)


def inverse_link(z, alpha: float) -> np.ndarray:
    """ψ_α⁻¹(z): ½ on |z| ≤ 2(1 − α), else ψ_Mat⁻¹((|z| − 2(1 − α))·sign(z)/α).

    ψ_α is increasing with a jump of 4(1 − α) at ½, so its inverse is flat at
    ½ over the jump and, outside it, solves α·ψ_Mat(u) = z ∓ 2(1 − α). The
    0/1 loss alone (α = 0) has no inverse link: α must lie in (0, 1].
    """
    a = _alpha(alpha)
    if a == 0.0:
        raise ValueError("alpha must lie in (0, 1] for the inverse link (0/1 has none)")
    z = np.asarray(z, dtype=np.float64)
    soft = np.sign(z) * np.maximum(np.abs(z) - 2.0 * (1.0 - a), 0.0)
    return matsushita_inverse_link(soft / a)


def surrogate(z, alpha: float) -> np.ndarray:
    """Balanced convex surrogate F_α(z) = (−L_α)*(−z) = sup_u {L_α(u) − u z}.

    The supremum is reached at u* = ψ_α⁻¹(−z) (first-order condition
    ψ_α(u) = −z), so F_α(z) = L_α(u*) − u* z. For α = 1 this is
    ½(√(4 + z²) − z), Matsushita's surrogate (NN 2008) scaled so F(0) = 1.
    """
    z = np.asarray(z, dtype=np.float64)
    u = inverse_link(-z, alpha)
    return bayes_risk(u, alpha) - u * z


def example_weights(margins, y, alpha: float) -> np.ndarray:
    """w_i = −F_α′(y±_i H(x_i)) = ψ_α⁻¹(−y±_i H(x_i)), clipped to [0, 1].

    NN 2008, Thm. 2: by the envelope theorem F_α′(z) = −ψ_α⁻¹(−z). H = 0 gives
    w = ½ (the paper's w₁ = ½·1); a well-classified record gets a small
    weight. The clip is the bound the split scores' sensitivity assumes,
    applied where the weight is computed.
    """
    sign = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    w = inverse_link(-sign * np.asarray(margins, dtype=np.float64), alpha)
    return np.clip(w, 0.0, 1.0)


def leaf_rates(w1, w0, prior: float = 0.0) -> np.ndarray:
    """Released leaf sums → class-1 rates in [LEAF_CLIP, 1 − LEAF_CLIP].

    Noisy sums are clipped at 0 and shrunk by ``prior`` pseudo-weight per
    class (the Laplace scale, public), so a leaf that noise empties predicts
    ½ rather than 0/0. Post-processing of released values.
    """
    p = np.maximum(np.asarray(w1, dtype=np.float64), 0.0) + prior
    n = np.maximum(np.asarray(w0, dtype=np.float64), 0.0) + prior
    tot = p + n
    u = np.where(tot > 0, p / np.where(tot > 0, tot, 1.0), 0.5)
    return np.clip(u, LEAF_CLIP, 1.0 - LEAF_CLIP)


def leaf_bound(alpha: float) -> float:
    """M = max |leaf value| = ψ_α(1 − LEAF_CLIP)."""
    return float(link(1.0 - LEAF_CLIP, alpha))


def leveraging(w1, w0, values, alpha: float, max_records: int) -> float:
    """β_t = a · w̄_t · η_t, the leveraging coefficient of tree t (the paper, §5).

    * a = α/M² (the centre of the paper's interval (α/M²)[1 − π, 1 + π]);
    * w̄_t = W_t/m, the normalised total weight (W_t = Σ_leaves (w¹ + w⁰));
    * η_t = Σ_λ (w¹_λ − w⁰_λ) h_t(λ) / W_t, the weighted edge of h_t, in [−M, M].

    From the released leaf sums (clipped at 0): post-processing, as the
    paper's "faster but more conservative" protection of β_t.
    """
    p = np.maximum(np.asarray(w1, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(w0, dtype=np.float64), 0.0)
    total = float(p.sum() + n.sum())
    if total <= 0.0:
        return 0.0
    M = leaf_bound(alpha)
    edge = float(np.sum((p - n) * np.asarray(values, dtype=np.float64))) / total
    return (alpha / M**2) * (total / max_records) * edge


def calibrated_alpha(
    *,
    depth: int,
    total_weight: float,
    epsilon_level: float | None,
    n_candidates: int,
    max_records: int,
    edge: float,
    k_monotonic: float,
    alpha_root: float,
    monotone: bool,
) -> np.ndarray:
    """Objective calibration: the split criterion's α at each depth 0..depth−1 of a tree.

    Reconstruction of the paper's O.C. (§6): spend the Matsushita part (fast
    boosting, sensitivity 2√m) only where the exponential mechanism can still
    tell a boosting-amenable split from a lazy one, and fall back towards 0/1
    (sensitivity 2) deeper down. At depth k the expected node weight is
    Ŵ_k = W/2^k (W: the public estimate of the tree's total weight). A split
    of edge γ (the WLA) decreases the node's risk by about γŴ_k; the
    exponential mechanism's scores carry log-odds ε_level·s/(cΔ_α) (c = 1
    for monotone scores, 2 otherwise), and beating |G| lazy candidates needs
    log-odds ≥ log|G|. So α*_k is the largest α ∈ [0, 1] with

        c · Δ_α(m) · log|G| ≤ ε_level · γ · Ŵ_k,   Δ_α(m) = 2α√m + 2(1 − α).

    The sequence is then made K-monotonic within the tree (the paper's
    definition, §4): α_k ≤ α_{k−1} · exp(K w̃_k (1 − α_{k−1})), w̃_k = 2^{−k}
    the normalised weight of a depth-k node, and every α_k ≤ ``alpha_root``. Every input
    is public (configuration, budget, public m, released weight estimate).
    ``epsilon_level=None`` (no privacy): α = ``alpha_root`` everywhere.
    """
    if epsilon_level is None:
        return np.full(depth, float(alpha_root))
    c = 1.0 if monotone else 2.0
    log_g = math.log(max(int(n_candidates), 2))
    root_m = math.sqrt(max(int(max_records), 1))
    out = np.empty(depth)
    prev = float(alpha_root)
    for k in range(depth):
        budget = epsilon_level * edge * (total_weight / 2.0**k) / (c * log_g)
        # 2α√m + 2(1 − α) ≤ budget  ⇔  α ≤ (budget − 2)/(2√m − 2)
        star = 1.0 if root_m <= 1.0 else (budget - 2.0) / (2.0 * root_m - 2.0)
        # exp's argument capped where the cap already passes any α ≤ 1 (K → inf: no
        # monotonicity constraint), instead of overflowing for a large K.
        grow = min(k_monotonic * 2.0**-k * (1.0 - prev), 700.0)
        cap = prev if k == 0 else prev * math.exp(grow)
        prev = float(np.clip(star, 0.0, min(cap, alpha_root)))
        out[k] = prev
    return out


def candidate_thresholds(numeric: np.ndarray, levels: int) -> list[np.ndarray]:
    """The public split candidates of every encoded feature (the paper, §5).

    A numeric feature (public box [0, 1]) gets ``levels`` = v_q equally spaced
    thresholds strictly inside it, j/(v_q + 1), j = 1..v_q; a binary (one-hot
    level, 0/1 column) feature the one threshold ½. Nothing depends on data.
    """
    inner = np.arange(1, levels + 1, dtype=np.float64) / (levels + 1)
    half = np.array([0.5])
    return [inner.copy() if bool(n) else half.copy() for n in np.asarray(numeric, dtype=bool)]


def feature_bins(XT: np.ndarray, thresholds: list[np.ndarray]) -> np.ndarray:
    """b_ij = #{q : t_jq < x_ij}: record i goes left of threshold q of feature j iff b_ij < q + 1.

    (n, d) int64; ``x ≤ t`` goes left, as the router (:func:`fedpriv.models.trees.route`).
    """
    d, n = XT.shape
    out = np.empty((n, d), dtype=np.int64)
    for j, t in enumerate(thresholds):
        out[:, j] = np.searchsorted(t, XT[j], side="left")
    return out


def level_cells(thresholds: list[np.ndarray], node: np.ndarray, y: np.ndarray, w: np.ndarray):
    """What :func:`level_sums` and its batched twin share: the weights clipped to
    [0, 1] (0 off the classes), the class codes, V = the most bins of a feature, and
    each record's (node, class) slot offset ``(node·2 + 1 − class)·V`` (class 1 first)."""
    w = np.clip(np.asarray(w, dtype=np.float64), 0.0, 1.0)
    keep = (y == 0) | (y == 1)
    w = np.where(keep, w, 0.0)
    cls = np.where(keep, y, 0)
    V = max(len(t) for t in thresholds) + 1 if thresholds else 1
    return w, cls, V, (node * 2 + (1 - cls)) * V


def level_sums(
    bins: np.ndarray,
    thresholds: list[np.ndarray],
    node: np.ndarray,
    n_nodes: int,
    y: np.ndarray,
    w: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """One client's (w¹, w⁰) sums for every node of a level and every candidate's left side.

    Parameters
    ----------
    bins : (n, d) int64, from :func:`feature_bins`.
    node : (n,) int64 in [0, n_nodes), each record's node at this level.
    y : (n,) int64 class codes (0, 1; −1: not a class, counted nowhere).
    w : (n,) weights, clipped to [0, 1] here whatever the caller did.

    Returns
    -------
    left : (n_nodes, G, 2), G = Σ_j len(thresholds[j]) in feature order.
    total : (n_nodes, 2).

    One histogram over (feature, node, class, bin) by ``np.bincount`` (a fixed
    summation order: the same floats in every runtime), then a cumulative sum
    over bins: the left side of threshold q is the records of bins ≤ q.
    """
    w, cls, V, cell = level_cells(thresholds, node, y, w)
    d = bins.shape[1]
    idx = (np.arange(d, dtype=np.int64)[None, :] * (n_nodes * 2 * V)) + cell[:, None] + bins
    hist = np.bincount(idx.ravel(), weights=np.repeat(w, d), minlength=d * n_nodes * 2 * V)
    hist = hist.astype(np.float64, copy=False)  # np.bincount of no rows is int64
    hist = hist.reshape(d, n_nodes, 2, V)
    cum = np.cumsum(hist, axis=3)
    total = np.bincount(node * 2 + (1 - cls), weights=w, minlength=n_nodes * 2).astype(np.float64)
    parts = [cum[j, :, :, : len(t)].transpose(0, 2, 1) for j, t in enumerate(thresholds)]
    left = np.concatenate(parts, axis=1) if parts else np.zeros((n_nodes, 0, 2))
    return left, total.reshape(n_nodes, 2)
