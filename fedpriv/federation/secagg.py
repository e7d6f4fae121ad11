"""Secure aggregation by double masking: the server learns only the survivors' sum.

Bonawitz et al. 2017, "Practical Secure Aggregation for Privacy-Preserving Machine
Learning" (CCS; §4's double masking and the protocol's rounds AdvertiseKeys,
MaskedInputCollection and Unmasking, honest-but-curious variant), with one design
change: the pairwise masks are per round and a dropped client's are revealed by the
survivors themselves, so pairwise secret keys are never secret-shared (and shares of
the self-mask seeds travel with the masked input instead of in a ShareKeys round).

Keys (once per run). Each client u draws an X25519 (RFC 7748) key pair from the OS
CSPRNG and uploads pk_u; the server broadcasts the key book {v: pk_v}, which every
client *pins* (:meth:`SecAggClient.setup`). From the X25519 secret with each peer v it
derives, by HKDF-SHA256 (RFC 5869), a mask key s_uv and directional share keys
k_{u→v}, k_{v→u}. Any later message naming a key that differs from the pinned one,
or a participant without a pinned key, is refused (:class:`SecAggKeyError`).

Round r, participants P (n = |P|), threshold t = :meth:`SecAggConfig.threshold` (n):

1. Masked input. u encodes x_u in Z_{2^64} (:class:`~fedpriv.federation.fixedpoint.
   FixedPointCodec`), draws a fresh self-mask seed b_u^r uniform in GF(2^255 − 19) from
   ``secrets`` (never from a seed), splits it t-of-n (Shamir 1979,
   :mod:`fedpriv.federation.shamir`; party v holds f(v + 1)) and uploads

       y_u = x_u + PRG(b_u^r) + Σ_{v∈P, v>u} m_uv^r − Σ_{v∈P, v<u} m_uv^r   (mod 2^64)

   (Bonawitz §4, "double masking"), together with its share for each v ≠ u
   encrypted by ChaCha20-Poly1305 (RFC 8439) under k_{u→v}, nonce (tag, r), associated
   data (u, v, r). PRG(·) and m_uv^r are ChaCha20 keystreams under b_u^r resp. s_uv with
   a nonce holding a domain tag and r, so round-r pair masks say nothing about any
   other round. u keeps its own share and forgets b_u^r.
2. Unmask (one exchange, every round). S = those whose y arrived, D = P \\ S. If
   |S| < t the round is aborted (:class:`SecAggAbort`) and nothing is released.
   Otherwise each u ∈ S receives (S, D) and the ciphertexts addressed to it; it
   refuses if S ∩ D ≠ ∅, S ∪ D ≠ P, u ∉ S, |S| < t, or if it already answered an
   unmask of round r; else it returns its shares of b_w^r for every w ∈ S and its
   signed round-r pair masks with every v ∈ D (:meth:`SecAggClient.unmask`).
3. The server needs answers from ≥ t survivors (all of them if D ≠ ∅, to remove
   every pair mask with D), reconstructs each b_w^r (checking every extra share lies
   on the same polynomial), and outputs Σ_{u∈S} y_u − Σ_{u∈S} PRG(b_u^r) − (pair
   masks with D) = Σ_{u∈S} x_u exactly in Z_{2^64} (:meth:`SecAggServer.aggregate`).

Threat model. Honest-but-curious server, possibly colluding with up to t − 1 clients
(who hand it their keys, shares and inputs): it learns nothing beyond Σ_{u∈S} x_u of
the honest survivors. A survivor's y_u stays masked by pair masks with the other
honest survivors, which are never revealed; a dropped client's — or a straggler's late
— y_u is masked by PRG(b_u^r), of which honest clients release no share once u is in
D, so the server and colluders hold at most t − 1 shares, which are independent of
b_u^r. Each honest client answers one unmask per round, with disjoint S and D, so a
curious server cannot obtain both b_u^r and u's pair masks from it. Late replies are
refused anyway (:meth:`SecAggServer.accept_late`). An *actively* malicious server is
not covered: Bonawitz's consistency check (round 3, signatures over S) is not
implemented, so a server that shows different (S, D) to different clients can collect
t shares of b_u^r from clients told u ∈ S and u's pair masks from the others (or from u
itself, told they dropped) and unmask u, with t − 1 colluders or, for n ≥ 2t − 1, none;
nor are keys authenticated by a PKI, so the pins stop a *later* key substitution but
not a key book forged at set-up. Secret keys and seeds come from the OS CSPRNG, the deliberate
exception to "all randomness from an injected numpy Generator": reproducibility is
unaffected, since every mask cancels exactly and the sum depends on the inputs alone.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv.federation import shamir
from fedpriv.federation.fixedpoint import FixedPointCodec, SecAggOverflowError, sum_plain
from fedpriv.federation.secagg_common import (
    MaskedInput,
    SecAggAbort,
    SecAggConfig,
    SecAggKeyError,
    UnmaskAnswer,
    check_ids,
    check_u64,
    point,
    self_mask,
    share_nonce,
)
from fedpriv.federation.secagg_server import SecAggServer

__all__ = [
    "FixedPointCodec",
    "MaskedInput",
    "SecAggAbort",
    "SecAggClient",
    "SecAggConfig",
    "SecAggKeyError",
    "SecAggOverflowError",
    "SecAggServer",
    "UnmaskAnswer",
    "sum_plain",
]

_HKDF_INFO = b"fedpriv-secagg"  # pair mask key s_uv (unordered pair)
_HKDF_SHARE_INFO = b"fedpriv-secagg-share"  # share key k_{u→v} (ordered pair)
_MASK_TAG = b"fpSA"  # nonce domain tag: pair-mask keystreams and nothing else


def _hkdf(shared: bytes, label: bytes, a: int, b: int) -> bytes:
    info = label + a.to_bytes(8, "big") + b.to_bytes(8, "big")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


@dataclass
class _Round:
    peers: frozenset[int]
    size: int
    threshold: int
    own_share: int | None  # this client's share of its own b^r; dropped once answered


class SecAggClient:
    """One client's side: pinned key agreement, double masking, the unmask answer.

    ``private_key_bytes`` (32 raw bytes) is for tests; otherwise the key comes from
    the OS CSPRNG (module docstring). ``config`` fixes the threshold rule, which
    the server must announce identically.
    """

    def __init__(
        self,
        *,
        client_id: int,
        private_key_bytes: bytes | None = None,
        config: SecAggConfig | None = None,
    ) -> None:
        self.client_id = check_u64("client_id", client_id)
        self.config = config or SecAggConfig()
        if private_key_bytes is None:
            self._sk = X25519PrivateKey.generate()  # OS CSPRNG on purpose: module docstring
        else:
            self._sk = X25519PrivateKey.from_private_bytes(bytes(private_key_bytes))
        self._pinned: dict[int, bytes] | None = None  # the key book, pinned at setup()
        self._keys: dict[int, tuple[bytes, bytes, bytes]] = {}  # peer -> (s, k_out, k_in)
        self._prgs: dict[int, ChaCha20Poly1305] = {}
        self._rounds: dict[int, _Round] = {}
        self._answered: set[int] = set()  # rounds whose unmask this client answered

    @property
    def public_key(self) -> bytes:
        """Raw 32-byte X25519 public key, uploaded at the key exchange."""
        return self._sk.public_key().public_bytes_raw()

    @property
    def pinned_keys(self) -> dict[int, bytes] | None:
        """The key book pinned by :meth:`setup` (``None`` before it)."""
        return None if self._pinned is None else dict(self._pinned)

    def setup(self, public_keys: Mapping[int, bytes]) -> None:
        """Pin the key book {client id: public key} and derive the pair keys; once per run."""
        if self._pinned is not None:
            raise RuntimeError("setup() already ran; the key book is pinned once per run")
        book = {check_u64("client id", j): bytes(pk) for j, pk in public_keys.items()}
        if book.get(self.client_id) != self.public_key:
            raise ValueError(
                f"public key listed for client {self.client_id} is not this client's "
                f"(or missing); listed ids {sorted(book)}"
            )
        for j, pk in book.items():
            if j != self.client_id:
                self._derive(j, pk)
        self._pinned = book

    def _derive(self, j: int, pk: bytes) -> None:
        shared = self._sk.exchange(X25519PublicKey.from_public_bytes(pk))
        lo, hi = sorted((self.client_id, j))
        self._keys[j] = (
            _hkdf(shared, _HKDF_INFO, lo, hi),
            _hkdf(shared, _HKDF_SHARE_INFO, self.client_id, j),
            _hkdf(shared, _HKDF_SHARE_INFO, j, self.client_id),
        )
        self._prgs[j] = ChaCha20Poly1305(self._keys[j][0])

    def check_keys(
        self, peers: Sequence[int], public_keys: Mapping[int, bytes] | None = None
    ) -> None:
        """Refuse ``peers`` without a pinned key, and any key differing from the pinned one.

        Raises
        ------
        SecAggKeyError
            Naming the client ids concerned.
        """
        if self._pinned is None:
            raise SecAggKeyError(
                f"client {self.client_id} has no pinned key book: setup() never ran"
            )
        if unknown := sorted(set(peers) - set(self._pinned)):
            raise SecAggKeyError(f"participants {unknown} have no key pinned at the key exchange")
        if public_keys is not None:
            changed = sorted(j for j, pk in public_keys.items() if self._pinned.get(j) != bytes(pk))
            if changed:
                raise SecAggKeyError(
                    f"public keys of clients {changed} differ from those pinned at the key "
                    "exchange (key substitution): refused"
                )

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

    def _self_mask(self, seed: int, round_id: int, n: int) -> np.ndarray:
        return self_mask(seed, round_id, n)

    def mask(
        self,
        vector,
        *,
        round_id: int,
        participants: Sequence[int],
        codec: FixedPointCodec,
        threshold: int | None = None,
        public_keys: Mapping[int, bytes] | None = None,
        noise: np.ndarray | None = None,
    ) -> MaskedInput:
        """Step 1: y_u and the encrypted shares of a fresh b_u^r (module docstring).

        ``noise``: this client's integer noise share (int64 ticks, one per
        coordinate; :mod:`fedpriv.privacy.distributed`), added to the encoding in
        the ring before any mask, so no message ever holds the exact encoding.

        ``threshold``, if given (the server's announcement), must equal this
        client's :meth:`SecAggConfig.threshold`; ``public_keys``, if given, must
        match the pinned ones. Once per round: two vectors under one mask reveal
        their difference, so retry with a fresh round id.
        """
        r = check_u64("round_id", round_id)
        peers = check_ids("participants", participants)
        self.check_keys(peers, public_keys)
        if self.client_id not in peers or not 2 <= len(peers) <= codec.max_summands:
            raise ValueError(
                f"participants must include client {self.client_id} and number in "
                f"[2, {codec.max_summands}] (max_summands); got {list(peers)}"
            )
        t = self.config.threshold(len(peers))
        if threshold is not None and threshold != t:
            raise ValueError(
                f"threshold {threshold!r} announced for {len(peers)} participants, but this "
                f"client's rule {self.config} gives t = {t}: refused"
            )
        if r in self._rounds:
            raise ValueError(f"client {self.client_id} already masked for round {r}")
        x = np.asarray(vector, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"vector must be 1-dimensional; got shape {x.shape}")
        out = codec.encode(x)
        if noise is not None:
            share = np.asarray(noise)
            if share.dtype != np.int64 or share.shape != out.shape:
                raise ValueError(
                    f"noise must be int64 of shape {out.shape}; got {share.dtype}{share.shape}"
                )
            out += share.view(np.uint64)  # two's complement: addition mod 2^64
        seed = secrets.randbelow(shamir.PRIME)  # b_u^r: OS CSPRNG, fresh every round
        shares = shamir.split(seed, xs=[point(j) for j in peers], threshold=t)
        out += self._self_mask(seed, r, out.size)
        up = [j for j in peers if j > self.client_id]
        down = [j for j in peers if j < self.client_id]
        masks = self._pair_masks(up + down, r, out.size)
        # uint64 sums wrap mod 2^64, which is the ring's addition.
        out += masks[: len(up)].sum(axis=0, dtype=np.uint64)
        out -= masks[len(up) :].sum(axis=0, dtype=np.uint64)
        sealed = {
            j: ChaCha20Poly1305(self._keys[j][1]).encrypt(
                share_nonce(r), shamir.to_bytes(shares[point(j)]), _ad(self.client_id, j, r)
            )
            for j in peers
            if j != self.client_id
        }
        self._rounds[r] = _Round(frozenset(peers), out.size, t, shares[point(self.client_id)])
        return MaskedInput(vector=out, shares=sealed, round_id=r)

    def unmask(
        self,
        *,
        round_id: int,
        survivors: Sequence[int],
        dropped: Sequence[int],
        n: int,
        inbox: Mapping[int, bytes],
        public_keys: Mapping[int, bytes] | None = None,
    ) -> UnmaskAnswer:
        """Step 2: shares of b_w^r for every survivor w, pair masks with every dropped v.

        ``inbox[w]`` is survivor w's encrypted share for this client. Answers once
        per round, only for a round this client masked, only if ``survivors`` and
        ``dropped`` are disjoint, together are that round's participants, include
        this client among the survivors and leave at least t survivors. Whether a
        peer really dropped cannot be checked here: the server is trusted to list
        exactly the non-repliers (honest-but-curious; module docstring).
        """
        r = check_u64("round_id", round_id)
        if r not in self._rounds:
            raise ValueError(f"client {self.client_id} never masked for round {r}")
        if r in self._answered:
            raise ValueError(
                f"client {self.client_id} already answered the unmask of round {r}: a second "
                "request is refused"
            )
        live, gone = check_ids("survivors", survivors), check_ids("dropped", dropped)
        rnd = self._rounds[r]
        self.check_keys(rnd.peers, public_keys)
        if both := sorted(set(live) & set(gone)):
            raise ValueError(
                f"clients {both} are listed both as survivors and as dropped in round {r}: "
                "refused (their self-mask seed and pair masks together would unmask them)"
            )
        if set(live) | set(gone) != rnd.peers or self.client_id not in live:
            raise ValueError(
                f"survivors {list(live)} and dropped {list(gone)} must split the round-{r} "
                f"participants {sorted(rnd.peers)}, with client {self.client_id} a survivor"
            )
        if len(live) < rnd.threshold:
            raise ValueError(
                f"{len(live)} survivors < threshold t = {rnd.threshold} in round {r}: refused"
            )
        if check_u64("n", n) != rnd.size:
            raise ValueError(f"n must equal the round-{r} vector length {rnd.size}; got {n}")
        senders = set(live) - {self.client_id}
        if set(inbox) != senders:
            raise ValueError(
                f"inbox must hold one encrypted share from each other survivor "
                f"{sorted(senders)}; got {sorted(inbox)}"
            )
        shares = {self.client_id: shamir.to_bytes(rnd.own_share)}
        for w in sorted(senders):
            try:
                plain = ChaCha20Poly1305(self._keys[w][2]).decrypt(
                    share_nonce(r), bytes(inbox[w]), _ad(w, self.client_id, r)
                )
            except InvalidTag:
                raise ValueError(
                    f"the share from client {w} for round {r} failed authentication"
                ) from None
            shares[w] = plain
        # Commit: from here on this round's answer is out, and no second one will follow.
        self._answered.add(r)
        rnd.own_share = None
        masks = dict(zip(gone, self._pair_masks(gone, r, rnd.size).astype(np.uint64), strict=True))
        signed = {j: m if j > self.client_id else np.negative(m) for j, m in masks.items()}
        return UnmaskAnswer(shares=shares, masks=signed)

    def export_state(self) -> tuple[bytes, str]:
        """Private key, pinned key book and round bookkeeping, for stateless runtimes.

        A Flower client is rebuilt from its node state for every message; the
        pins and the once-per-round rules must survive that, so they travel
        with the key. Derived pair keys and this client's own share of each
        unanswered round's seed travel too: they are as secret as the private
        key and live in the same node-local state.
        """
        rounds = {
            str(r): [sorted(x.peers), x.size, x.threshold, x.own_share]
            for r, x in self._rounds.items()
        }
        keys = {str(j): [k.hex() for k in v] for j, v in self._keys.items()}
        book = None if self._pinned is None else {str(j): k.hex() for j, k in self._pinned.items()}
        state = {"rounds": rounds, "answered": sorted(self._answered), "pinned": book, "keys": keys}
        return self._sk.private_bytes_raw(), json.dumps(state)

    @classmethod
    def restore(
        cls,
        *,
        client_id: int,
        private_key_bytes: bytes,
        book: str,
        config: SecAggConfig | None = None,
    ) -> SecAggClient:
        """Rebuild a client from :meth:`export_state`, with its pinned key book."""
        client = cls(client_id=client_id, private_key_bytes=private_key_bytes, config=config)
        data = json.loads(book) if book else {}
        client._rounds = {
            int(r): _Round(frozenset(p), int(n), int(t), s)
            for r, (p, n, t, s) in data.get("rounds", {}).items()
        }
        client._answered = set(data.get("answered", []))
        if (pinned := data.get("pinned")) is not None:
            client._pinned = {int(j): bytes.fromhex(k) for j, k in pinned.items()}
            saved = data.get("keys", {})
            for j, pk in client._pinned.items():
                if j == client.client_id:
                    continue
                if str(j) in saved:
                    client._keys[j] = tuple(bytes.fromhex(k) for k in saved[str(j)])
                    client._prgs[j] = ChaCha20Poly1305(client._keys[j][0])
                else:
                    client._derive(j, pk)
        return client


def _ad(sender: int, recipient: int, round_id: int) -> bytes:
    # Associated data of a share ciphertext: the server cannot move it to another
    # sender, recipient or round without failing authentication.
    return b"fpSS" + b"".join(v.to_bytes(8, "big") for v in (sender, recipient, round_id))
