"""What both sides of secure aggregation share: parameters, messages, errors, PRG.

The protocol is described in :mod:`fedpriv.federation.secagg`; this module holds
the pieces its client and its server (:mod:`fedpriv.federation.secagg_server`)
both need, so neither imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedpriv.federation import shamir
from fedpriv.validation import check_count

_SELF_TAG = b"fpSM"  # nonce domain tag: self-mask keystreams and nothing else
_SHARE_TAG = b"fpSS"  # nonce domain tag: encrypted shares
#: Node-config key of a node's own Shamir threshold floor (:class:`SecAggConfig`).
MIN_THRESHOLD_KEY = "secagg-min-threshold"


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
        list per round and 2t > n.
    """

    threshold_fraction: float = 0.5
    min_threshold_fraction: float = 0.5

    def __post_init__(self) -> None:
        f = self.threshold_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f < 1.0:
            raise ValueError(f"threshold_fraction must lie in [0, 1); got {f!r}")
        g = self.min_threshold_fraction
        if isinstance(g, bool) or not isinstance(g, int | float) or not 0.5 <= g <= 1.0:
            raise ValueError(
                f"min_threshold_fraction (secagg-min-threshold) must lie in [0.5, 1]; got {g!r}"
            )

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


def node_config_floor(node_config: Mapping[str, object]) -> float:
    """The node-config key ``secagg-min-threshold`` as a fraction in [0.5, 1] (default 0.5)."""
    raw = node_config.get(MIN_THRESHOLD_KEY, 0.5)
    try:
        g = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{MIN_THRESHOLD_KEY} must be a number in [0.5, 1]; got {raw!r}") from None
    if not 0.5 <= g <= 1.0:
        raise ValueError(f"{MIN_THRESHOLD_KEY} must lie in [0.5, 1]; got {raw!r}")
    return g


@dataclass(frozen=True, kw_only=True)
class MaskedInput:
    """A client's step-1 upload: y_u and its encrypted share for each other participant,
    for round ``round_id`` (checked against the round before it enters a sum)."""

    vector: np.ndarray  # uint64, y_u
    shares: Mapping[int, bytes]  # recipient v -> AEAD ciphertext of v's share of b_u^r
    round_id: int

    @property
    def nbytes(self) -> int:
        """Bytes uploaded: the vector plus every ciphertext (32-byte share + 16-byte tag)."""
        return int(self.vector.nbytes) + sum(len(c) for c in self.shares.values())


@dataclass(frozen=True, kw_only=True)
class UnmaskAnswer:
    """A survivor's step-2 upload: shares of survivors' seeds, pair masks with the dropped."""

    shares: Mapping[int, bytes]  # survivor w -> this client's share of b_w^r (32 bytes)
    masks: Mapping[int, np.ndarray]  # dropped v -> signed round-r pair mask (uint64)

    @property
    def nbytes(self) -> int:
        return sum(len(s) for s in self.shares.values()) + sum(
            int(np.asarray(m).nbytes) for m in self.masks.values()
        )


@dataclass
class ClientRound:
    """A client's bookkeeping of one round (kept in its node state between messages)."""

    peers: frozenset[int]
    size: int
    threshold: int
    own_share: int | None  # this client's share of its own b^r; dropped once answered
    min_survivors: int = 0  # m the noise share was sized for (0: central noise)

    def state(self) -> list:
        """A JSON-able form, read back by :meth:`of`."""
        return [sorted(self.peers), self.size, self.threshold, self.own_share, self.min_survivors]

    @classmethod
    def of(cls, v: list) -> ClientRound:
        """From :meth:`state` (a state without m: central noise)."""
        return cls(frozenset(v[0]), int(v[1]), int(v[2]), v[3], int([*v, 0][4]))


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
    out = tuple(ids)
    # Fast path for plain ints: the full check's abc isinstance costs more than a round's maths.
    if not all(type(i) is int and 0 <= i < 2**64 for i in out):
        out = tuple(check_u64(f"{name} id", i) for i in out)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must be distinct client ids; got {list(out)}")
    return tuple(sorted(out))


def check_ring(name: str, value: object, n: int | None = None) -> np.ndarray:
    """A uint64 vector (of length ``n`` if given)."""
    arr = np.asarray(value)
    if arr.dtype != np.uint64 or arr.ndim != 1 or (n is not None and arr.size != n):
        raise ValueError(
            f"{name} must be uint64 of shape ({n or 'n'},); got {arr.dtype}{arr.shape}"
        )
    return arr


def point(client_id: int) -> int:
    """Client ``client_id``'s Shamir evaluation point, id + 1 (never 0, which is the secret)."""
    return client_id + 1


def share_nonce(round_id: int) -> bytes:
    """12-byte AEAD nonce of round r's shares: tag ‖ le64(r). Each directional key
    k_{u→v} encrypts one share per round, so a nonce is never reused under a key."""
    return _SHARE_TAG + round_id.to_bytes(8, "little")


def share_ad(sender: int, recipient: int, round_id: int) -> bytes:
    """Associated data of a share ciphertext: the server cannot move it to another
    sender, recipient or round without failing authentication."""
    return _SHARE_TAG + b"".join(v.to_bytes(8, "big") for v in (sender, recipient, round_id))


def keystream(aead: ChaCha20Poly1305, tag: bytes, round_id: int, n: int) -> np.ndarray:
    """n uint64 words of the ChaCha20 keystream under ``aead``'s key, nonce tag ‖ le64(r).

    ChaCha20-Poly1305 encrypting zeros yields the ChaCha20 keystream from block
    counter 1 (RFC 8439 §2.8); its 16-byte Poly1305 tag is dropped.
    """
    raw = aead.encrypt(tag + round_id.to_bytes(8, "little"), bytes(8 * n), None)
    return np.frombuffer(raw, dtype="<u8", count=n)


def self_mask(seed: int, round_id: int, n: int) -> np.ndarray:
    """PRG(b_u^r): n uint64 words of the keystream under the 32-byte seed b_u^r."""
    return keystream(ChaCha20Poly1305(shamir.to_bytes(seed)), _SELF_TAG, round_id, n)
