"""Secure aggregation by double masking: the server learns only the survivors' sum.

Bonawitz et al. 2017, "Practical Secure Aggregation for Privacy-Preserving Machine
Learning" (CCS; §4's double masking and the protocol's rounds AdvertiseKeys,
MaskedInputCollection, ConsistencyCheck and Unmasking), with one design change: the
pairwise masks are per round and a dropped client's are revealed by the survivors
themselves, so pairwise secret keys are never secret-shared (and shares of the
self-mask seeds travel with the masked input instead of in a ShareKeys round).

Keys (once per run; :mod:`fedpriv.federation.secagg_keys`). Each client u uploads an
X25519 (RFC 7748) public key pk_u and an Ed25519 (RFC 8032) verify key vk_u and pins
the key book {v: (pk_v, vk_v)} the server broadcasts (:meth:`SecAggClient.setup`); by
HKDF-SHA256 of the X25519 secret with each peer v it derives a mask key s_uv and share
keys k_{u→v}, k_{v→u}. A later message naming another key is refused
(:class:`SecAggKeyError`).

Round r, participants P (n = |P|), threshold t = :meth:`SecAggConfig.effective_threshold`
(n): the run's rule (``secagg-threshold``) raised to the node's own floor
(``secagg-min-threshold``, at least a strict majority), never lowered by the run; a node
refuses a round whose announced t differs (:meth:`SecAggClient.check_threshold`). Under
distributed noise the node also knows m = n − f, the survivors its noise share was
sized for (:mod:`fedpriv.privacy.distributed`).

1. Masked input. u encodes x_u in Z_{2^64} (:class:`~fedpriv.federation.fixedpoint.
   FixedPointCodec`) and masks it with its round-r self-mask seed b_u^r, 5 uniform
   elements of GF(2^61 − 1) (≈ 305 bits) from ``secrets`` (never from a seed), split
   t-of-n (Shamir 1979, :mod:`fedpriv.federation.shamir`; party v holds f(v + 1)):

       y_u = x_u + PRG(b_u^r) + Σ_{v∈P, v>u} m_uv^r − Σ_{v∈P, v<u} m_uv^r   (mod 2^64)

   (Bonawitz §4, "double masking"). The seeds of a batch of rounds are drawn and
   split at once and each holder's shares sealed in one ChaCha20-Poly1305 (RFC 8439)
   message under k_{u→v}, AD (u, v, first round, rounds), uploaded with the batch's
   first masked input (:mod:`fedpriv.federation.secagg_seeds`; one round a batch is
   the original schedule). PRG(·) and m_uv^r are ChaCha20 keystreams under b_u^r resp.
   s_uv with a nonce holding a domain tag and r (the self-mask key is HKDF-SHA256 of
   b_u^r), so round-r pair masks say nothing about any other round. u keeps its own
   share and forgets b_u^r once used.
2. Consistency (one exchange, every round; :mod:`fedpriv.federation.secagg_consistency`).
   S = those whose y arrived, D = P \\ S. If |S| < t (or |S| < m) the round is aborted
   (:class:`SecAggAbort`) and nothing is released. Otherwise each u ∈ S receives (S, D)
   and signs (digest of the pinned key book, r, S, D) with its Ed25519 key
   (:meth:`SecAggClient.sign_survivors`), if S ∩ D = ∅, S ∪ D = P, u ∈ S, |S| ≥ t,
   |S| ≥ m and it signed no other list for round r. Fewer than t valid signatures by
   members of S abort the round (:meth:`SecAggServer.check_signatures`).
3. Unmask (one exchange, every round). Each u ∈ S receives (S, D), the signatures and
   the ciphertexts addressed to it; it refuses unless the checks of step 2 pass, (S, D)
   is the list it signed (if it signed one), at least t distinct members of S signed
   this very (S, D) under their pinned verify keys, and it answered no unmask of round r;
   else it returns its shares of b_w^r for every w ∈ S and the sum of its signed round-r
   pair masks with every v ∈ D, one ring vector however many dropped (the server needs
   only the sum over S, and a sum tells no more than its terms; :meth:`SecAggClient.
   unmask`).
4. The server needs answers from ≥ t survivors (all of them if D ≠ ∅, to remove
   every pair mask with D), reconstructs every b_w^r at once (one matrix product mod p
   for the seeds whose shares come from the same answers, the Lagrange weights of all
   such holder sets in one batch, checking the extra shares lie on the same polynomial
   by random combinations: a wrong one passes with probability ≤ 2^-60), and outputs
   Σ_{u∈S} y_u − Σ_{u∈S} PRG(b_u^r) − (pair masks with D) = Σ_{u∈S} x_u exactly in
   Z_{2^64} (:meth:`SecAggServer.aggregate`).

Threat model. A server that may deviate from the protocol (the coordinator also
writes the run config), possibly colluding with c clients (who hand it their keys,
shares and inputs), with 2t > n + c (the default strict majority: c = 0 for odd n,
c ≤ 1 for even n; a node's higher ``secagg-min-threshold`` buys more). Honest clients
answer only (S, D) that t members of S signed, and each signs one list per round, so
at most one list per round gets t signatures: all honest answers of a round concern
the same (S, D), and a server that shows different survivor lists to different
clients (to collect t shares of b_u^r from clients told u ∈ S and u's pair masks from
others told u ∈ D, which unmasks y_u alone) gets nothing (the round aborts). On that
one list the argument is the honest-but-curious one: a survivor's y_u stays masked by
pair masks with the other honest survivors, never revealed; a dropped client's — or a
straggler's late — y_u is masked by PRG(b_u^r), of which honest clients release no
share once u is in D, so the server and colluders hold at most t − 1 shares
(independent of b_u^r); each honest client answers one unmask per round, with
disjoint S and D. Late replies are refused anyway (:meth:`SecAggServer.accept_late`).
What the server still controls: which uploads count (down to |S| = max(t, m): the
sum covers at least max(t, m) inputs and m noise shares), and aborting any round. What
remains open: the key book at set-up has no PKI, so the pins stop a *later* key
substitution but not a book forged at set-up, unless the deployment's node
authentication binds node keys to hospitals (docs/explanation/trust-model.md). Keys
and seeds come from the OS CSPRNG: every mask cancels exactly, so the sum depends on
the inputs alone.

Sparse graph (SecAgg+, Bell et al. CCS 2020; :mod:`fedpriv.federation.secagg_topology`).
For a large K, P above becomes u's k neighbours N(u) in a random Harary graph every
client derives from the run id and the pinned key book: keys, pair masks and the
shares of b_u^r (t-of-(k + 1) within N(u) ∪ {u}) stay in the neighbourhood. Step 2
also refuses an S not connected in the graph or leaving u fewer than t surviving
neighbours, and u counts t of its neighbours' signatures; in step 3 u reveals only
its surviving neighbours' shares and the sum of its masks with dropped neighbours. The argument
holds per neighbourhood, 2t > k + c_u for c_u colluding neighbours, which the graph's
(k, t) make fail with probability ≤ 2^-σ (⌊γK⌋ colluders, ⌊δK⌋ dropouts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from fedpriv.federation import secagg_consistency as consistency
from fedpriv.federation import shamir
from fedpriv.federation.fixedpoint import FixedPointCodec, SecAggOverflowError, sum_plain
from fedpriv.federation.secagg_common import (
    ClientRound,
    MaskedInput,
    SecAggAbort,
    SecAggConfig,
    SecAggKeyError,
    UnmaskAnswer,
    check_ids,
    check_u64,
)
from fedpriv.federation.secagg_peers import PeerKeys
from fedpriv.federation.secagg_seeds import SeedBatches, ShareColumn
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


class SecAggClient(PeerKeys, SeedBatches):
    """One client's side: pinned keys and peers (:class:`~fedpriv.federation.secagg_peers.
    PeerKeys`), double masking, the signed survivor list, the unmask answer.

    ``private_key_bytes`` and ``signing_key_bytes`` (32 raw bytes each) are for tests;
    otherwise both keys come from the OS CSPRNG (module docstring). ``config`` fixes the
    threshold rule and this node's floor (:meth:`SecAggConfig.effective_threshold`), which
    the server must announce, and the targets of SecAgg+'s sparse graph, which the client
    derives itself once :meth:`setup` is given the run id.
    """

    def __init__(self, **keys) -> None:
        super().__init__(**keys)  # client_id, private and signing key bytes, config: PeerKeys
        self._init_batches()
        self._rounds: dict[int, ClientRound] = {}
        self._answered: set[int] = set()  # rounds whose unmask this client answered
        self._views: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # signed (S, D)
        self._signed: dict[int, tuple[tuple, bytes]] = {}  # round -> (its (S, D), its bytes)

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
        min_survivors: int | None = None,
        neighbours: Sequence[int] | None = None,
        resend: bool = True,
        rounds_left: int | None = None,
    ) -> MaskedInput:
        """Step 1: y_u and the encrypted shares of a fresh b_u^r (module docstring).

        ``noise``: this client's int64 noise share (:mod:`fedpriv.privacy.distributed`),
        added in the ring before any mask. ``min_survivors``: the m = n − f it was
        sized for; no survivor list shorter than m is signed or unmasked later.

        ``threshold``, if given (the server's announcement), must equal this client's
        :meth:`check_threshold`; ``public_keys``, if given, the pinned ones; ``neighbours``
        (announced under the sparse graph) the derived ones (:meth:`check_neighbourhood`),
        the participants then every client of the run. Once per round: two vectors
        under one mask reveal their difference, so retry with a fresh round id.

        b_u^r: of the batch covering r or a new one (:mod:`~fedpriv.federation.secagg_seeds`;
        at most ``rounds_left`` rounds, the server's hint), sealed shares sent if the batch
        is new or ``resend`` (the server lacks them).
        """
        job = self._begin(
            vector, round_id=round_id, participants=participants, codec=codec,
            threshold=threshold, public_keys=public_keys, noise=noise,
            min_survivors=min_survivors, neighbours=neighbours,
        )  # fmt: skip
        r, holders, t, plan = job[0], job[1], job[2], job[-1]
        batch = self._covering(r, holders, t)
        if fresh := batch is None:
            # The batch's seeds: OS CSPRNG, independent; row k: holders[k]'s shares.
            seeds = shamir.draw_seeds(self._batch_count(r, rounds_left))
            raw = shamir.to_bytes(shamir.split(seeds, xs=plan.xs, threshold=t))
            batch = self._new_batch(r, holders, t, plan, seeds, raw)
        return self._finish(job, batch, send=fresh or resend)

    def _begin(self, vector, *, round_id, participants, codec, threshold=None,
               public_keys=None, noise=None, min_survivors=None, neighbours=None):  # fmt: skip
        """:meth:`mask`'s checks and encoding: (r, holders, t, m, encoding, holder plan)."""
        r = check_u64("round_id", round_id)
        peers = check_ids("participants", participants)
        near = self.check_neighbourhood(neighbours)
        holders = peers if near is None else self._graph.closed(self.client_id)
        self.check_keys(holders, public_keys)
        if self.client_id not in peers or not 2 <= len(peers) <= codec.max_summands:
            raise ValueError(
                f"participants must include client {self.client_id} and number in "
                f"[2, {codec.max_summands}] (max_summands); got {list(peers)}"
            )
        if near is not None and peers != self._graph.ids:
            n = self._graph.graph.size
            raise ValueError(f"a sparse-graph round asks every client ({n}); got {len(peers)}")
        t = self.check_threshold(len(peers), threshold)
        m = 0 if min_survivors is None else check_u64("min_survivors", min_survivors)
        if m > len(peers):
            raise ValueError(f"min_survivors must lie in [0, {len(peers)}]; got {m}")
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
        # Points, sealing keys, mask order: once per run.
        return r, holders, t, m, out, self._holder_plan(holders)

    def _finish(self, job: tuple, batch, *, send: bool) -> MaskedInput:
        """:meth:`mask` from :meth:`_begin`'s ``job`` and the seed batch covering its round."""
        r, _, t, m, out, plan = job
        seed, own = self._use(batch, r)
        out += self._self_mask(seed, r, out.size)
        masks = self._pair_masks(plan.order, r, out.size, plan.streams)
        # uint64 sums wrap mod 2^64, which is the ring's addition.
        out += masks[: plan.up].sum(axis=0, dtype=np.uint64)
        out -= masks[plan.up :].sum(axis=0, dtype=np.uint64)
        self._rounds[r] = ClientRound(plan.members, out.size, t, own, m)
        return MaskedInput(vector=out, shares=dict(batch.sealed) if send else {}, round_id=r)

    def _view(self, r: int, survivors: Sequence[int], dropped: Sequence[int]):
        """The round and its (S, D) if this client may sign or answer them (else ValueError)."""
        if r not in self._rounds:
            raise ValueError(f"client {self.client_id} never masked for round {r}")
        rnd = self._rounds[r]
        signed = self._views.get(r)
        if signed and signed == (check_ids("survivors", survivors), check_ids("dropped", dropped)):
            return rnd, signed  # the very list it checked and signed: checked already
        everyone = rnd.peers if self._graph is None else self._graph.id_set
        view = consistency.check_view(
            client_id=self.client_id, round_id=r, peers=everyone, threshold=rnd.threshold,
            min_survivors=rnd.min_survivors, survivors=survivors, dropped=dropped,
            graph=self._graph,
        )  # fmt: skip
        if self._views.get(r, view) != view:
            why = f"already signed another survivor list for round {r}: refused"
            raise ValueError(f"client {self.client_id} {why}")
        return rnd, view

    def sign_survivors(
        self, *, round_id: int, survivors: Sequence[int], dropped: Sequence[int]
    ) -> bytes:
        """The consistency round: this client's Ed25519 signature on (run, r, S, D).

        One list per round: the same list again gets the same signature, any other
        is refused; so are lists this client would not unmask (:func:`~fedpriv.
        federation.secagg_consistency.check_view`: disjoint, splitting the round's
        participants, this client in S, |S| ≥ t and |S| ≥ m; under the sparse graph
        S connected and t of its neighbours in S).
        """
        r = check_u64("round_id", round_id)
        _, view = self._view(r, survivors, dropped)
        self._views[r] = view  # committed before the signature leaves this client
        return self._signer.sign(self._message(r, *view))

    def _message(self, r: int, live: tuple[int, ...], gone: tuple[int, ...]) -> bytes:
        """The signed bytes of (run, r, S, D), kept for the round's list this client signed."""
        kept = self._signed.get(r)
        if kept is not None and kept[0] == (live, gone):
            return kept[1]
        message = consistency.view_message(self._digest, r, live, gone)
        if self._views.get(r) == (live, gone):
            self._signed = {r: ((live, gone), message)}  # the latest round's only
        return message

    def unmask(
        self,
        *,
        round_id: int,
        survivors: Sequence[int],
        dropped: Sequence[int],
        n: int,
        inbox: Mapping[int, bytes],
        signatures: Mapping[int, bytes] | None,
        public_keys: Mapping[int, bytes] | None = None,
    ) -> UnmaskAnswer:
        """Step 2: shares of b_w^r for every survivor w, and the sum of the signed pair
        masks with every dropped v (under the sparse graph: its neighbours among them,
        and itself), with ``lost`` naming those v.

        ``inbox[w]`` is survivor w's encrypted share for this client;
        ``signatures[j]`` is survivor j's :meth:`sign_survivors` signature on this
        very (S, D). Answers once per round, only for a round this client masked,
        only if ``survivors`` and ``dropped`` pass :meth:`sign_survivors`'s checks,
        are the list this client signed (if it signed one), and at least t distinct
        survivors signed them under their pinned keys (under the sparse graph, t of
        its own neighbours: it verifies O(k) signatures). Whether a peer really
        dropped cannot be checked here; that every honest survivor was shown the
        same list can (module docstring).
        """
        r = check_u64("round_id", round_id)
        if r in self._answered:
            raise ValueError(
                f"client {self.client_id} already answered the unmask of round {r}: a second "
                "request is refused"
            )
        rnd, (live, gone) = self._view(r, survivors, dropped)
        self.check_keys(rnd.peers, public_keys)
        if check_u64("n", n) != rnd.size:
            raise ValueError(f"n must equal the round-{r} vector length {rnd.size}; got {n}")
        # S and D split the participants (checked): the holders in S are those not in D.
        senders, order = self._senders(rnd.peers, gone)
        if not senders.issuperset(inbox):
            raise ValueError(
                f"inbox must hold sealed shares from other survivors holding one only "
                f"{sorted(senders)}; got {sorted(inbox)}"
            )
        sparse = self._graph is not None
        members = senders if sparse else live  # the sparse graph: neighbours only
        consistency.check_signatures(
            message=self._message(r, live, gone), signatures=signatures,
            keys=self._vpinned, survivors=members, threshold=rnd.threshold, round_id=r,
            known=[self.client_id] if r in self._views and not sparse else [],  # signed it
        )  # fmt: skip
        own, held = rnd.own_share, self._held_shares(r, order, inbox)
        shares = ShareColumn((self.client_id, *order), own + held)  # its own share first
        # Commit: from here on this round's answer is out, and no second one will follow.
        self._answered.add(r)
        self._views[r] = (live, gone)
        rnd.own_share = None
        self._forget(r)
        lost = tuple(sorted(rnd.peers.intersection(gone))) if gone else ()
        if not lost:
            return UnmaskAnswer(shares=shares)
        # As they stay in Σ y: +m_uv for v > u, −m_uv for v < u (uint64 wraps mod 2^64).
        masks, below = self._pair_masks(lost, r, rnd.size), sum(j < self.client_id for j in lost)
        mask = masks[below:].sum(axis=0, dtype=np.uint64) - masks[:below].sum(
            axis=0, dtype=np.uint64
        )
        return UnmaskAnswer(shares=shares, lost=lost, mask=mask)

    def export_state(self) -> tuple[bytes, str]:
        """Private key, signing key, pinned key book, run id and round bookkeeping, for
        stateless runtimes.

        A Flower client is rebuilt from its node state for every message; the
        pins and the once-per-round rules (one masked input, one signed list, one
        unmask answer) must survive that, so they travel with the key. So do the
        signing key, pair keys, own shares, unused seeds and held shares: as secret
        as the private key, in the same node-local state. The graph is derived again.
        """
        rounds = {str(r): x.state() for r, x in self._rounds.items()}
        views = {str(r): [list(s), list(d)] for r, (s, d) in self._views.items()}
        state = {"rounds": rounds, "answered": sorted(self._answered), "views": views}
        state.update(self._batches_state(), run=self._run_id)
        return self._sk.private_bytes_raw(), json.dumps({**state, **self._keys_state()})

    @classmethod
    def restore(
        cls,
        *,
        client_id: int,
        private_key_bytes: bytes,
        book: str,
        config: SecAggConfig | None = None,
    ) -> SecAggClient:
        """A client from :meth:`export_state` (its graph derived again under ``config``)."""
        data = json.loads(book) if book else {}
        client = cls(
            client_id=client_id,
            private_key_bytes=private_key_bytes,
            config=config,
            signing_key_bytes=bytes.fromhex(data["signing"]) if "signing" in data else None,
        )
        client._rounds = {int(r): ClientRound.of(v) for r, v in data.get("rounds", {}).items()}
        client._answered = set(data.get("answered", []))
        client._views = {
            int(r): (tuple(s), tuple(d)) for r, (s, d) in data.get("views", {}).items()
        }
        client._run_id = data.get("run")
        client._load_batches(data)
        client._load_keys(data)
        return client
