"""What both sides of secure aggregation share: parameters, messages, errors, PRG.

The protocol is described in :mod:`fedpriv.federation.secagg`; this module holds
the pieces its client and its server (:mod:`fedpriv.federation.secagg_server`)
both need, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import hmac
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedpriv.federation import shamir
from fedpriv.federation.secagg_graph import GraphParameters, choose_parameters
from fedpriv.validation import check_count

_SELF_TAG = b"fpSM"  # nonce domain tag: self-mask keystreams and nothing else
_SHARE_TAG = b"fpSS"  # nonce domain tag: encrypted shares
_SEED_INFO = b"fedpriv-secagg-self-mask"  # HKDF info: the self-mask key of a seed
#: Node-config key of a node's own Shamir threshold floor (:class:`SecAggConfig`).
MIN_THRESHOLD_KEY = "secagg-min-threshold"
#: Node-config keys of a node's own floors on the sparse graph's targets γ and σ.
MIN_COLLUSION_KEY = "secagg-min-collusion"
MIN_SIGMA_KEY = "secagg-min-sigma"
#: A run's rounds per batch of self-mask seeds (``secagg-seed-batch``), and its upper end.
RUN_SEED_BATCH, MAX_SEED_BATCH = 16, 64


class SecAggAbort(RuntimeError):
    """A round cannot be unmasked; the caller must abort it and release nothing."""


class SecAggKeyError(ValueError):
    """A message names a public key other than the pinned one, or an unpinned client."""


@dataclass(frozen=True, kw_only=True)
class SecAggConfig:
    """Public parameters of double-masking secure aggregation (Bonawitz et al. 2017, §4).

    Parameters
    ----------
    threshold_fraction : float
        In [0, 1). A round with n participants shares each self-mask seed
        t-of-n with t = max(2, ⌊threshold_fraction·n⌋ + 1) ≤ n. The default 0.5
        gives a strict majority, t = ⌊n/2⌋ + 1: the server must hear the
        unmask answers of at least t survivors, and up to t − 1 colluding
        clients learn nothing beyond the survivors' sum. Larger values resist
        more colluders but abort more rounds under dropouts. The run's setting
        (``secagg-threshold``), which the coordinator controls.
    min_threshold_fraction : float
        In [0.5, 1]: the node's own floor (node-config ``secagg-min-threshold``),
        t ≥ min(n, max(2, ⌊min_threshold_fraction·n⌋ + 1)); the default 0.5 is a
        strict majority, the rule above at its default. A run setting never lowers
        it: :meth:`effective_threshold` is what the protocol uses. A majority at
        least is what makes the consistency round sound: two different survivor
        lists cannot each collect t signatures when every honest client signs one
        list per round and 2t > n. Under the sparse graph, n is the neighbourhood's
        size k (:meth:`neighbourhood_threshold`).
    collusion, dropout : float
        In [0, 1): γ and δ, the fractions of the run's K clients assumed colluding with
        the server and dropping out (run settings ``secagg-collusion``,
        ``secagg-dropout``), for which SecAgg+'s sparse graph is sized
        (:mod:`fedpriv.federation.secagg_graph`).
    sigma, eta : float
        In (0, 1000): the graph's security failure ≤ 2^-σ and correctness failure
        ≤ 2^-η (``secagg-sigma``, ``secagg-eta``).
    sparse : bool
        Whether the run may use the sparse graph (:meth:`graph_parameters`); a run
        with participation below 1 keeps the complete graph
        (:mod:`fedpriv.federation.secagg_topology`).
    min_collusion, min_sigma : float
        The node's own floors on γ and σ (node-config ``secagg-min-collusion``,
        ``secagg-min-sigma``; default 0): it refuses a run whose targets are weaker
        (:meth:`check_node_targets`).
    seed_batch : int
        In [1, :data:`MAX_SEED_BATCH`]: rounds whose self-mask seeds a client seals at
        once, one message per holder (:mod:`fedpriv.federation.secagg_seeds`); 1 (the
        default here): each round's in its round. Runs use ``secagg-seed-batch``
        (:data:`RUN_SEED_BATCH`) at participation 1, else one round a batch
        (:meth:`for_participation`).
    """

    threshold_fraction: float = 0.5
    min_threshold_fraction: float = 0.5
    collusion: float = 0.1
    dropout: float = 0.1
    sigma: float = 40.0
    eta: float = 20.0
    sparse: bool = True
    min_collusion: float = 0.0
    min_sigma: float = 0.0
    seed_batch: int = 1

    def __post_init__(self) -> None:
        b = self.seed_batch
        if type(b) is not int or not 1 <= b <= MAX_SEED_BATCH:
            why = f"must be an int in [1, {MAX_SEED_BATCH}]; got {b!r}"
            raise ValueError(f"seed_batch (secagg-seed-batch) {why}")
        f = self.threshold_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f < 1.0:
            raise ValueError(f"threshold_fraction must lie in [0, 1); got {f!r}")
        g = self.min_threshold_fraction
        if isinstance(g, bool) or not isinstance(g, int | float) or not 0.5 <= g <= 1.0:
            raise ValueError(
                f"min_threshold_fraction (secagg-min-threshold) must lie in [0.5, 1]; got {g!r}"
            )
        for name, v, hi in (
            ("collusion", self.collusion, 1.0),
            ("dropout", self.dropout, 1.0),
            ("min_collusion", self.min_collusion, 1.0),
        ):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v < hi:
                raise ValueError(f"{name} must lie in [0, 1); got {v!r}")
        for name, v, lo in (("sigma", self.sigma, 0.0), ("eta", self.eta, 0.0),
                            ("min_sigma", self.min_sigma, -1.0)):  # fmt: skip
            if isinstance(v, bool) or not isinstance(v, int | float) or not lo < v < 1000:
                raise ValueError(f"{name} must lie in ({max(lo, 0):g}, 1000); got {v!r}")

    @classmethod
    def of_run(cls, settings, **node: float) -> SecAggConfig:
        """A run's parameters from its :class:`~fedpriv.federation.settings.RunSettings`
        (the sparse graph only at participation 1), with a node's own floors ``node``."""
        return cls(
            threshold_fraction=settings.secagg_threshold, collusion=settings.secagg_collusion,
            dropout=settings.secagg_dropout, sigma=settings.secagg_sigma,
            eta=settings.secagg_eta, seed_batch=settings.secagg_seed_batch, **node,
        ).for_participation(settings.participation)  # fmt: skip

    def for_participation(self, rho: float) -> SecAggConfig:
        """This config for a run asking each client w.p. ρ: below 1 each round's
        participants differ, so no sparse graph and one round per batch of seeds."""
        if rho >= 1.0 or (not self.sparse and self.seed_batch == 1):
            return self
        return dataclasses.replace(self, sparse=False, seed_batch=1)

    def threshold(self, n: int) -> int:
        """The run's rule for ``n`` ≥ 2 participants: max(2, ⌊threshold_fraction·n⌋ + 1)."""
        n = check_count("n (participants)", n, minimum=2)
        return max(2, math.floor(self.threshold_fraction * n) + 1)

    def floor(self, n: int) -> int:
        """The node's floor: min(n, max(2, ⌊min_threshold_fraction·n⌋ + 1))."""
        n = check_count("n (participants)", n, minimum=2)
        return min(n, max(2, math.floor(self.min_threshold_fraction * n) + 1))

    def effective_threshold(self, n: int) -> int:
        """t = max(:meth:`floor`, :meth:`threshold`): the run may raise t, never lower it."""
        return max(self.floor(n), self.threshold(n))

    def graph_parameters(self, num_nodes: int) -> GraphParameters | None:
        """SecAgg+'s degree and threshold for the run's K = ``num_nodes`` clients, or
        ``None``: the complete graph (not :attr:`sparse`; ⌊γK⌋ or ⌊δK⌋ is 0, so the
        graph's analysis would cover no colluder or no dropout; or no sparser degree
        meets the targets)."""
        if not self.sparse:
            return None
        return _graph_parameters(num_nodes, self.collusion, self.dropout, self.sigma, self.eta)

    def neighbourhood_threshold(self, params: GraphParameters) -> int:
        """t within a neighbourhood of k: the graph's t, raised by the run's rule and the
        node's floor over k (:meth:`effective_threshold`), never lowered."""
        return max(params.threshold, self.effective_threshold(params.degree))

    def check_node_targets(self) -> None:
        """ValueError if the run's γ or σ is below the node's own floor."""
        for key, run, floor, what in (
            (MIN_COLLUSION_KEY, self.collusion, self.min_collusion, "secagg-collusion γ"),
            (MIN_SIGMA_KEY, self.sigma, self.min_sigma, "secagg-sigma σ"),
        ):
            if run < floor:
                raise ValueError(
                    f"the run's {what} = {run:g} is below this node's {key} = {floor:g}: refused"
                )


@lru_cache(maxsize=64)
def _graph_parameters(
    n: int, gamma: float, delta: float, sigma: float, eta: float
) -> GraphParameters | None:
    if n < 3:
        return None
    try:
        p = choose_parameters(
            n, corrupt_fraction=gamma, dropout_fraction=delta, sigma=sigma, eta=eta
        )
    except ValueError:  # not even the complete graph meets the targets: Bonawitz's protocol
        return None
    if p.corrupt < 1 or p.dropouts < 1 or p.degree >= n - 1:
        return None
    return p


def node_config_floor(node_config: Mapping[str, object]) -> float:
    """The node-config key ``secagg-min-threshold`` as a fraction in [0.5, 1] (default 0.5)."""
    return _node_number(node_config, MIN_THRESHOLD_KEY, 0.5, 0.5, 1.0, "[0.5, 1]")


def node_config_targets(node_config: Mapping[str, object]) -> dict[str, float]:
    """The node's floors on the graph's targets: ``secagg-min-collusion`` in [0, 1) and
    ``secagg-min-sigma`` in [0, 1000) (default 0 each), as :class:`SecAggConfig` fields."""
    return {
        "min_collusion": _node_number(node_config, MIN_COLLUSION_KEY, 0.0, 0.0, 1.0, "[0, 1)"),
        "min_sigma": _node_number(node_config, MIN_SIGMA_KEY, 0.0, 0.0, 1000.0, "[0, 1000)"),
    }


def _node_number(config: Mapping[str, object], key: str, default, lo, hi, shown) -> float:
    raw = config.get(key, default)
    try:
        g = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number in {shown}; got {raw!r}") from None
    if not (lo <= g <= hi if shown.endswith("]") else lo <= g < hi):
        raise ValueError(f"{key} must lie in {shown}; got {raw!r}")
    return g


@dataclass(frozen=True, kw_only=True)
class MaskedInput:
    """A client's step-1 upload: y_u and its sealed shares for each other participant, for
    round ``round_id`` (checked against the round before it enters a sum)."""

    vector: np.ndarray  # uint64, y_u
    shares: Mapping[int, bytes]  # recipient v -> AEAD ciphertext of v's share of b_u^r
    round_id: int

    @property
    def nbytes(self) -> int:
        return int(self.vector.nbytes) + sum(len(c) for c in self.shares.values())  # all sent


@dataclass(frozen=True, kw_only=True)
class UnmaskAnswer:
    """A survivor's step-2 upload: shares of survivors' seeds, and the sum of its pair masks
    with the dropped clients it masked with (``lost``, sorted).

    One ring vector whatever the number of dropped neighbours: the server needs only the
    sum over survivors of the pair masks left in Σ y, and a sum reveals no more than its
    terms. ``mask`` is ``None`` exactly when ``lost`` is empty.
    """

    shares: Mapping[int, bytes]  # survivor w -> this client's share of b_w^r (40 bytes)
    lost: tuple[int, ...] = ()  # the dropped clients whose pair masks ``mask`` sums
    mask: np.ndarray | None = None  # Σ_{v ∈ lost} signed round-r pair mask with v (uint64)

    @property
    def nbytes(self) -> int:
        """Bytes uploaded: every share, the mask sum and 8 per id of ``lost``."""
        vector = 0 if self.mask is None else int(np.asarray(self.mask).nbytes)
        size = len(getattr(self.shares, "blob", b"")) or sum(map(len, self.shares.values()))
        return size + vector + 8 * len(self.lost)  # (a ShareColumn's shares: its buffer)


@dataclass
class ClientRound:
    """A client's bookkeeping of one round (kept in its node state between messages)."""

    peers: frozenset[int]
    size: int
    threshold: int
    own_share: bytes | None  # this client's share of its own b^r (40 bytes); dropped once answered
    min_survivors: int = 0  # m the noise share was sized for (0: central noise)

    def state(self) -> list:
        """A JSON-able form (the share in hex), read back by :meth:`of`."""
        share = None if self.own_share is None else self.own_share.hex()
        return [sorted(self.peers), self.size, self.threshold, share, self.min_survivors]

    @classmethod
    def of(cls, v: list) -> ClientRound:
        """From :meth:`state` (a state without m: central noise)."""
        share = None if v[3] is None else bytes.fromhex(v[3])
        return cls(frozenset(v[0]), int(v[1]), int(v[2]), share, int([*v, 0][4]))


def check_u64(name: str, value: object) -> int:
    """``value`` as an int in [0, 2^64), or ValueError/TypeError naming it."""
    if type(value) is int and 0 <= value < 2**64:  # fast path; the full check names the problem
        return value
    x = check_count(name, value, minimum=0)
    if x >= 2**64:
        raise ValueError(f"{name} must lie in [0, 2**64); got {value!r}")
    return x


def check_ids(name: str, ids: Iterable[object]) -> tuple[int, ...]:
    """Distinct client ids, sorted."""
    if type(ids) is tuple and (hit := _recent.get(id(ids))) is not None and hit[0] is ids:
        return hit[1]  # the very tuple checked lately (every party of a round gets one)
    out = tuple(ids)
    # Fast path for plain ints (type, min and max in C): the full check's abc isinstance
    # costs more than a round's maths, and a survivor list holds K ids.
    plain = set(map(type, out)) == {int}
    if plain and len(out) > _CHECKED_MIN and (done := _checked.get(out)) is not None:
        _remember(ids, done)
        return done  # every party of a process checks the round's survivor list: once
    if out and not (plain and min(out) >= 0 and max(out) < 2**64):
        out = tuple(check_u64(f"{name} id", i) for i in out)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must be distinct client ids; got {list(out)}")
    done = tuple(sorted(out))
    if plain:
        _remember(ids, done)
    if plain and len(out) > _CHECKED_MIN:
        if len(_checked) >= _CHECKED_SIZE:
            del _checked[next(iter(_checked))]
        _checked[out] = done
    return done


def _remember(ids: object, done: tuple[int, ...]) -> None:
    """Keep a tuple of plain ints found valid by identity (immutable: the same answer)."""
    if type(ids) is tuple:
        if len(_recent) >= _CHECKED_SIZE:
            del _recent[next(iter(_recent))]
        _recent[id(ids)] = (ids, done)  # the tuple kept alive: its id is not reused


# Long id lists of plain ints found valid, as given -> sorted (public ids; oldest first).
_checked: dict[tuple[int, ...], tuple[int, ...]] = {}
_CHECKED_MIN, _CHECKED_SIZE = 64, 16
_recent: dict[int, tuple[tuple, tuple[int, ...]]] = {}  # id -> (tuple checked, sorted)


def check_ring(name: str, value: object, n: int | None = None) -> np.ndarray:
    """A uint64 vector (of length ``n`` if given)."""
    arr = np.asarray(value)
    if arr.dtype != np.uint64 or arr.ndim != 1 or (n is not None and arr.size != n):
        raise ValueError(
            f"{name} must be uint64 of shape ({n or 'n'},); got {arr.dtype}{arr.shape}"
        )
    return arr


def point(client_id: int) -> int:
    """Client ``client_id``'s Shamir evaluation point, id + 1 (never 0, which is the secret).

    A point must lie in [1, p), p = 2^61 − 1 (:mod:`fedpriv.federation.shamir`): ids
    up to 2^61 − 3 share seeds (partition ids do), a larger one is refused at
    :meth:`~fedpriv.federation.secagg.SecAggClient.mask`.
    """
    return client_id + 1


def share_nonce(start: int) -> bytes:
    """12-byte AEAD nonce of the sealed batch of seed shares starting at round s: tag ‖
    le64(s). A client's batches never cover one round twice, so each starts at its own
    round and a nonce is never reused under a key k_{u→v}."""
    return _SHARE_TAG + start.to_bytes(8, "little")


def share_ad_prefix(sender: int, recipient: int) -> bytes:
    """Associated data of a sealed batch of shares, but for its header (first round, rounds;
    :mod:`fedpriv.federation.secagg_seeds`): fixed per pair, so computed once per run. The
    server cannot move a batch to another sender, recipient or rounds without failing
    authentication."""
    return _AD_PREFIX.pack(_SHARE_TAG, sender, recipient)


_AD_PREFIX = struct.Struct(">4s2Q")


def keystream(aead: ChaCha20Poly1305, tag: bytes, round_id: int, n: int) -> np.ndarray:
    """n uint64 words of the ChaCha20 keystream under ``aead``'s key, nonce tag ‖ le64(r).

    ChaCha20-Poly1305 encrypting zeros yields the ChaCha20 keystream from block
    counter 1 (RFC 8439 §2.8); its 16-byte Poly1305 tag is dropped.
    """
    raw = aead.encrypt(tag + round_id.to_bytes(8, "little"), bytes(8 * n), None)
    return np.frombuffer(raw, dtype="<u8", count=n)


def self_mask_key(seed: np.ndarray) -> bytes:
    """The 32-byte ChaCha20 key of seed b_u^r: HKDF-SHA256 (RFC 5869) of its 40 bytes.

    The seed's :data:`~fedpriv.federation.shamir.LIMBS` uniform elements of
    GF(2^61 − 1) carry ≈ 305 bits of entropy but are not uniform bytes (each
    word's top 3 bits are 0); HKDF's extract step turns them into a uniform key.
    """
    # RFC 5869 with no salt (32 zero bytes) and one output block, by two HMACs in C:
    # the HKDF object costs more than the hashing, and the server derives K keys a round.
    prk = hmac.digest(_ZERO_SALT, shamir.seed_bytes(seed), "sha256")
    return hmac.digest(prk, _SEED_INFO + b"\x01", "sha256")


_ZERO_SALT = bytes(32)


def self_mask(seed: np.ndarray, round_id: int, n: int) -> np.ndarray:
    """PRG(b_u^r): n uint64 words of the keystream under the key of seed b_u^r."""
    return keystream(ChaCha20Poly1305(self_mask_key(seed)), _SELF_TAG, round_id, n)
