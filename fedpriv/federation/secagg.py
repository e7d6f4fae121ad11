"""Secure aggregation by pairwise masking: the server learns only the sum.

Pairwise-masking core of Bonawitz et al. 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning" (CCS, §4), without secret sharing of keys or
self-masks. Client i encodes its vector in Z_{2^64} (:class:`FixedPointCodec`) and
adds +m_ij^r for every other participant j > i of round r, −m_ij^r for j < i; the
masks cancel exactly in the sum. m_ij^r is the ChaCha20 (RFC 8439) keystream under
s_ij = HKDF-SHA256 (RFC 5869) of the X25519 (RFC 7748) shared secret, agreed once per
run, and a nonce holding a domain tag and r. For dropouts, survivors reveal only
their round-r pair masks with the dropped clients and the server subtracts them.

Threat model: honest-but-curious server. Without self-masks, a dropped client's late
reply plus the reveals would unmask it, so the server closes each round it aggregates
or aborts and refuses later replies (:meth:`SecAggServer.accept_late`). Clients reveal
once per round, only for peers of a round they masked, and only if enough survivors
remain, so a curious server cannot collect a replier's masks.

Secret keys come from the OS CSPRNG (``X25519PrivateKey.generate``), the one deliberate
exception to "all randomness from an injected numpy Generator": a key derived from the
run seed would be guessable by anyone knowing the seed, and so would every mask.
Reproducibility is unaffected: the masks cancel exactly in Z_{2^64}, so the aggregate,
and every model released from it, depends on the clients' vectors alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv.privacy._validation import check_count, check_finite_array, check_positive

_INT64_MAX = 2**63 - 1
_HKDF_INFO = b"fedpriv-secagg"
_MASK_TAG = b"fpSA"  # nonce domain tag: these keystreams are masks and nothing else


class SecAggOverflowError(ValueError):
    """The codec's largest possible sum would leave the signed 64-bit range."""


class SecAggAbort(RuntimeError):
    """A round cannot be unmasked; the caller must abort it and release nothing."""


def _check_u64(name: str, value: object) -> int:
    if type(value) is int and 0 <= value < 2**64:  # fast path; the full check names the problem
        return value
    x = check_count(name, value, minimum=0)
    if x >= 2**64:
        raise ValueError(f"{name} must lie in [0, 2**64); got {value!r}")
    return x


def _check_ids(name: str, ids: Iterable[object]) -> tuple[int, ...]:
    out = tuple(ids)
    # Fast path for plain ints: the full check's abc isinstance costs more than a round's maths.
    if not all(type(i) is int and 0 <= i < 2**64 for i in out):
        out = tuple(_check_u64(f"{name} id", i) for i in out)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must be distinct client ids; got {list(out)}")
    return tuple(sorted(out))


def _check_ring(name: str, value: object, n: int | None = None) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype != np.uint64 or arr.ndim != 1 or (n is not None and arr.size != n):
        raise ValueError(
            f"{name} must be uint64 of shape ({n or 'n'},); got {arr.dtype}{arr.shape}"
        )
    return arr


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


def needs_reveal(participants: Iterable[int], replied: Iterable[int]) -> bool:
    """Whether a round needs the survivors' reveal exchange; without dropouts it costs none."""
    return bool(set(participants) - set(replied))


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


class SecAggClient:
    """One client's side: key agreement, masking, dropout reveals.

    ``private_key_bytes`` (32 raw bytes) is for tests; otherwise the key comes from
    the OS CSPRNG (module docstring). :meth:`reveal` answers only if at least
    ``min_survivors`` (≥ 2) clients remain: with every peer "missing" it would
    unmask this client's own vector.
    """

    def __init__(
        self, *, client_id: int, private_key_bytes: bytes | None = None, min_survivors: int = 2
    ) -> None:
        self.client_id = _check_u64("client_id", client_id)
        self.min_survivors = check_count("min_survivors", min_survivors, minimum=2)
        if private_key_bytes is None:
            self._sk = X25519PrivateKey.generate()  # OS CSPRNG on purpose: module docstring
        else:
            self._sk = X25519PrivateKey.from_private_bytes(bytes(private_key_bytes))
        self._prgs: dict[int, ChaCha20Poly1305] | None = None
        self._pair_keys: dict[int, tuple[bytes, bytes]] = {}  # peer -> (its pk, s_ij)
        self._rounds: dict[int, tuple[frozenset[int], int]] = {}  # round -> (participants, n)
        self._revealed: set[int] = set()

    @property
    def public_key(self) -> bytes:
        """Raw 32-byte X25519 public key, broadcast before :meth:`setup`."""
        return self._sk.public_key().public_bytes_raw()

    def export_state(self) -> tuple[bytes, str]:
        """Private key and round bookkeeping, for runtimes that do not keep objects alive.

        A Flower client is rebuilt from its node state for every message; the
        once-per-round rules must survive that, so they travel with the key.
        The derived pair keys travel too (with the peer public key each came
        from), so a rebuilt client skips the X25519 exchanges; they are as
        secret as the private key and live in the same node-local state.
        """
        rounds = {str(r): [sorted(p), n] for r, (p, n) in self._rounds.items()}
        pairs = {str(j): [pk.hex(), key.hex()] for j, (pk, key) in self._pair_keys.items()}
        book = json.dumps({"rounds": rounds, "revealed": sorted(self._revealed), "pairs": pairs})
        return self._sk.private_bytes_raw(), book

    @classmethod
    def restore(
        cls,
        *,
        client_id: int,
        private_key_bytes: bytes,
        book: str,
        public_keys: Mapping[int, bytes],
    ) -> SecAggClient:
        """Rebuild a client from :meth:`export_state` and redo the key set-up.

        Pair keys saved for the same peer public key are reused; any other
        peer's key is derived afresh.
        """
        client = cls(client_id=client_id, private_key_bytes=private_key_bytes)
        data = json.loads(book) if book else {}
        client._rounds = {
            int(r): (frozenset(p), int(n)) for r, (p, n) in data.get("rounds", {}).items()
        }
        client._revealed = set(data.get("revealed", []))
        saved = {
            int(j): (bytes.fromhex(pk), bytes.fromhex(key))
            for j, (pk, key) in data.get("pairs", {}).items()
        }
        client.setup(public_keys, saved=saved)
        return client

    def setup(
        self,
        public_keys: Mapping[int, bytes],
        *,
        saved: Mapping[int, tuple[bytes, bytes]] | None = None,
    ) -> None:
        """Derive s_ij = HKDF-SHA256(X25519(sk_i, pk_j)) for every other client j; once per run.

        ``saved`` maps a peer to (its public key, the pair key derived from it)
        from :meth:`export_state`; an entry is used only if the public key is
        the one given now.
        """
        if self._prgs is not None:
            raise RuntimeError("setup() already ran; key set-up happens once per run")
        saved = saved or {}
        prgs, pair_keys = {}, {}
        for j, pk in public_keys.items():
            j = _check_u64("client id", j)
            pk = bytes(pk)
            if j == self.client_id:
                if pk != self.public_key:
                    raise ValueError(f"public key listed for client {j} is not this client's")
                continue
            if j in saved and saved[j][0] == pk:
                key = saved[j][1]
            else:
                shared = self._sk.exchange(X25519PublicKey.from_public_bytes(pk))
                lo, hi = sorted((self.client_id, j))
                info = _HKDF_INFO + lo.to_bytes(8, "big") + hi.to_bytes(8, "big")
                key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(
                    shared
                )
            prgs[j] = ChaCha20Poly1305(key)
            pair_keys[j] = (pk, key)
        self._prgs, self._pair_keys = prgs, pair_keys

    def _pair_masks(self, peers: Sequence[int], round_id: int, n: int) -> np.ndarray:
        # m_ij^r = ChaCha20 keystream, i.e. algorithms.ChaCha20(s_ij, nonce) encrypting zeros
        # with nonce = le32(block counter 1) ‖ tag ‖ le64(r). The AEAD yields exactly that
        # keystream (RFC 8439 §2.8; the test checks it) and reuses its OpenSSL context, 2× faster
        # per call; its 16-byte Poly1305 tag is dropped. The round id never enters the counter
        # word, else round r+1's stream would be round r's shifted by one block. One row per
        # peer, from one buffer: per-peer numpy calls cost more than the cipher.
        nonce = _MASK_TAG + round_id.to_bytes(8, "little")
        zeros = bytes(8 * n)
        raw = b"".join([self._prgs[j].encrypt(nonce, zeros, None) for j in peers])
        return np.frombuffer(raw, dtype="<u8").reshape(len(peers), n + 2)[:, :n]

    def mask(
        self, vector, *, round_id: int, participants: Sequence[int], codec: FixedPointCodec
    ) -> np.ndarray:
        """Encode ``vector`` (1-D) and add this client's signed pair masks for ``round_id``.

        Once per round (two vectors under one mask reveal their difference): retry with a
        fresh round id.
        """
        if self._prgs is None:
            raise RuntimeError("call setup() before mask()")
        r = _check_u64("round_id", round_id)
        peers = _check_ids("participants", participants)
        if self.client_id not in peers or not 2 <= len(peers) <= codec.max_summands:
            raise ValueError(
                f"participants must include client {self.client_id} and number in "
                f"[2, {codec.max_summands}] (max_summands); got {list(peers)}"
            )
        if unknown := [j for j in peers if j != self.client_id and j not in self._prgs]:
            raise ValueError(f"participants {unknown} had no public key at setup()")
        if r in self._rounds:
            raise ValueError(f"client {self.client_id} already masked for round {r}")
        x = np.asarray(vector, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"vector must be 1-dimensional; got shape {x.shape}")
        out = codec.encode(x)
        up = [j for j in peers if j > self.client_id]
        down = [j for j in peers if j < self.client_id]
        masks = self._pair_masks(up + down, r, out.size)
        # uint64 sums wrap mod 2^64, which is the ring's addition.
        out += masks[: len(up)].sum(axis=0, dtype=np.uint64)
        out -= masks[len(up) :].sum(axis=0, dtype=np.uint64)
        self._rounds[r] = (frozenset(peers), out.size)
        return out

    def reveal(self, *, round_id: int, missing: Sequence[int], n: int) -> dict[int, np.ndarray]:
        """The signed pair mask this client added in ``round_id`` for each missing peer.

        Answers once per round, only for a round this client masked (a future round's
        masks would unmask it later), only for its peers in that round, and only if
        ``min_survivors`` remain. Whether a peer really dropped cannot be checked
        here: the server is trusted to ask only for non-repliers (honest-but-curious).
        """
        r = _check_u64("round_id", round_id)
        if r not in self._rounds:
            raise ValueError(f"client {self.client_id} never masked for round {r}")
        if r in self._revealed:
            raise ValueError(f"client {self.client_id} already revealed for round {r}")
        peers, size = self._rounds[r]
        gone = _check_ids("missing", missing)
        if not gone or not set(gone) <= peers - {self.client_id}:
            raise ValueError(
                f"missing must be a non-empty set of round-{r} peers of client "
                f"{self.client_id} ({sorted(peers - {self.client_id})}); got {list(gone)}"
            )
        if check_count("n", n) != size:
            raise ValueError(f"n must equal the round-{r} vector length {size}; got {n}")
        if len(peers) - len(gone) < self.min_survivors:
            left = len(peers) - len(gone)
            raise ValueError(f"{left} survivors would remain; min_survivors = {self.min_survivors}")
        self._revealed.add(r)
        masks = dict(zip(gone, self._pair_masks(gone, r, size).astype(np.uint64), strict=True))
        return {j: m if j > self.client_id else np.negative(m) for j, m in masks.items()}


class SecAggServer:
    """The server's side: sums masked vectors, removing dropped clients' masks.

    Each aggregated or aborted round is closed: :meth:`accept_late` then returns
    False and :meth:`aggregate` refuses it, so a dropped client's late reply is
    never combined with the reveals that would unmask it.
    """

    def __init__(self, *, codec: FixedPointCodec) -> None:
        self.codec = codec
        self._closed: set[int] = set()  # rounds aggregated or aborted

    def missing(self, participants: Iterable[int], masked: Iterable[int]) -> list[int]:
        """Participants whose masked vector did not arrive, sorted."""
        return sorted(set(participants) - set(masked))

    def accept_late(self, round_id: int, client_id: int) -> bool:
        """Whether a reply of ``client_id`` for ``round_id`` may still be used (round open)."""
        _check_u64("client_id", client_id)
        return _check_u64("round_id", round_id) not in self._closed

    def aggregate(
        self,
        *,
        round_id: int,
        participants: Sequence[int],
        masked: Mapping[int, np.ndarray],
        reveals: Mapping[int, Mapping[int, np.ndarray]] | None = None,
    ) -> np.ndarray:
        """Decoded float64 sum of the replying clients' vectors.

        ``reveals[i][j]`` is survivor i's :meth:`SecAggClient.reveal` entry for
        missing j, needed only if someone is missing. Raises :class:`SecAggAbort`
        and closes the round if some missing client's masks cannot all be removed:
        the sum would be uniform noise.
        """
        r = _check_u64("round_id", round_id)
        if r in self._closed:
            raise ValueError(f"round {r} is closed; its late or repeated replies are refused")
        peers = _check_ids("participants", participants)
        survivors = _check_ids("masked", masked)
        if not set(survivors) <= set(peers) or len(survivors) > self.codec.max_summands:
            raise ValueError(
                f"masked must come from participants {list(peers)}, at most max_summands = "
                f"{self.codec.max_summands}; got {list(survivors)}"
            )
        if not survivors:
            self._closed.add(r)
            raise SecAggAbort(f"round {r}: no client replied")
        n = _check_ring(f"masked[{survivors[0]}]", masked[survivors[0]]).size
        total = np.zeros(n, dtype=np.uint64)
        for i in survivors:
            np.add(total, _check_ring(f"masked[{i}]", masked[i], n), out=total)
        gone = self.missing(peers, survivors)
        reveals = reveals or {}
        if not gone and reveals:
            raise ValueError(f"round {r}: nobody is missing, yet reveals were given")
        for i, got in reveals.items():
            if i not in survivors or not set(got) <= set(gone):
                raise ValueError(
                    f"round {r}: reveals must come from survivors {list(survivors)} and cover "
                    f"only missing clients {gone}; got {sorted(got)} from client {i}"
                )
        short = [i for i in survivors if gone and set(reveals.get(i, ())) != set(gone)]
        if short:
            self._closed.add(r)
            raise SecAggAbort(f"round {r}: survivors {short} did not reveal masks for {gone}")
        for i in survivors:
            for j in gone:
                np.subtract(total, _check_ring(f"reveals[{i}][{j}]", reveals[i][j], n), out=total)
        self._closed.add(r)
        return self.codec.decode(total)
