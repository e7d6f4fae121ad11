"""Distributed noise: every client adds an integer Gaussian share inside secure aggregation.

In the central mode the server decodes the *exact* sum and adds N(0, σ²) itself, so
the guarantee assumes it is honest. In the distributed mode (``noise =
"distributed"``) each of a round's n asked clients adds, to its fixed-point vector
in the ring Z_{2^64} (units of γ = 2^-32, :mod:`fedpriv.federation.fixedpoint`), the
integer share

    e_c = rint(σ_c · N_c),   N_c ~ N(0, I_d),   σ_c = σ / √m,   m = n − f        (1)

drawn from the client's own ChaCha20 stream (:mod:`fedpriv.privacy.randomness`; a
CSPRNG under its secret key, never the public seed), where σ is the central std (in
ticks) the round's mechanism needs and f the run's tolerated dropouts. The server
only ever unmasks Σ_{c∈S} (x_c + e_c) over the survivors S; a round with |S| < m is
aborted before the unmask exchange, so the sum it could release always carries
|S|·σ_c² ≥ σ² of variance (the minimum-survivors bound). The ledger accounts the
survivors' actual noise, std √(|S|/m)·σ, never the planned σ.

Accounting (every approximation charged as δ). The released integer vector differs
in law from the ideal ``rint(x + N(0, |S|σ_c² I))``, a post-processing of the
continuous Gaussian mechanism whose PLD the ledger already composes, in three
bounded ways, per coordinate (total variation):

* each share rint(σ_c N) vs the discrete Gaussian N_Z(0, σ_c²): the midpoint rule
  on φ_σ leaves Σ_k |P(k) − φ_σ(k)| ≤ (∫|φ_σ''| + V(|φ_σ''|))/24 = (0.968/σ² +
  1.6/σ³)/24 (V, the total variation of |φ_σ''|, is 1.51/σ³), and Poisson summation
  gives Σ_k φ_σ(k) − 1 = 2Σ_{y≥1} e^{−2π²σ²y²} ≤ 3e^{−2π²σ²} for σ ≥ 1 (the
  normalising constant of Canonne, Kamath & Steinke 2020); half the sum bounds TV:
  :func:`tv_rounded`;
* the sum of s discrete Gaussians vs N_Z(0, sσ_c²): within max-divergence
  τ = 10 Σ_{k=1}^{s−1} e^{−2π²σ_c² k/(k+1)} both ways for σ_c ≥ ½ (Kairouz, Liu &
  Steinke 2021, Prop. 14 / eq. 17, per coordinate), hence TV ≤ 1 − e^{−τ} ≤ τ:
  :func:`tau_sum`. Sums of discrete Gaussians are close to,
  not exactly, a discrete Gaussian; Skellam shares would be closed under addition, but
  their RDP-only accounting would forgo the PLD the rest of the ledger uses;
* N_Z(0, sσ_c²) vs rint(N(0, sσ_c²)): :func:`tv_rounded` again.

The convolution of s shares is within s·TV of the convolution of their discrete
Gaussians, and a d-vector within d times a coordinate's TV. Modular clipping: the
sum wraps only if the noise exceeds the ring's headroom h over the largest exact sum;
since Σ e_c = Σ σ_c N_c + E with |E| ≤ s/2, P(wrap) ≤ 2d·exp(−(h − s/2)²/(2sσ_c²))
(:func:`wrap_probability`); the engine refuses a round where it exceeds
:data:`WRAP_BOUND` and charges that bound. Discretisation of the values (the codec's
rounding) is the sensitivity margin γ√d the central mode adds too.

If a run's transcript is within total variation H of an (ε, δ₀)-DP one on every
input, it is (ε, δ₀ + (1 + e^ε)·H)-DP (a coupling argument: P(S) ≤ P'(S) + H on
both neighbours). The ledger charges (1 + e^ε)·H against δ up front
(:meth:`~fedpriv.privacy.ledger.PrivacyLedger.reserve_slack`) and calibrates the
Gaussian to what is left; with shares of σ_c ≥ 2^28 ticks (1/16 in value units) a
round of 10^5 coordinates among 10 survivors has H below 1e-12.

Trust. Against the server, the noise it sees is the survivors' shares, so no
amplification by *its* participation coins is claimed (the stage plans with ρ = 1);
the clients' Poisson coins stay theirs. The server learns nothing from any one
masked vector (secure aggregation) and only the noisy sum from the unmask.

Reproduction keys. All of that holds only while each client's key is its own. A
reproduction key (``$FEDPRIV_SECRET_KEY``) derives every node's key from the
server's (:func:`fedpriv.federation.planning.client_key`): whoever holds it can
recompute every share and subtract it from the unmasked sum, which is then exact.
So a run whose node keys derive from a key the server holds is reported
``certified: false`` with :data:`DERIVED_KEYS_CAVEAT` (in process always: the
runtime derives the client keys itself; over Flower when any node reports
:data:`KEY_ORIGIN` ``injected`` in its key-exchange reply, or no origin at all), and
a node refuses such a run before reading a row unless its own node-config sets
:data:`ALLOW_REPRODUCTION_KEY` (:func:`check_key_origin`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.privacy.randomness import GRID, PrivateStreams, SecretKey, check_private
from fedpriv.validation import check_count, check_positive

#: Most probability a round's noisy sum may have of wrapping the ring; charged per round.
WRAP_BOUND = 1e-30
#: Private stream of a client's noise shares (one substream per round).
SHARE_STREAM = "noise-share"
_TWO_PI2 = 2.0 * math.pi**2

#: The key-exchange reply's public flag: where the node's secret key came from.
KEY_ORIGIN = "key-origin"
#: :data:`KEY_ORIGIN` of a key drawn from the node's own OS entropy.
FRESH = "fresh"
#: :data:`KEY_ORIGIN` of a key derived from an injected reproduction key.
INJECTED = "injected"
#: Node-config key (bool, default false): the node takes part in a distributed-noise run
#: with an injected reproduction key, knowing the server can then recompute its shares.
ALLOW_REPRODUCTION_KEY = "allow-reproduction-key"
#: The same for a simulation's virtual nodes, which all get Flower's own node-config.
ALLOW_REPRODUCTION_KEY_ENV = "FEDPRIV_ALLOW_REPRODUCTION_KEY"
#: Why such a run is not certified (the privacy report's caveat).
DERIVED_KEYS_CAVEAT = (
    "distributed noise with node keys derived from the server's reproduction key: "
    "the server can recompute every noise share"
)


@dataclass(frozen=True, kw_only=True)
class DistributedNoise:
    """The run's distributed-noise setting (public).

    Parameters
    ----------
    dropouts : int
        f ≥ 0, the clients of a round that may drop out and still leave the target
        noise in the sum: shares are calibrated for m = n − f survivors, and a round
        with fewer survivors is aborted before anything is unmasked.
    max_parties : int
        K, the most clients a round can ask (the run's client count).
    """

    dropouts: int
    max_parties: int

    def __post_init__(self) -> None:
        check_count("dropouts", self.dropouts, minimum=0)
        check_count("max_parties", self.max_parties, minimum=2)
        if self.max_parties - self.dropouts < 2:
            raise ValueError(
                f"tolerated-dropouts must lie in [0, {self.max_parties - 2}] for "
                f"{self.max_parties} clients (at least two must survive); got {self.dropouts}"
            )

    def min_survivors(self, asked: int) -> int:
        """m = n − f for a round that asked ``asked`` clients (may be < 2: then abort)."""
        return asked - self.dropouts


@dataclass(frozen=True, kw_only=True)
class ShareSpec:
    """One round's shares: each asked client adds rint(share_std · N(0, I)) ticks."""

    share_std: float  # σ_c, in ticks (units of γ)
    min_survivors: int  # m

    def total_std(self, survivors: int) -> float:
        """The sum's noise std (ticks) with ``survivors`` shares in it: √s·σ_c."""
        return math.sqrt(survivors) * self.share_std


def share_spec(std: float, *, asked: int, setting: DistributedNoise) -> ShareSpec | None:
    """Eq. (1) for a round of ``asked`` clients whose release needs noise std ``std``
    (value units); ``None`` if fewer than two would be left after f dropouts."""
    m = setting.min_survivors(asked)
    if m < 2:
        return None
    return ShareSpec(share_std=check_positive("std", std) / GRID / math.sqrt(m), min_survivors=m)


def round_shares(
    std: float, *, asked: int, setting: DistributedNoise, dims: int, headroom: float
) -> ShareSpec | None:
    """:func:`share_spec`, refused (ValueError) if the noisy sum of ``dims`` coordinates
    could wrap the ring's ``headroom`` ticks with probability above :data:`WRAP_BOUND`."""
    spec = share_spec(std, asked=asked, setting=setting)
    if spec is None:
        return None
    wrap = wrap_probability(dims=dims, survivors=asked, share_std=spec.share_std, headroom=headroom)
    if wrap > WRAP_BOUND:
        raise ValueError(
            f"the noisy sum could wrap the 64-bit ring (probability {wrap:.3g} > "
            f"{WRAP_BOUND:g}); lower max-records or the noise"
        )
    return spec


def share_streams(key: SecretKey) -> PrivateStreams:
    """A client's share streams: substream r draws its round-r share (its own key)."""
    return key.streams(SHARE_STREAM)


def draw_share(streams: PrivateStreams, round_id: int, size: int, share_std: float) -> np.ndarray:
    """A client's round-``round_id`` share, eq. (1): int64 ticks from its own private stream."""
    gen = check_private("share stream", streams.at(round_id))
    return np.rint(gen.standard_normal(size) * share_std).astype(np.int64)


def _truthy(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ValueError(f"{name} must be true or false; got {value!r}")


def allows_reproduction_key(node_config: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether the node accepts an injected key in a distributed-noise run: its node-config's
    :data:`ALLOW_REPRODUCTION_KEY`, else (virtual nodes) :data:`ALLOW_REPRODUCTION_KEY_ENV`;
    default false."""
    if ALLOW_REPRODUCTION_KEY in node_config:
        return _truthy(node_config[ALLOW_REPRODUCTION_KEY], ALLOW_REPRODUCTION_KEY)
    return _truthy(environ.get(ALLOW_REPRODUCTION_KEY_ENV, ""), ALLOW_REPRODUCTION_KEY_ENV)


def check_key_origin(origin: str, *, distributed: bool, allowed: bool) -> None:
    """Refuse (``ValueError``) a distributed-noise run on an injected key unless ``allowed``.

    Called by a node before it reads a row: the server could recompute its shares."""
    if origin not in (FRESH, INJECTED):
        raise ValueError(f"{KEY_ORIGIN} must be {FRESH!r} or {INJECTED!r}; got {origin!r}")
    if distributed and origin == INJECTED and not allowed:
        raise ValueError(
            f"a distributed-noise run with this node's key derived from an injected "
            f"reproduction key: the server could recompute every noise share; refused "
            f"(node-config {ALLOW_REPRODUCTION_KEY} = true to allow it; got false)"
        )


def tv_rounded(sigma: float) -> float:
    """TV between rint(N(0, σ²)) and N_Z(0, σ²), σ in ticks (module docstring)."""
    s = check_positive("sigma", sigma)
    return 0.5 * ((0.968 / s**2 + 1.6 / s**3) / 24.0 + 3.0 * math.exp(-_TWO_PI2 * s * s))


def tau_sum(parties: int, sigma: float) -> float:
    """Kairouz, Liu & Steinke (2021), Prop. 14: τ = 10 Σ_{k=1}^{n−1} e^{−2π²σ²k/(k+1)},
    the max-divergence between a sum of n N_Z(0, σ²) and N_Z(0, nσ²) (both ways)."""
    n = check_count("parties", parties)
    s = check_positive("sigma", sigma)
    # Each term is at most e^{−π²σ²} (k/(k+1) ≥ ½); below 1e-300 report 1e-300, an upper bound.
    worst = -(math.pi**2) * s * s
    if worst < -690.0:
        return 0.0 if n == 1 else 10.0 * (n - 1) * 1e-300
    return 10.0 * sum(math.exp(-_TWO_PI2 * s * s * k / (k + 1)) for k in range(1, n))


def round_tv(*, dims: int, survivors: int, share_std: float) -> float:
    """H of one round: d·(s·tv(σ_c) + τ(s, σ_c) + tv(√s·σ_c)) + :data:`WRAP_BOUND`."""
    d = check_count("dims", dims)
    s = check_count("survivors", survivors)
    per = s * tv_rounded(share_std) + tau_sum(s, share_std) + tv_rounded(math.sqrt(s) * share_std)
    return d * per + WRAP_BOUND


def wrap_probability(*, dims: int, survivors: int, share_std: float, headroom: float) -> float:
    """P(the noise in a sum of ``survivors`` shares leaves ± ``headroom`` ticks anywhere)."""
    room = headroom - survivors / 2.0
    if room <= 0:
        return 1.0
    log_p = math.log(2.0 * dims) - room * room / (2.0 * survivors * share_std**2)
    return math.exp(log_p) if log_p > -700.0 else 0.0


def plan_slack(*, rounds: int, dims: int, std: float, setting: DistributedNoise) -> float:
    """Σ H over a plan of ``rounds`` releases of ``dims`` coordinates at std ``std``
    (value units), at the worst case: K asked, so the smallest shares σ/√(K − f)."""
    sigma_c = std / GRID / math.sqrt(setting.max_parties - setting.dropouts)
    return rounds * round_tv(dims=dims, survivors=setting.max_parties, share_std=sigma_c)


class DistributedSum(np.ndarray):
    """A decoded sum that already carries its survivors' noise (never an exact sum).

    ``survivors`` s and ``min_survivors`` m travel with the array so the noise
    stage records the actual std √(s/m)·σ; a plain ndarray reaching a
    distributed stage is an exact sum and is refused.
    """

    survivors: int
    min_survivors: int

    @classmethod
    def wrap(cls, values: np.ndarray, *, survivors: int, min_survivors: int) -> DistributedSum:
        if survivors < min_survivors:
            raise ValueError(
                f"{survivors} survivors < the minimum {min_survivors}: the sum's noise falls "
                "short of the target and must not be released"
            )
        out = np.asarray(values, dtype=np.float64).view(cls)
        out.survivors, out.min_survivors = int(survivors), int(min_survivors)
        return out

    def __array_finalize__(self, obj) -> None:
        self.survivors = getattr(obj, "survivors", 0)
        self.min_survivors = getattr(obj, "min_survivors", 0)

    @property
    def noise_ratio(self) -> float:
        """√(s/m) ≥ 1: the actual noise std over the planned one."""
        return math.sqrt(self.survivors / self.min_survivors)
