"""A secure-aggregation client's peers: the graph it derives, its threshold, its points.

:class:`PeerKeys` extends :class:`~fedpriv.federation.secagg_keys.ClientKeys` (the key
pairs and the pinned key book) with what the run's communication graph decides
(:mod:`fedpriv.federation.secagg_topology`): which peers the client agrees keys with
(all others, or its k neighbours under SecAgg+'s sparse graph), the threshold t it
expects the server to announce, the neighbourhood it expects, and the Shamir point
of each holder of its seed. Every one of them the client derives itself from public
values (the run id, the pinned key book and its config) and it refuses a server
message naming another (fail closed). The protocol is :mod:`fedpriv.federation.secagg`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv.federation.secagg_common import SecAggConfig, point, self_mask
from fedpriv.federation.secagg_graph import check_neighbourhood
from fedpriv.federation.secagg_keys import ClientKeys
from fedpriv.federation.secagg_topology import Sparse, topology_for

_MASK_TAG = b"fpSA"  # nonce domain tag: pair-mask keystreams and nothing else
_PLANS = 8  # holder sets whose plan a client keeps (one under the sparse graph)


@dataclass(frozen=True, kw_only=True)
class HolderPlan:
    """For one set of holders of a client's seed (sorted, the client among them): the
    Shamir points in holder order, the client's own position, the other holders with the
    sealing (encrypt, AD prefix) of each, and the pair-mask order (peers above the
    client first, ``up`` of them, then those below)."""

    xs: tuple[int, ...]
    own: int
    others: tuple[int, ...]
    seal: tuple[tuple[Callable, bytes], ...]
    up: int
    order: tuple[int, ...]
    streams: tuple[Callable, ...]  # the pair-mask ciphers in ``order``
    members: frozenset[int]  # the holders as a set: one object for every round's record


class PeerKeys(ClientKeys):
    """A client's keys with its run's graph and threshold rule (module docstring)."""

    def __init__(
        self,
        *,
        client_id: int,
        private_key_bytes: bytes | None = None,
        signing_key_bytes: bytes | None = None,
        config: SecAggConfig | None = None,
    ) -> None:
        super().__init__(
            client_id=client_id,
            private_key_bytes=private_key_bytes,
            signing_key_bytes=signing_key_bytes,
        )
        self.config = config or SecAggConfig()
        self._run_id: str | None = None  # the graph's public seed, with the key book
        self._graph: Sparse | None = None  # the run's sparse graph (None: complete)
        self._plans: dict[tuple[int, ...], HolderPlan] = {}  # holders -> mask's order of work
        self._senders_of: tuple = ()  # (holders, D, the other holders in S, sorted): latest

    def setup(
        self,
        public_keys: Mapping[int, bytes],
        *,
        verify_keys: Mapping[int, bytes],
        run_id: str | None = None,
    ) -> None:
        """Pin the key book (:meth:`ClientKeys.setup`). With ``run_id`` the client derives
        the run's communication graph from it and the book's digest
        (:func:`~fedpriv.federation.secagg_topology.topology_for`) and agrees keys
        with its neighbours only; without, the complete graph (every other client)."""
        self._run_id = None if run_id is None else str(run_id)
        super().setup(public_keys, verify_keys=verify_keys)
        if self._graph is not None:  # the holders are the run's: their plan, once per run
            self._holder_plan(self._graph.closed(self.client_id))

    def _peers_for(self, book: Mapping[int, bytes], digest: bytes) -> Iterable[int]:
        if self._run_id is not None:
            self._graph = topology_for(
                self.config, ids=book, run_id=self._run_id, book_digest=digest
            )
        if self._graph is None:
            return super()._peers_for(book, digest)
        return self._graph.neighbours(self.client_id)

    @property
    def graph(self) -> Sparse | None:
        """The run's sparse communication graph as this client derived it (``None``:
        the complete graph)."""
        return self._graph

    def check_threshold(self, participants: int, threshold: int | None) -> int:
        """This node's t for ``participants``; ValueError if the announced ``threshold``
        differs (in particular if a run setting tries to lower it below the node's floor).
        Under the sparse graph, t is the neighbourhood threshold the client derived."""
        if self._graph is not None:
            t, rule = self._graph.threshold, f"its neighbourhood of k = {self._graph.degree}"
        else:
            t, rule = self.config.effective_threshold(participants), "its rule"
        if threshold is not None and threshold != t:
            raise ValueError(
                f"threshold {threshold!r} announced for {participants} participants, but this "
                f"client's config {self.config} gives t = {t} for {rule} (floor from "
                "min_threshold_fraction included): refused"
            )
        return t

    def check_neighbourhood(self, announced: Sequence[int] | None) -> tuple[int, ...] | None:
        """This client's neighbours, if the server's announcement is the derived one;
        :class:`~fedpriv.federation.secagg_graph.NeighbourhoodMismatch` (a ValueError)
        if it names others, and ValueError if a neighbourhood is announced to a client
        on the complete graph or none to one on the sparse graph (``None`` then: the
        round's participants)."""
        if self._graph is None:
            if announced is not None:
                raise ValueError(
                    f"a neighbourhood was announced to client {self.client_id}, whose run "
                    "uses the complete graph: refused"
                )
            return None
        if announced is None:
            raise ValueError(
                f"no neighbourhood announced to client {self.client_id}, whose run uses the "
                "sparse graph: refused"
            )
        near = self._graph.neighbours(self.client_id)
        if announced is not near and tuple(announced) != near:  # else: the derived one
            check_neighbourhood(self._graph.graph, self.client_id, announced)
        return near

    def _pair_masks(
        self, peers: Sequence[int], round_id: int, n: int, streams: Sequence[Callable] = ()
    ) -> np.ndarray:
        # m_ij^r = ChaCha20 keystream, i.e. algorithms.ChaCha20(s_ij, nonce) encrypting zeros
        # with nonce = le32(block counter 1) ‖ tag ‖ le64(r). The AEAD yields exactly that
        # keystream (RFC 8439 §2.8; the test checks it) and reuses its OpenSSL context, 2× faster
        # per call; its 16-byte Poly1305 tag is dropped. The round id never enters the counter
        # word, else round r+1's stream would be round r's shifted by one block. One row per
        # peer, from one buffer: per-peer numpy calls cost more than the cipher. ``streams``:
        # the peers' ciphers in order, if looked up already (a holder plan's).
        nonce = _MASK_TAG + round_id.to_bytes(8, "little")
        zeros = bytes(8 * n)
        streams = streams or list(map(self._stream.__getitem__, peers))
        raw = b"".join([f(nonce, zeros, None) for f in streams])
        return np.frombuffer(raw, dtype="<u8").reshape(len(peers), n + 2)[:, :n]

    def _holder_plan(self, holders: tuple[int, ...]) -> HolderPlan:
        """The order of :meth:`~fedpriv.federation.secagg.SecAggClient.mask`'s work for
        the holders of this client's seed: fixed for the run under the sparse graph (its
        closed neighbourhood), per participant set under the complete graph (cached)."""
        if (plan := self._plans.get(holders)) is not None:
            return plan
        u = self.client_id
        if self._graph is None:
            xs = tuple(point(j) for j in holders)
        else:  # ranks in its closed neighbourhood, in holder order: 1..k + 1
            xs = tuple(self._graph.points(u).values())
        up = tuple(j for j in holders if j > u)
        down = tuple(j for j in holders if j < u)
        others = tuple(j for j in holders if j != u)
        plan = HolderPlan(
            xs=xs, own=holders.index(u), others=others, up=len(up), order=up + down,
            seal=tuple(self._seal[j] for j in others), members=frozenset(holders),
            streams=tuple(self._stream[j] for j in up + down),
        )  # fmt: skip
        if len(self._plans) >= _PLANS:
            self._plans.pop(next(iter(self._plans)))
        self._plans[holders] = plan
        return plan

    def _senders(
        self, holders: frozenset[int], gone: tuple[int, ...]
    ) -> tuple[frozenset[int], tuple[int, ...]]:
        """The holders other than this client not in D, as a set and sorted (the same every
        round while the holders and D are: kept)."""
        last = self._senders_of
        if last and last[0] is holders and last[1] == gone:
            return last[2], last[3]
        senders = holders.difference(gone, (self.client_id,))
        self._senders_of = (holders, gone, senders, tuple(sorted(senders)))
        return senders, self._senders_of[3]

    def _self_mask(self, seed: np.ndarray, round_id: int, n: int) -> np.ndarray:
        return self_mask(seed, round_id, n)
