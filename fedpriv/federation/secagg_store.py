"""The server's copy of each client's sealed seed shares, kept across a run's rounds.

A client seals its self-mask seeds' shares a batch of rounds at a time
(:mod:`fedpriv.federation.secagg_seeds`) and uploads the sealed batch, one message per
holder, with its first masked input of the batch. The server keeps the latest batch of
each client, forwards each sealed message to its holder once (the holder keeps the
shares it opens), and asks a client to send its batch again when it holds none
covering the round (a client whose first upload of the batch was lost). Everything here
is ciphertext the server cannot read, with a clear header (first round, rounds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fedpriv.federation.secagg_common import MaskedInput
from fedpriv.federation.secagg_seeds import span_of


class SealedStore:
    """Each client's latest sealed batch {holder: sealed}, its span, and the forwards done."""

    def __init__(self) -> None:
        self._latest: dict[int, tuple[int, int, dict[int, bytes]]] = {}  # owner -> (s, n, sealed)
        self._given: dict[int, set[int]] = {}  # owner -> holders that used its latest batch

    def _covers(self, owner: int, r: int) -> bool:
        got = self._latest.get(owner)
        return got is not None and got[0] <= r < got[0] + got[1]

    def resend(self, r: int, asked: Iterable[int]) -> frozenset[int]:
        """The asked clients whose sealed batch covering round r the server lacks."""
        return frozenset(u for u in asked if not self._covers(u, r))

    def take(self, r: int, masked: Mapping[int, MaskedInput]) -> dict[int, dict[int, bytes]]:
        """Keep the sealed batches uploaded with round r's masked inputs; return every
        sender's sealed batch covering r {owner: {holder: sealed}}.

        Uploads come screened (:func:`~fedpriv.federation.replies.check_masked`: one
        header covering r). ValueError naming a sender whose header is malformed or who
        has no batch covering r: its input could not be unmasked, and the round releases
        nothing.
        """
        for u, m in masked.items():
            if not m.shares:
                continue
            # Screened uploads (replies.check_masked): one header for all, read once.
            start, count = span_of(next(iter(m.shares.values())))
            if not start <= r < start + count:
                raise ValueError(f"client {u}'s sealed shares do not cover round {r}")
            if self._latest.get(u, (None,))[0] != start:
                self._given[u] = set()  # a new batch: no holder has it yet
            self._latest[u] = (start, count, dict(m.shares))
        if missing := sorted(u for u in masked if not self._covers(u, r)):
            raise ValueError(f"client {missing[0]} has no sealed shares covering round {r}")
        return {u: self._latest[u][2] for u in masked}

    def inboxes(
        self, survivors: Iterable[int], sealed: Mapping[int, Mapping[int, bytes]]
    ) -> dict[int, dict[int, bytes]]:
        """Each survivor v's inbox {owner u: u's sealed batch for v}, from surviving owners
        whose batch v has not used yet (u's batch names its holders: its neighbours)."""
        live = list(survivors)
        alive, out = set(live), {v: {} for v in live}
        for u in live:
            box = sealed[u]
            for v in alive.intersection(box.keys() - self._given[u]):
                out[v][u] = box[v]
        return out

    def used(self, inboxes: Mapping[int, Mapping[int, bytes]], answered: Iterable[int]) -> None:
        """The holders that answered opened what they were sent: not sent again."""
        given = self._given
        for v in answered:
            for u in inboxes.get(v, ()):
                given[u].add(v)
