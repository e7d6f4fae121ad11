r"""Accounted hyper-parameter tuning: the best of a random number of DP runs.

Papernot & Steinke, "Hyperparameter tuning with Rényi differential privacy",
ICLR 2022 (arXiv:2110.03620), Algorithm 1: draw K at random, run K *base runs*
(each draws a configuration uniformly from a public grid, trains with DP and
scores itself with DP), and release only the best run's (model, score). If the
base run Q is (λ, ε(λ))-RDP at every order, the whole procedure A is RDP with
the curves below, *whatever the grid*: the selection is paid for by a
logarithmic overhead instead of K-fold composition. This module holds the
pure maths on RDP curves over a fixed array of orders (dp-accounting's
default orders, :data:`ORDERS`); :mod:`fedpriv.privacy.accounting` applies it
to a :class:`~fedpriv.privacy.events.TunedSelectionDpEvent`.

**Truncated negative binomial** TNB(η, γ), η ∈ (−1, ∞), γ ∈ (0, 1)
(Papernot & Steinke 2022, Def. 1)::

    P[K = k] = (1 − γ)^k / (γ^(−η) − 1) · Π_{ℓ=0}^{k−1} (ℓ + η)/(ℓ + 1),   k ≥ 1, η ≠ 0,
    P[K = k] = (1 − γ)^k / (k · log(1/γ)),                                k ≥ 1, η = 0,

so η = 0 is the logarithmic distribution and η = 1 the geometric one,
P[K = k] = γ(1 − γ)^(k−1). Its mean is::

    E[K] = η(1 − γ) / (γ(1 − γ^η))     (η ≠ 0),
    E[K] = (1/γ − 1) / log(1/γ)        (η = 0),

→ 1 as γ → 1 (one run) and 1/γ at η = 1.

*Theorem 2* (TNB): if Q is (λ, ε(λ))-RDP and (λ̂, ε(λ̂))-RDP with λ > 1 and
λ̂ ≥ 1, then A is (λ, ε′)-RDP with::

    ε′(λ) = ε(λ) + (1 + η)(1 − 1/λ̂) ε(λ̂) + (1 + η) log(1/γ)/λ̂ + log(E[K])/(λ − 1).

:func:`tnb_rdp` takes at every λ the minimum over λ̂ ∈ {1} ∪ :data:`ORDERS`
(λ̂ = 1 contributes (1 + η)·log(1/γ); it is used only when ε is finite at the
smallest order, so that ε(1) ≤ ε(λ_min) is finite and its factor 0 is exact).

**Poisson**(μ) (K = 0 is possible and then A outputs ⊥). *Theorem 6*: if Q is
(λ, ε(λ))-RDP and (ε̂, δ̂)-DP with e^ε̂ ≤ 1 + 1/(λ − 1), then A is
(λ, ε′)-RDP with::

    ε′(λ) = ε(λ) + μ δ̂ + log(μ)/(λ − 1).

:func:`poisson_rdp` takes ε̂ = log(1 + 1/(λ − 1)) (the largest allowed, hence
the smallest δ̂) at every λ, with δ̂ = δ_Q(ε̂) from the base run's own
(ε, δ) profile: a caller-given sound one (e.g. a PLD), else the RDP
conversion of the base curve (:func:`delta_from_rdp`).

The (ε, δ) figure of a tuned curve is dp-accounting's RDP-to-DP conversion
(:func:`epsilon_from_rdp`; Canonne, Kamath & Steinke 2020, Prop. 12, as
implemented by ``dp_accounting.rdp.compute_epsilon``).

**K is private randomness**: the theorems hold only if K and each run's
configuration are hidden coins independent of the data and of any public
seed. :meth:`RunsDistribution.sample` draws K from a private generator
(:func:`~fedpriv.privacy.randomness.check_private`); a seeded K would let an
observer know how many runs were taken, and the analysis would not apply.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from fedpriv.privacy.randomness import check_private

#: The orders λ at which every curve here is evaluated (dp-accounting's defaults).
ORDERS = np.asarray(rdp_lib.DEFAULT_RDP_ORDERS, dtype=np.float64)
#: Distributions of the number of base runs K.
DISTRIBUTIONS = ("tnb", "poisson")
#: The sampler's cap on K (reached only when the uniform lies beyond the
#: float-summed mass, i.e. in a tail of probability ~1e-16).
MAX_RUNS = 100_000


def tnb_expected_runs(eta: float, gamma: float) -> float:
    """E[K] of TNB(η, γ) (module docstring)."""
    eta, gamma = _check_tnb(eta, gamma)
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    # η(1 − γ) / (γ(1 − γ^η)), with 1 − γ^η = −expm1(η log γ) for accuracy near η = 0.
    return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))


def tnb_pmf(k: np.ndarray, eta: float, gamma: float) -> np.ndarray:
    """P[K = k] of TNB(η, γ) for integer ``k`` (0 for k < 1), in log space."""
    eta, gamma = _check_tnb(eta, gamma)
    k = np.asarray(k, dtype=np.float64)
    kk = np.maximum(k, 1.0)
    log1mg = math.log1p(-gamma)
    if eta == 0.0:
        logp = kk * log1mg - np.log(kk) - math.log(math.log(1.0 / gamma))
    else:
        from scipy.special import gammaln

        # Π_{ℓ<k} (ℓ + η)/(ℓ + 1) = Γ(k + η) / (Γ(η) Γ(k + 1)), |·| for η < 0 (one negative factor).
        log_prod = gammaln(kk + eta) - gammaln(eta) - gammaln(kk + 1.0)
        # γ^(−η) − 1 = expm1(η log(1/γ)): same sign as η, as is the product.
        logp = kk * log1mg + log_prod - math.log(abs(math.expm1(eta * math.log(1.0 / gamma))))
    return np.where(k >= 1.0, np.exp(logp), 0.0)


def poisson_pmf(k: np.ndarray, mean: float) -> np.ndarray:
    """P[K = k] of Poisson(μ)."""
    from scipy.stats import poisson

    return poisson.pmf(np.asarray(k), _check_mean(mean))


def tnb_gamma_for_mean(eta: float, mean: float) -> float:
    """The γ at which TNB(η, γ) has E[K] = ``mean`` (> 1); E[K] decreases in γ."""
    mean = _check_mean(mean)
    if mean <= 1.0:
        raise ValueError(f"mean of a TNB must lie in (1, inf); got {mean!r}")
    lo, hi = 1e-12, 1.0 - 1e-12  # E[K](lo) > mean > E[K](hi) ≈ 1
    for _ in range(200):
        mid = math.sqrt(lo * hi) if hi < 0.5 else 0.5 * (lo + hi)
        if tnb_expected_runs(eta, mid) > mean:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True, kw_only=True)
class RunsDistribution:
    """The law of the number of base runs K.

    Attributes
    ----------
    kind : {"tnb", "poisson"}
        Truncated negative binomial (Theorem 2) or Poisson (Theorem 6).
    eta : float
        TNB shape η in (−1, inf) (0: logarithmic, 1: geometric); unused for Poisson.
    gamma : float
        TNB parameter γ in (0, 1); unused for Poisson.
    mean : float
        Poisson mean μ in (0, inf); unused for TNB (see :attr:`expected_runs`).
    """

    kind: str
    eta: float = 1.0
    gamma: float = 0.0
    mean: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTIONS:
            raise ValueError(f"kind must be one of {list(DISTRIBUTIONS)}; got {self.kind!r}")
        if self.kind == "tnb":
            _check_tnb(self.eta, self.gamma)
        else:
            _check_mean(self.mean)

    @classmethod
    def tnb(cls, *, eta: float, gamma: float | None = None, mean: float | None = None):
        """TNB(η, γ), given γ or the mean E[K] (γ solved by :func:`tnb_gamma_for_mean`)."""
        if (gamma is None) == (mean is None):
            raise ValueError(f"give exactly one of gamma and mean; got {gamma=!r}, {mean=!r}")
        g = tnb_gamma_for_mean(eta, mean) if gamma is None else float(gamma)
        return cls(kind="tnb", eta=float(eta), gamma=g)

    @classmethod
    def poisson(cls, *, mean: float) -> RunsDistribution:
        return cls(kind="poisson", mean=float(mean))

    @property
    def expected_runs(self) -> float:
        """E[K]."""
        if self.kind == "poisson":
            return self.mean
        return tnb_expected_runs(self.eta, self.gamma)

    def pmf(self, k: np.ndarray) -> np.ndarray:
        """P[K = k]."""
        if self.kind == "poisson":
            return poisson_pmf(k, self.mean)
        return tnb_pmf(k, self.eta, self.gamma)

    def sample(self, rng: np.random.Generator) -> int:
        """One K from a *private* generator (inverse CDF of one uniform for TNB).

        Raises
        ------
        TypeError
            ``rng`` is not private (:func:`~fedpriv.privacy.randomness.check_private`).
        """
        rng = check_private("rng", rng)
        if self.kind == "poisson":
            return int(rng.poisson(self.mean))
        u = float(rng.random())
        total, k, block = 0.0, 0, 256
        while k < MAX_RUNS:
            ks = np.arange(k + 1, k + block + 1)
            cdf = total + np.cumsum(self.pmf(ks))
            hit = np.flatnonzero(cdf >= u)
            if hit.size:
                return int(ks[hit[0]])
            total, k, block = float(cdf[-1]), k + block, block * 2
        return MAX_RUNS  # u beyond the float-summed mass: the far tail

    def rdp(self, base: np.ndarray, *, base_delta: Callable[[float], float] | None = None):
        """The tuned procedure's RDP curve on :data:`ORDERS` (Theorem 2 or 6)."""
        if self.kind == "poisson":
            return poisson_rdp(ORDERS, base, self.mean, base_delta=base_delta)
        return tnb_rdp(ORDERS, base, self.eta, self.gamma)

    def describe(self) -> str:
        if self.kind == "poisson":
            return f"Poisson(mu={self.mean:g})"
        return f"TNB(eta={self.eta:g}, gamma={self.gamma:.6g}), E[K]={self.expected_runs:.3g}"


def tnb_rdp(orders: np.ndarray, base: np.ndarray, eta: float, gamma: float) -> np.ndarray:
    """Theorem 2 of Papernot & Steinke (2022) at every order (module docstring).

    Parameters
    ----------
    orders : array
        Orders λ > 1, increasing.
    base : array
        ε(λ) of one base run at ``orders`` (``inf`` where unknown).
    eta, gamma : float
        TNB(η, γ).
    """
    eta, gamma = _check_tnb(eta, gamma)
    orders, base = _check_curve(orders, base)
    log_inv_gamma = math.log(1.0 / gamma)
    # min over λ̂ of (1 − 1/λ̂) ε(λ̂) + log(1/γ)/λ̂; λ̂ = 1 when ε is finite near 1.
    with np.errstate(invalid="ignore"):
        terms = (1.0 - 1.0 / orders) * base + log_inv_gamma / orders
    terms = np.where(np.isnan(terms), np.inf, terms)
    best = float(np.min(terms))
    if math.isfinite(base[0]):
        best = min(best, log_inv_gamma)
    overhead = (1.0 + eta) * best
    return base + overhead + math.log(tnb_expected_runs(eta, gamma)) / (orders - 1.0)


def poisson_rdp(
    orders: np.ndarray,
    base: np.ndarray,
    mean: float,
    *,
    base_delta: Callable[[float], float] | None = None,
) -> np.ndarray:
    """Theorem 6 of Papernot & Steinke (2022) at every order (module docstring).

    ``base_delta(ε̂)``: a sound δ of one base run at ε̂; default
    :func:`delta_from_rdp` of ``base``.
    """
    mean = _check_mean(mean)
    orders, base = _check_curve(orders, base)
    if base_delta is None:

        def base_delta(eps_hat: float) -> float:
            return delta_from_rdp(orders, base, eps_hat)

    eps_hat = np.log1p(1.0 / (orders - 1.0))
    delta_hat = np.array([min(1.0, float(base_delta(float(e)))) for e in eps_hat])
    return base + mean * delta_hat + math.log(mean) / (orders - 1.0)


def epsilon_from_rdp(orders: np.ndarray, curve: np.ndarray, delta: float) -> float:
    """ε at ``delta`` of an RDP curve (dp-accounting's conversion; ``inf`` if none is finite)."""
    orders, curve = _check_curve(orders, curve)
    if not np.isfinite(curve).any():
        return math.inf
    return float(rdp_lib.compute_epsilon(orders, curve, delta)[0])


def delta_from_rdp(orders: np.ndarray, curve: np.ndarray, epsilon: float) -> float:
    """δ at ``epsilon`` of an RDP curve (dp-accounting's conversion; 1 if none is finite)."""
    orders, curve = _check_curve(orders, curve)
    if not np.isfinite(curve).any():
        return 1.0
    return float(rdp_lib.compute_delta(orders, curve, epsilon)[0])


# -- checks -----------------------------------------------------------------------------
def _check_tnb(eta: float, gamma: float) -> tuple[float, float]:
    eta, gamma = float(eta), float(gamma)
    if not (eta > -1.0 and math.isfinite(eta)):
        raise ValueError(f"eta must lie in (-1, inf); got {eta!r}")
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"gamma must lie in (0, 1); got {gamma!r}")
    return eta, gamma


def _check_mean(mean: float) -> float:
    mean = float(mean)
    if not (mean > 0.0 and math.isfinite(mean)):
        raise ValueError(f"mean must lie in (0, inf); got {mean!r}")
    return mean


def _check_curve(orders: np.ndarray, curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    orders = np.asarray(orders, dtype=np.float64)
    curve = np.asarray(curve, dtype=np.float64)
    if orders.ndim != 1 or curve.shape != orders.shape:
        raise ValueError(
            f"orders and curve must be 1-D of one length; got {orders.shape}, {curve.shape}"
        )
    if not (orders > 1.0).all():
        raise ValueError(f"orders must lie in (1, inf); got min {float(orders.min())!r}")
    if (curve < 0.0).any():
        raise ValueError(f"an RDP curve is non-negative; got min {float(curve.min())!r}")
    return orders, curve
