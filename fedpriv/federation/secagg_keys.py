"""A secure-aggregation client's keys: its own pairs, the pinned key book, the pair keys.

Each client draws an X25519 key pair (RFC 7748; key agreement) and an Ed25519 key
pair (RFC 8032; the consistency round's signatures) from the OS CSPRNG, uploads
both public halves at the key exchange and *pins* the key book {client id:
(public key, verify key)} the server broadcasts back (:meth:`ClientKeys.setup`).
From the X25519 secret with each peer v it derives, by one HKDF-SHA256 (RFC 5869)
of 96 bytes with info (label, min(u, v), max(u, v)), the mask key s_uv (its first 32
bytes: what a 32-byte HKDF with that info gives) and the directional share keys
k_{min→max}, k_{max→min}. Peers are every other client of the key book, or, under
SecAgg+'s sparse graph, only the client's k neighbours
(:mod:`fedpriv.federation.secagg_topology`): O(k) key agreements per client, once per
run. Any later message naming a key that differs from the pinned one, or a
participant without a pinned key, is refused
(:class:`~fedpriv.federation.secagg_common.SecAggKeyError`). The protocol itself is
in :mod:`fedpriv.federation.secagg`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv.federation import secagg_consistency as consistency
from fedpriv.federation.secagg_common import SecAggKeyError, check_u64, share_ad_prefix

_HKDF_INFO = b"fedpriv-secagg"  # s_uv ‖ k_{lo→hi} ‖ k_{hi→lo} of the unordered pair


def _hkdf(shared: bytes, lo: int, hi: int) -> bytes:
    info = _HKDF_INFO + lo.to_bytes(8, "big") + hi.to_bytes(8, "big")
    return HKDF(algorithm=hashes.SHA256(), length=96, salt=None, info=info).derive(shared)


class ClientKeys:
    """One client's key pairs, pinned key book and derived pair keys (module docstring).

    ``private_key_bytes`` (32 raw X25519 bytes) and ``signing_key_bytes`` (32 raw
    Ed25519 bytes) are for tests; otherwise both keys come from the OS CSPRNG.
    """

    def __init__(
        self,
        *,
        client_id: int,
        private_key_bytes: bytes | None = None,
        signing_key_bytes: bytes | None = None,
    ) -> None:
        self.client_id = check_u64("client_id", client_id)
        if private_key_bytes is None:
            self._sk = X25519PrivateKey.generate()  # OS CSPRNG on purpose: secagg docstring
        else:
            self._sk = X25519PrivateKey.from_private_bytes(bytes(private_key_bytes))
        if signing_key_bytes is None:
            self._signer = Ed25519PrivateKey.generate()  # OS CSPRNG, as the X25519 key
        else:
            self._signer = Ed25519PrivateKey.from_private_bytes(bytes(signing_key_bytes))
        self._pinned: dict[int, bytes] | None = None  # the key book, pinned at setup()
        self._vpinned: dict[int, bytes] = {}  # the verify keys, pinned with it
        self._digest = b""  # the pinned key book's digest: binds signatures to this run
        self._keys_ok: tuple = (None, None)  # the latest two peer groups found pinned
        self._keys: dict[int, bytes] = {}  # peer -> s ‖ k_out ‖ k_in (one object: K·k of them)
        # Per peer, built once and reused every round (bound methods of the AEADs):
        self._stream: dict[int, Callable] = {}  # encrypt under s (its keystream: pair masks)
        self._seal: dict[int, tuple[Callable, bytes]] = {}  # (encrypt under k_out, AD prefix)
        self._open: dict[int, tuple[Callable, bytes]] = {}  # (decrypt under k_in, AD prefix)

    @property
    def public_key(self) -> bytes:
        """Raw 32-byte X25519 public key, uploaded at the key exchange."""
        return self._sk.public_key().public_bytes_raw()

    @property
    def verify_key(self) -> bytes:
        """Raw 32-byte Ed25519 verify key, uploaded with :attr:`public_key`."""
        return self._signer.public_key().public_bytes_raw()

    @property
    def pinned_keys(self) -> dict[int, bytes] | None:
        """The key book pinned by :meth:`setup` (``None`` before it)."""
        return None if self._pinned is None else dict(self._pinned)

    @property
    def pinned_verify_keys(self) -> dict[int, bytes] | None:
        """The verify keys pinned by :meth:`setup` (``None`` before it)."""
        return None if self._pinned is None else dict(self._vpinned)

    def _peers_for(self, book: Mapping[int, bytes], digest: bytes) -> Iterable[int]:
        """The clients this one agrees pair keys with, once the book is pinned: every
        other client (a subclass restricts them to its graph neighbours)."""
        return [j for j in book if j != self.client_id]

    def setup(self, public_keys: Mapping[int, bytes], *, verify_keys: Mapping[int, bytes]) -> None:
        """Pin the key book {client id: public key} with the verify keys {client id:
        verify key} and derive the pair keys with :meth:`_peers_for`; once per run."""
        if self._pinned is not None:
            raise RuntimeError("setup() already ran; the key book is pinned once per run")
        book = {check_u64("client id", j): bytes(pk) for j, pk in public_keys.items()}
        vbook = {check_u64("client id", j): bytes(vk) for j, vk in verify_keys.items()}
        mine = (("public", book, self.public_key), ("verify", vbook, self.verify_key))
        for what, listed, own in mine:
            if listed.get(self.client_id) != own:
                raise ValueError(
                    f"{what} key listed for client {self.client_id} is not this client's "
                    f"(or missing); listed ids {sorted(listed)}"
                )
        digest = consistency.book_digest(book, vbook)  # refuses ids without a verify key
        for j, vk in vbook.items():  # 32 bytes each; a point that is none fails to verify
            if len(vk) != consistency.VERIFY_KEY_BYTES:
                raise ValueError(f"verify key of client {j} must be 32 bytes; got {len(vk)}")
        self._pinned, self._vpinned, self._digest = book, vbook, digest
        for j in self._peers_for(book, digest):
            self._derive(j, book[j])

    def _verify_key(self, j: int) -> bytes:
        """Client j's pinned verify key, raw (verified with by the consistency round)."""
        return self._vpinned[j]

    def _derive(self, j: int, pk: bytes) -> None:
        shared = self._sk.exchange(X25519PublicKey.from_public_bytes(pk))
        lo, hi = sorted((self.client_id, j))
        okm = _hkdf(shared, lo, hi)
        s, k_up, k_down = okm[:32], okm[32:64], okm[64:]
        self._set_keys(j, (s, k_up, k_down) if self.client_id == lo else (s, k_down, k_up))

    def _set_keys(self, j: int, keys: tuple[bytes, bytes, bytes]) -> None:
        self._keys[j] = b"".join(keys)
        s, k_out, k_in = keys
        self._stream[j] = ChaCha20Poly1305(s).encrypt
        # The associated data of sealed shares to and from j, but for the batch's header.
        self._seal[j] = (ChaCha20Poly1305(k_out).encrypt, share_ad_prefix(self.client_id, j))
        self._open[j] = (ChaCha20Poly1305(k_in).decrypt, share_ad_prefix(j, self.client_id))

    def check_keys(
        self,
        peers: Sequence[int],
        public_keys: Mapping[int, bytes] | None = None,
        verify_keys: Mapping[int, bytes] | None = None,
    ) -> None:
        """Refuse ``peers`` without a pinned key, and any public or verify key differing
        from the pinned one.

        Raises
        ------
        SecAggKeyError
            Naming the client ids concerned.
        """
        if self._pinned is None:
            raise SecAggKeyError(
                f"client {self.client_id} has no pinned key book: setup() never ran"
            )
        if public_keys is None and verify_keys is None and any(p is peers for p in self._keys_ok):
            return  # these very (immutable) peers were found pinned, and pins never change
        known = peers if isinstance(peers, frozenset | set) else set(peers)
        if not self._pinned.keys() >= known and (
            unknown := sorted(j for j in peers if j not in self._pinned)  # O(peers), not O(K)
        ):
            raise SecAggKeyError(f"participants {unknown} have no key pinned at the key exchange")
        for what, given, pinned in (
            ("public", public_keys, self._pinned),
            ("verify", verify_keys, self._vpinned),
        ):
            changed = sorted(j for j, k in (given or {}).items() if pinned.get(j) != bytes(k))
            if changed:
                raise SecAggKeyError(
                    f"{what} keys of clients {changed} differ from those pinned at the key "
                    "exchange (key substitution): refused"
                )
        if type(peers) is tuple or type(peers) is frozenset:
            self._keys_ok = (peers, self._keys_ok[0])  # a round's holders, as tuple and set

    def _keys_state(self) -> dict[str, Any]:
        """The signing key, pins and pair keys as JSON-ready values (node-local state)."""
        book = None if self._pinned is None else {str(j): k.hex() for j, k in self._pinned.items()}
        keys = {str(j): [v[:32].hex(), v[32:64].hex(), v[64:].hex()] for j, v in self._keys.items()}
        return {
            "pinned": book,
            "keys": keys,
            "signing": self._signer.private_bytes_raw().hex(),
            "verify": {str(j): k.hex() for j, k in self._vpinned.items()},
        }

    def _load_keys(self, data: Mapping[str, Any]) -> None:
        """Restore :meth:`_keys_state` (the signing key is a constructor argument)."""
        if (pinned := data.get("pinned")) is None:
            return
        self._pinned = {int(j): bytes.fromhex(k) for j, k in pinned.items()}
        self._vpinned = {int(j): bytes.fromhex(k) for j, k in data.get("verify", {}).items()}
        self._digest = consistency.book_digest(self._pinned, self._vpinned)
        saved = data.get("keys", {})
        for j in self._peers_for(self._pinned, self._digest):
            if str(j) in saved:
                self._set_keys(j, tuple(bytes.fromhex(k) for k in saved[str(j)]))
            else:
                self._derive(j, self._pinned[j])
