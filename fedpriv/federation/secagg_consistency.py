"""The consistency round of secure aggregation: signatures over the survivor list.

Bonawitz et al. 2017 (CCS, §4 and Fig. 4, the actively secure protocol's round
ConsistencyCheck): after the masked inputs are collected and before any unmask,
the server sends every survivor the list it claims, S (and D = P \\ S); each
survivor signs (run, r, S, D) with its Ed25519 key (RFC 8032), pinned in every
node's key book at the key exchange, and the server forwards the signatures with
the unmask request. A node reveals nothing unless at least t distinct members of
S signed that very (r, S, D) under their pinned keys. Every honest client signs
one list per round, so with 2t > n + c (c colluding clients) two different lists
cannot both collect t signatures: a server that tells different clients different
survivors is caught before anything is revealed.

The signed bytes bind the run by the digest of the pinned key book (every X25519
and Ed25519 key with its client id): a signature from another run, or under a
key book that differs from the verifier's, never verifies.

Under SecAgg+'s sparse graph (:mod:`fedpriv.federation.secagg_topology`) the list
signed is still the whole (S, D), but a client counts only its own neighbours'
signatures: t of them, so it verifies O(k) signatures, not O(K). It also refuses a
list whose survivors are not connected in the graph or leave it fewer than t
surviving neighbours. Two lists cannot both collect t signatures within one
neighbourhood when 2t > k + c_u (c_u of its k neighbours colluding): the bound
:func:`~fedpriv.federation.secagg_graph.choose_parameters` holds against a
semi-malicious server.

Verification. Ed25519 verification is deterministic, so :func:`valid_signers`
remembers every (verify key, signature, message) it accepted (a bounded memo of
exact inputs, never of a key alone): a process holding many parties (the in-process
runtime, where the server and every client check the same survivors' signatures)
verifies each distinct signature once. A deployed node is its own process and
verifies its t neighbours itself.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from fedpriv.federation.secagg_common import check_ids

#: Bytes of one Ed25519 signature and of one verify key (RFC 8032).
SIGNATURE_BYTES = 64
VERIFY_KEY_BYTES = 32
_BOOK_TAG = b"fpKB"  # domain tag of the key book digest
_VIEW_TAG = b"fpSC"  # domain tag of a signed survivor list
_MEMO_MESSAGES = 64  # signed messages whose accepted (key, signature) pairs are remembered
# message -> {raw verify key: the signature accepted}; insertion-ordered: oldest message first.
# Keyed by message first so that a party checking t signers of one list pays one lookup
# of the (long) message and t of the 32-byte keys.
_accepted: dict[bytes, dict[bytes, bytes]] = {}


def _le64(v: int) -> bytes:
    return int(v).to_bytes(8, "little")


def book_digest(public_keys: Mapping[int, bytes], verify_keys: Mapping[int, bytes]) -> bytes:
    """SHA-256 of the key book: tag ‖ Σ over sorted ids (le64(id) ‖ pk ‖ vk)."""
    ids = sorted(public_keys)
    if sorted(verify_keys) != ids:
        raise ValueError(
            f"verify keys must name the key book's clients {ids}; got {sorted(verify_keys)}"
        )
    h = hashlib.sha256(_BOOK_TAG)
    for j in ids:
        h.update(_le64(j) + bytes(public_keys[j]) + bytes(verify_keys[j]))
    return h.digest()


def view_message(
    digest: bytes, round_id: int, survivors: Sequence[int], dropped: Sequence[int]
) -> bytes:
    """The canonical bytes a survivor signs: tag ‖ digest ‖ le64(r) ‖ |S| ‖ S ‖ |D| ‖ D
    (ids sorted, each le64), so one (run, r, S, D) has exactly one encoding."""
    last = _last_view[0]  # every party of a process encodes the round's one list: once
    if last and last[2] is survivors and last[3] is dropped and last[:2] == (digest, round_id):
        return last[4]
    live, gone = sorted(survivors), sorted(dropped)
    out = b"".join(
        [
            _VIEW_TAG,
            bytes(digest),
            struct.pack(f"<{len(live) + 2}Q", round_id, len(live), *live),
            struct.pack(f"<{len(gone) + 1}Q", len(gone), *gone),
        ]
    )
    if type(survivors) is tuple and type(dropped) is tuple:  # immutable: kept with it
        _last_view[0] = (bytes(digest), round_id, survivors, dropped, out)  # one store
    return out


# One tuple each, replaced whole (a thread reads one consistent entry, never a mix):
_last_view: list = [()]  # [(digest, r, S, D, encoding)] of the latest list encoded
_last_split: list = [()]  # [(P, S, D, whether S and D split P)] of the latest list checked


def forget_latest() -> None:
    """Drop the remembered latest survivor list (its encoding and its check)."""
    _last_view[0] = _last_split[0] = ()


def view_nbytes(survivors: int, dropped: int) -> int:
    """Bytes of the (S, D) encoding sent to each survivor: 8 per id plus the two lengths."""
    return 8 * (survivors + dropped + 2)


def verify_key(client_id: int, raw: bytes) -> Ed25519PublicKey:
    """``raw`` as an Ed25519 verify key, or ValueError naming the client."""
    if len(raw) != VERIFY_KEY_BYTES:
        raise ValueError(
            f"verify key of client {client_id} must be {VERIFY_KEY_BYTES} bytes; got {len(raw)}"
        )
    return Ed25519PublicKey.from_public_bytes(bytes(raw))


def valid_signers(
    message: bytes,
    signatures: Mapping[int, bytes],
    keys: Mapping[int, bytes | Ed25519PublicKey],
    members: Sequence[int],
    need: int | None = None,
) -> list[int]:
    """The distinct ``members`` whose signature on ``message`` verifies under their key
    (raw 32 bytes or a key object), in id order; with ``need``, only the first ``need``
    of them (verification is the cost of the round: an Ed25519 verification costs
    about two signatures)."""
    ok: list[int] = []
    # The offered signatures first (t of a neighbourhood), then membership: O(offered),
    # never O(key book) per party.
    offered = sorted(set(signatures).intersection(members))
    if need is not None and (seen := _accepted.get(message)) is not None:
        # Every party of a process checks the same signatures: if the first ``need`` are
        # accepted triples already (raw key, signature, message), they are the answer.
        first = offered[: max(need, 0)]
        raw = list(map(keys.get, first))  # all at once, in C: t lookups per party
        if first and set(map(type, raw)) == {bytes}:  # each a raw pinned key (None: none)
            if list(map(seen.get, raw)) == list(map(signatures.__getitem__, first)):
                return first
    for j in offered:
        if need is not None and len(ok) >= need:
            break
        if j not in keys:
            continue
        sig = signatures[j]
        if not isinstance(sig, bytes | bytearray) or len(sig) != SIGNATURE_BYTES:
            continue
        if _verifies(keys[j], bytes(sig), message):
            ok.append(j)
    return ok


def _verifies(key: bytes | Ed25519PublicKey, sig: bytes, message: bytes) -> bool:
    """Whether ``sig`` verifies on ``message`` under ``key``: a deterministic function of
    the three, so an accepted triple is remembered (module docstring)."""
    raw = key if isinstance(key, bytes) else key.public_bytes_raw()
    seen = _accepted.get(message)
    if seen is not None and seen.get(raw) == sig:
        return True  # this very signature under this very key on this very message
    try:
        obj = key if not isinstance(key, bytes) else Ed25519PublicKey.from_public_bytes(key)
        obj.verify(sig, message)
    except (InvalidSignature, ValueError):  # ValueError: 32 bytes that encode no point
        return False
    if seen is None:
        if len(_accepted) >= _MEMO_MESSAGES:
            del _accepted[next(iter(_accepted))]
        seen = _accepted[message] = {}
    seen[raw] = sig
    return True


def check_signatures(
    *,
    message: bytes,
    signatures: Mapping[int, bytes] | None,
    keys: Mapping[int, Ed25519PublicKey],
    survivors: Sequence[int],
    threshold: int,
    round_id: int,
    known: Sequence[int] = (),
) -> list[int]:
    """t valid signers among ``survivors``; ValueError if there are fewer than ``threshold``.

    The node's rule before it reveals anything (module docstring): t distinct
    members of S signed this very (run, r, S, D) under their pinned keys. ``survivors``:
    whose signatures count (ids the caller checked: a filter here, not validated again).
    ``known``: signers the caller need not verify (the node itself, if it signed this
    very list).
    """
    live = survivors if isinstance(survivors, frozenset) else frozenset(survivors)  # who counts
    signed = [j for j in sorted(set(known)) if j in live]
    rest = signatures or {}
    if signed:
        rest = {j: s for j, s in rest.items() if j not in signed}
    signed += valid_signers(message, rest, keys, live, need=threshold - len(signed))
    if len(signed) < threshold:
        raise ValueError(
            f"round {round_id}: {len(signed)} valid signatures by survivors on this survivor "
            f"list (signers {signed}), below threshold t = {threshold}: the server may have "
            "shown other clients another list; refused"
        )
    return signed


def check_view(
    *,
    client_id: int,
    round_id: int,
    peers: frozenset[int],
    threshold: int,
    min_survivors: int,
    survivors: Sequence[int],
    dropped: Sequence[int],
    graph=None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(S, D) sorted, if they may be signed or unmasked by ``client_id``; else ValueError.

    S and D must be disjoint, split the round's participants ``peers``, keep the
    client in S and leave at least t survivors and at least the round's survivors
    bound m (the m = n − f its noise share was sized for; 0 under central noise).
    Under the sparse graph ``graph`` (a :class:`~fedpriv.federation.secagg_topology.
    Sparse`), t counts the client's surviving neighbours, and S must be connected.
    """
    r = round_id
    live, gone = check_ids("survivors", survivors), check_ids("dropped", dropped)
    if gone and not set(gone).isdisjoint(live) and (both := sorted(set(live).intersection(gone))):
        raise ValueError(
            f"clients {both} are listed both as survivors and as dropped in round {r}: "
            "refused (their self-mask seed and pair masks together would unmask them)"
        )
    # Disjoint, so they split the participants iff the counts add up and both lie within.
    last = _last_split[0]  # every party of a process checks the round's one list: once
    if last and last[0] is peers and last[1] is live and last[2] is gone:
        split = last[3]
    else:
        split = len(live) + len(gone) == len(peers) and peers.issuperset(live)
        split = split and peers.issuperset(gone)
        _last_split[0] = (peers, live, gone, split)  # immutable: kept alive, ids not reused
    if not split or client_id not in live:
        raise ValueError(
            f"survivors {list(live)} and dropped {list(gone)} must split the round-{r} "
            f"participants {sorted(peers)}, with client {client_id} a survivor"
        )
    if graph is not None:
        if why := graph.own_problem(client_id, live):
            raise ValueError(f"round {r}: {why}: refused")
    elif len(live) < threshold:
        raise ValueError(f"{len(live)} survivors < threshold t = {threshold} in round {r}: refused")
    if len(live) < min_survivors:
        raise ValueError(
            f"{len(live)} survivors < {min_survivors}, the survivors bound m this node sized "
            f"its round-{r} noise share for: the sum would carry too little noise; refused"
        )
    return live, gone
