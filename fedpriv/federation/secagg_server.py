"""The server's side of double-masking secure aggregation (:mod:`fedpriv.federation.secagg`).

It sees masked vectors, ciphertexts it cannot read, and the survivors' unmask
answers; from them it removes every self-mask and every pair mask with a dropped
client (Bonawitz et al. 2017, §4, the server's last step), leaving exactly the
survivors' sum in Z_{2^64}. Given the run's sparse graph (``graph``, SecAgg+:
:mod:`fedpriv.federation.secagg_topology`) every rule is per neighbourhood: a
survivor's shares and pair masks come from its neighbours, and a round whose
survivors are not connected in the graph, or leave some survivor fewer than t
surviving neighbours, is aborted before anything is revealed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice

import numpy as np

from fedpriv.federation import secagg_consistency as consistency
from fedpriv.federation import shamir
from fedpriv.federation.fixedpoint import FixedPointCodec
from fedpriv.federation.secagg_common import (
    SecAggAbort,
    SecAggConfig,
    UnmaskAnswer,
    check_ids,
    check_ring,
    check_u64,
    self_mask,
)
from fedpriv.federation.secagg_seeds import ShareColumn, column_of
from fedpriv.federation.secagg_topology import Sparse, Topology, round_topology

logger = logging.getLogger(__name__)


class SecAggServer:
    """Sums masked vectors and unmasks the sum with the survivors' answers.

    Per round: :meth:`unmask_plan` (who survived, or abort), :meth:`inboxes`
    (route the encrypted shares), :meth:`check_signatures` (the consistency
    round: the survivors' signatures on the list, forwarded with the unmask
    request), then :meth:`aggregate`. Each aggregated or
    aborted round is closed: :meth:`accept_late` then returns False and
    :meth:`aggregate` refuses it. With self-masks a late reply no longer
    unmasks its sender, but nothing may be released twice for a round.
    """

    def __init__(self, *, codec: FixedPointCodec, config: SecAggConfig | None = None,
                 graph: Sparse | None = None) -> None:  # fmt: skip
        self.codec = codec
        self.config = config or SecAggConfig()
        self.graph = graph  # the run's sparse graph; None: the complete graph
        self._closed: set[int] = set()  # rounds aggregated or aborted

    def missing(self, participants: Iterable[int], masked: Iterable[int]) -> list[int]:
        """Participants whose masked vector did not arrive, sorted."""
        return sorted(set(participants) - set(masked))

    def accept_late(self, round_id: int, client_id: int) -> bool:
        """Whether a reply of ``client_id`` for ``round_id`` may still be used (round open)."""
        check_u64("client_id", client_id)
        return check_u64("round_id", round_id) not in self._closed

    def _abort(self, r: int, why: str) -> SecAggAbort:
        self._closed.add(r)
        logger.info("secure aggregation aborts round %d: %s", r, why)
        return SecAggAbort(f"round {r}: {why}; nothing is released")

    def _open(self, round_id: int, participants: Sequence[int], masked: Iterable[int]):
        r = check_u64("round_id", round_id)
        if r in self._closed:
            raise ValueError(f"round {r} is closed; its late or repeated replies are refused")
        peers = check_ids("participants", participants)
        live = check_ids("masked", masked)
        if not set(live) <= set(peers) or len(live) > self.codec.max_summands:
            raise ValueError(
                f"masked must come from participants {list(peers)}, at most max_summands = "
                f"{self.codec.max_summands}; got {list(live)}"
            )
        if len(peers) < 2:
            raise self._abort(r, f"{len(peers)} participant(s): a sum of one is that vector")
        if self.graph is not None and peers != self.graph.ids:
            raise self._abort(r, "a sparse-graph round must ask every client of the run")
        return r, peers, live, self.topology(peers)

    def topology(self, participants: Sequence[int]) -> Topology:
        """The round's graph: the run's sparse one, or the complete graph over
        ``participants`` with t = :meth:`SecAggConfig.effective_threshold`."""
        t = self.config.effective_threshold(max(len(participants), 2))
        return round_topology(self.graph, participants, t)

    def unmask_plan(
        self, *, round_id: int, participants: Sequence[int], masked: Iterable[int]
    ) -> tuple[list[int], list[int]]:
        """(survivors, dropped) for the unmask request, or :class:`SecAggAbort` if < t
        survived (under the sparse graph: the survivors are not connected, or some
        survivor keeps fewer than t surviving neighbours)."""
        r, peers, live, hood = self._open(round_id, participants, masked)
        if len(live) < hood.threshold:
            t = hood.threshold
            raise self._abort(r, f"{len(live)} of {len(peers)} replied, below threshold t = {t}")
        if why := hood.problem(live):
            raise self._abort(r, why)
        return list(live), self.missing(peers, live)

    def check_signatures(
        self,
        *,
        round_id: int,
        participants: Sequence[int],
        survivors: Sequence[int],
        dropped: Sequence[int],
        signatures: Mapping[int, bytes],
        key_book: tuple[Mapping[int, bytes], Mapping[int, bytes]],
        book_digest: bytes | None = None,
    ) -> dict[int, bytes]:
        """t of the survivors' valid signatures on (run, r, S, D), the first in id order,
        to forward with the unmask request; :class:`SecAggAbort` (round closed) if fewer
        than t are valid.

        ``key_book`` is (public keys, verify keys) as broadcast at the key exchange;
        ``book_digest``, its :func:`~fedpriv.federation.secagg_consistency.book_digest`
        if the caller kept it (the book is fixed for the run; computed here otherwise).
        Each node checks the signatures itself before revealing anything
        (:mod:`fedpriv.federation.secagg_consistency`); checking them here too keeps
        a client's bad signature from costing the round while t good ones remain.
        """
        r, peers, live, hood = self._open(round_id, participants, survivors)
        t = hood.threshold
        if sorted(set(peers) - set(live)) != list(check_ids("dropped", dropped)):
            raise ValueError(f"round {r}: dropped {list(dropped)} must be participants \\ S")
        public, verify = key_book
        keys = {j: bytes(verify[j]) for j in live if j in verify}  # raw: verified once each
        if book_digest is None:
            book_digest = consistency.book_digest(public, verify)
        message = consistency.view_message(book_digest, r, live, dropped)
        if not hood.sparse:
            ok = consistency.valid_signers(message, signatures, keys, live, need=t)
            if len(ok) < t:
                raise self._abort(r, f"{len(ok)} valid signatures on the survivor list < t = {t}")
            return {j: bytes(signatures[j]) for j in ok}
        # Each survivor counts its own neighbours' signatures: verify every one (once).
        ok = set(consistency.valid_signers(message, signatures, keys, live))
        every = len(ok) == len(peers)  # all signed: each counts all its neighbours
        for u in live:
            near = hood.neighbours(u)
            if (got := len(near) if every else len(ok.intersection(near))) < t:
                raise self._abort(
                    r, f"{got} valid signatures by survivor {u}'s neighbours < t = {t}"
                )
        return {j: bytes(signatures[j]) for j in sorted(ok)}

    def forward(self, survivor: int, signatures: Mapping[int, bytes]) -> list[int]:
        """Whose :meth:`check_signatures` signatures go to ``survivor`` with its unmask
        request: all of them (complete graph: t), or t of its neighbours' (sparse)."""
        if self.graph is None:
            return sorted(signatures)
        near = filter(signatures.__contains__, self.graph.neighbours(survivor))
        return list(islice(near, self.graph.threshold))  # the first t, in neighbour order

    def inboxes(
        self, survivors: Sequence[int], shares: Mapping[int, Mapping[int, bytes]]
    ) -> dict[int, dict[int, bytes]]:
        """Route ``shares[u][v]`` (u's ciphertext for v) to survivor v, from survivors only
        (under the sparse graph, from v's surviving neighbours only)."""
        live = check_ids("survivors", survivors)
        hood = self.topology(live)
        alive = set(live)
        for u in live:
            if missing := alive.intersection(hood.neighbours(u)).difference(shares.get(u, {})):
                v = min(missing)
                raise ValueError(f"survivor {u} sent no encrypted share for survivor {v}")
        # The graph is symmetric: v's senders are its surviving neighbours.
        return {v: {u: shares[u][v] for u in hood.neighbours(v) if u in alive} for v in live}

    def aggregate(
        self,
        *,
        round_id: int,
        participants: Sequence[int],
        masked: Mapping[int, np.ndarray],
        answers: Mapping[int, UnmaskAnswer],
    ) -> np.ndarray:
        """Decoded float64 sum of the survivors' vectors.

        ``masked[u]`` is survivor u's y_u; ``answers[i]`` is survivor i's
        :meth:`~fedpriv.federation.secagg.SecAggClient.unmask` answer. Raises
        :class:`SecAggAbort` and closes the round if fewer than t survivors, or
        fewer than t answers, or (with dropouts) not every survivor answered,
        or some seed's shares are inconsistent: the sum would be uniform noise.
        """
        r, peers, live, hood = self._open(round_id, participants, masked)
        t, gone = hood.threshold, self.missing(peers, live)
        n = check_ring(f"masked[{live[0]}]", masked[live[0]]).size if live else 0
        total = np.zeros(n, dtype=np.uint64)
        for u in live:
            np.add(total, check_ring(f"masked[{u}]", masked[u], n), out=total)
        if len(live) < t:
            raise self._abort(r, f"{len(live)} of {len(peers)} replied, below threshold t = {t}")
        told = check_ids("answers", answers)
        alive, lost, heard = set(live), set(gone), set(told)
        if not heard <= alive:
            raise ValueError(f"round {r}: answers must come from survivors {list(live)}")
        if len(told) < t:
            raise self._abort(r, f"{len(told)} unmask answers, below threshold t = {t}")
        # Every pair mask with a dropped client comes from its surviving neighbours.
        silent = sorted({u for v in gone for u in hood.neighbours(v) if u in alive} - heard)
        if silent:
            raise self._abort(r, f"survivors {silent} did not reveal their masks with {gone}")
        for i in told:
            got, shares = answers[i], set(answers[i].shares)
            if lost:
                owe_shares = alive.intersection(hood.closed(i))
                owe_masks = lost.intersection(hood.neighbours(i))
            else:  # no one dropped: its whole closed neighbourhood survived
                owe_shares, owe_masks = set(hood.closed(i)), set()
            if not shares <= owe_shares or not set(got.lost) <= owe_masks:
                raise ValueError(
                    f"round {r}: client {i} must answer shares for survivors "
                    f"{sorted(owe_shares)} and masks for dropped {sorted(owe_masks)}; got "
                    f"{sorted(got.shares)}, {sorted(got.lost)}"
                )
            if shares != owe_shares or set(got.lost) != owe_masks:
                raise self._abort(r, f"client {i}'s unmask answer is incomplete")
            if (got.mask is None) != (not got.lost):
                raise ValueError(f"round {r}: client {i}'s mask sum must come with its lost")
        for seed in self._seeds(r, hood, told, live, answers).values():
            np.subtract(total, self_mask(seed, r, n), out=total)
        for i in told:  # each survivor's sum of its pair masks with the dropped
            if (m := answers[i].mask) is not None:
                np.subtract(total, check_ring(f"answers[{i}].mask", m, n), out=total)
        self._closed.add(r)
        return self.codec.decode(total)

    def _seeds(
        self,
        r: int,
        hood: Topology,
        told: Sequence[int],
        live: Sequence[int],
        answers: Mapping[int, UnmaskAnswer],
    ) -> dict[int, np.ndarray]:
        """Every survivor's seed b_u^r (all limbs): one matrix product per group of
        :func:`seed_groups`, the groups' Lagrange weights computed as one batch
        (:func:`~fedpriv.federation.shamir.reconstruct_many`); aborts naming a seed that cannot be
        recovered (too few shares, a malformed share, or extra shares off the polynomial)."""
        t = hood.threshold
        for i in told:
            shares = answers[i].shares
            if type(shares) is ShareColumn:  # one buffer: 40 bytes a share, checked whole
                bad = column_of(shares) is None
            else:
                bad = set(map(len, shares.values())) != {shamir.SHARE_BYTES}
            if bad:
                raise self._abort(
                    r, f"client {i}'s unmask answer holds a share that is not "
                    f"{shamir.SHARE_BYTES} bytes",
                )  # fmt: skip
        held = {i: answers[i].shares for i in told}  # holder -> {owner: its share}
        gathered = list(_gathered(hood, told, live, held, t, r, self._abort))
        try:  # one batch: the groups' Lagrange weights are computed together
            got = shamir.reconstruct_many([(pts, ys) for pts, _, ys in gathered], threshold=t)
        except ValueError as err:  # ShamirError included: a wrong or malformed share
            item, index = getattr(err, "item", None), getattr(err, "index", None)
            group = gathered[item][1] if item is not None else [u for g in gathered for u in g[1]]
            who = f"client {group[index[0]]}" if index else f"clients {group}"
            raise self._abort(r, f"the self-mask seed of {who} is unrecoverable: {err}") from err
        owners = [u for _, group, _ in gathered for u in group]
        return dict(zip(owners, (seed for seeds in got for seed in seeds), strict=True))


def _gathered(hood, told, live, held, t, r, abort):
    """(points, owners, ys) per group of :func:`seed_groups`: ys[k, g] the share at
    points[k] of owner g's seed, one row of LIMBS words."""
    groups = seed_groups(hood, told, live)
    for points, members in groups.items():
        if len(points) < t:
            raise abort(r, f"survivor {members[0][0]}'s seed has {len(points)} shares < t = {t}")
    # Every answer's shares in its own order, one buffer; where each (holder, owner) share
    # lies in it depends on the answers' orders alone: computed once while they repeat.
    whole = [column_of(held[i]) or (tuple(held[i]), b"".join(held[i].values())) for i in told]
    layout = tuple(owners for owners, _ in whole)
    index = _share_index(hood, tuple(told), tuple(live), layout, groups)
    raw = b"".join([blob for _, blob in whole])
    rows = np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(-1, shamir.LIMBS)
    for points, members in groups.items():
        yield points, [u for u, _ in members], rows[index[points]]


_last_index: list = [()]  # [((hood, told, live, layout), index)]: the latest, replaced whole


def forget_latest() -> None:
    """Drop the process's remembered latest round (its share layout, the survivor list's
    encoding and check): a run's end, so nothing of it stays referenced."""
    _last_index[0] = ()
    consistency.forget_latest()


def _share_index(hood, told, live, layout, groups) -> dict[tuple[int, ...], np.ndarray]:
    """{points: (points × owners) positions in the answers' buffer} for :func:`_gathered`:
    holder i's share of owner u lies at (shares before i's) + (u's place in i's answer)."""
    key = (told, live, layout)
    last = _last_index[0]
    if last and last[0][0] is hood and last[0][1:] == key:
        return last[1]  # the same answers' layout as the latest round's
    where, base = {}, 0
    for i, owners in zip(told, layout, strict=True):
        where[i] = dict(zip(owners, range(base, base + len(owners)), strict=True))
        base += len(owners)
    index = {}
    for points, members in groups.items():
        owners, holders = [u for u, _ in members], [hs for _, hs in members]
        rows = zip(*holders, strict=True)  # row k: each owner's holder at points[k]
        at = [[where[h][u] for u, h in zip(owners, row, strict=True)] for row in rows]
        index[points] = np.array(at, dtype=np.intp).reshape(len(points), len(owners))
    _last_index[0] = ((hood, *key), index)
    return index


def seed_groups(
    hood: Topology, told: Sequence[int], live: Sequence[int]
) -> dict[tuple[int, ...], list[tuple[int, tuple[int, ...]]]]:
    """Survivors grouped by the Shamir points of the answers holding their seed's shares:
    {points: [(survivor, its holders in point order)]}.

    Each group costs one Lagrange computation (cached per point set) and one matrix
    product for all its seeds. Under the complete graph every answer holds a share of
    every survivor's seed at its own point: one group. Under the sparse graph a
    survivor's holders are its answering neighbours, at their ranks in its closed
    neighbourhood: the survivors all of whose neighbours answered form one group
    (:mod:`fedpriv.federation.secagg_topology`), one more per pattern of silent ones.
    """
    heard = set(told)
    groups: dict[tuple[int, ...], list[tuple[int, tuple[int, ...]]]] = {}
    every_rank: dict[int, tuple[int, ...]] = {}
    for u in live:
        everyone = hood.closed(u)
        if hood.sparse and heard.issuperset(everyone):  # all answered: ranks 1..k + 1
            holders, n = everyone, len(everyone)
            points = every_rank.get(n) or every_rank.setdefault(n, tuple(range(1, n + 1)))
        else:
            holders = tuple(h for h in everyone if h in heard)
            points = tuple(hood.point(u, h) for h in holders)
        groups.setdefault(points, []).append((u, holders))
    return groups
