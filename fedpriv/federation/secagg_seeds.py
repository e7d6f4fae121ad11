"""Self-mask seeds shared a batch of rounds at a time: one sealed message per holder.

Bonawitz et al. 2017 (§4) share each round's fresh self-mask seed b_u^r with its
holders in that round: one ChaCha20-Poly1305 seal by the owner and one open by the
holder per directed edge and round. Under SecAgg+'s graph at K = 1,000 (k ≈ 200) that
is about 400,000 calls a round, more than the round's pair masks. Here a client draws
the seeds of ``count`` consecutive rounds [s, s + count) at once, each a fresh
independent draw from the OS CSPRNG as before, splits each t-of-(its holders) as
before, and seals holder v's ``count`` shares in one message under k_{u→v}: nonce
:func:`~fedpriv.federation.secagg_common.share_nonce` (s), associated data
(u, v, s, count), the header (s, count) in clear before the ciphertext. The server
keeps the sealed batches and forwards each to its holder once; the holder opens it
when it first needs one of its shares and keeps the shares in its node state.

What does not change: a holder reveals its share of b_w^r only in round r's unmask,
once, only if w is in the survivor list of round r that it signed and that t
survivors signed. So in each round every honest holder releases either shares of
b_w^r (w ∈ S) or its pair masks with w (w ∈ D), never both, as before (the argument in
:mod:`fedpriv.federation.secagg`). What changes, and why each is harmless:

- holders hold shares of seeds of rounds to come; they reveal none before its round,
  and a share bound to round r (its place in the batch, authenticated) is never
  revealed in another round;
- the server may collect t shares of b_w^r before it asks w to mask round r (by
  running round r's unmask with w listed among the survivors): w's y_w^r is then still
  hidden by its pair masks with its honest neighbours, which no honest client reveals
  in round r, w being in the one list of round r that can gather t signatures;
- a holder's node state holds up to count − 1 future shares per neighbour: whoever
  reads the state of t holders learns the seeds of rounds not yet masked, as whoever
  reads one node's state learns its keys. ``secagg-seed-batch`` = 1 keeps one round
  per batch (the original schedule).

A batch is bound to its holders and threshold: a round whose holders or t differ from
those of the batch covering it is refused, so runs whose participants change from
round to round (participation below 1) share one round per batch. A client never
seals two batches covering one round, so no nonce is ever reused under a key.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np
from cryptography.exceptions import InvalidTag

from fedpriv.federation import shamir
from fedpriv.federation.secagg_common import MAX_SEED_BATCH, share_nonce

_SPAN = struct.Struct(">QH")  # a sealed batch's clear header: its first round, its rounds
SPAN_BYTES = _SPAN.size
TAG_BYTES = 16  # Poly1305


def span_of(sealed: bytes) -> tuple[int, int]:
    """(first round s, rounds) of a sealed batch, from its clear header; ValueError if
    the header or the length is malformed (the header is authenticated as AD on opening)."""
    if not isinstance(sealed, bytes | bytearray | memoryview) or len(sealed) < SPAN_BYTES:
        raise ValueError("a sealed batch of shares must be bytes with a 10-byte header")
    start, count = _SPAN.unpack_from(sealed)
    size = SPAN_BYTES + count * shamir.SHARE_BYTES + TAG_BYTES
    if not 1 <= count <= MAX_SEED_BATCH or start + count > 2**64 or len(sealed) != size:
        raise ValueError(
            f"a sealed batch of rounds [{start}, {start + count}) must cover 1 to {MAX_SEED_BATCH} "
            f"rounds in {size} bytes; got {len(sealed)}"
        )
    return start, count


@dataclass
class SeedBatch:
    """An owner's batch: its seeds (secret; each forgotten once its round is masked), its
    own share of each, the sealed batch for each other holder (public), and the holders
    and threshold it was split for."""

    start: int
    holders: tuple[int, ...]
    threshold: int
    seeds: list[np.ndarray | None]
    own: list[bytes | None]
    sealed: dict[int, bytes]

    @property
    def end(self) -> int:
        return self.start + len(self.seeds)

    def covers(self, r: int) -> bool:
        return self.start <= r < self.end

    def state(self) -> list:
        """A JSON-able form, read back by :meth:`of` (node-local state: it holds seeds)."""
        seeds = [None if s is None else shamir.to_bytes(s).hex() for s in self.seeds]
        sealed = {str(v): c.hex() for v, c in self.sealed.items()}
        return [self.start, list(self.holders), self.threshold, seeds,
                [None if s is None else s.hex() for s in self.own], sealed]  # fmt: skip

    @classmethod
    def of(cls, v: list) -> SeedBatch:
        seeds = [None if s is None else shamir.from_bytes(bytes.fromhex(s)) for s in v[3]]
        return cls(
            start=int(v[0]), holders=tuple(int(j) for j in v[1]), threshold=int(v[2]),
            seeds=seeds, own=[None if s is None else bytes.fromhex(s) for s in v[4]],
            sealed={int(j): bytes.fromhex(c) for j, c in v[5].items()},
        )  # fmt: skip


class ShareColumn(Mapping):
    """A holder's unmask shares in one buffer: ``owners[k]``'s share at bytes [40k, 40k + 40).

    What :meth:`~fedpriv.federation.secagg.SecAggClient.unmask` answers: a read-only
    mapping owner → share, as a dict of them would be, whose owners and buffer the server
    reads whole (a round has K·k shares) rather than share by share.
    """

    __slots__ = ("_at", "blob", "owners")

    def __init__(self, owners: tuple[int, ...], blob: bytes) -> None:
        if type(blob) is not bytes or len(blob) != shamir.SHARE_BYTES * len(owners):
            raise ValueError(f"{len(owners)} shares take {shamir.SHARE_BYTES} bytes each")
        if len(set(owners)) != len(owners):
            raise ValueError(f"a column names each owner once; got {list(owners)}")
        for name, value in (("owners", tuple(owners)), ("blob", blob), ("_at", None)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a ShareColumn is read-only: {name} cannot be set")

    def __getitem__(self, owner: int) -> bytes:
        if self._at is None:  # built on first lookup: the server reads the buffer whole
            places = range(0, len(self.blob), shamir.SHARE_BYTES)
            object.__setattr__(self, "_at", dict(zip(self.owners, places, strict=True)))
        at = self._at[owner]
        return self.blob[at : at + shamir.SHARE_BYTES]

    def __iter__(self):
        return iter(self.owners)

    def __len__(self) -> int:
        return len(self.owners)

    def __repr__(self) -> str:
        return f"ShareColumn(owners={list(self.owners)})"  # never the shares themselves


def column_of(shares: object) -> tuple[tuple[int, ...], bytes] | None:
    """(owners, buffer) of a well-formed :class:`ShareColumn` (40 bytes a share, checked
    again here), else ``None``: read share by share, with every check."""
    if type(shares) is not ShareColumn:
        return None
    owners, blob = shares.owners, shares.blob
    ok = type(owners) is tuple and type(blob) is bytes
    return (owners, blob) if ok and len(blob) == shamir.SHARE_BYTES * len(owners) else None


class SeedBatches:
    """A client's batches as owner, and the shares it holds as holder (module docstring).

    Mixed into :class:`~fedpriv.federation.secagg.SecAggClient`, which provides
    ``client_id``, ``config.seed_batch`` and the pair keys ``_open`` (decrypt, AD prefix).
    """

    def _init_batches(self) -> None:
        self._batches: dict[int, SeedBatch] = {}  # start -> its batch, while rounds remain
        self._sealed_upto = 0  # end of the latest batch sealed: no new batch starts below
        # (first round, end) -> ({owner: row}, shares: row's bytes, 40 per round, uint8).
        self._held: dict[tuple[int, int], tuple[dict[int, int], np.ndarray]] = {}
        self._spans: dict[int, tuple[int, int]] = {}  # owner -> the span of its held batch
        self._answered_upto = 0  # rounds below were answered or passed: no share kept
        self._rows_of: tuple = ()  # _held_shares' latest senders and their rows in _held

    def _covering(self, r: int, holders: tuple[int, ...], t: int) -> SeedBatch | None:
        """The batch covering round r (``None``: a new one starts at r); ValueError if its
        holders or threshold differ, or r lies in a batch already used up."""
        for start in [s for s, b in self._batches.items() if b.end <= r]:
            del self._batches[start]  # ended: its unused seeds and sealed shares go
        for batch in self._batches.values():
            if batch.covers(r):
                if batch.holders != holders or batch.threshold != t:
                    raise ValueError(
                        f"client {self.client_id} shared its round-{r} seed with holders "
                        f"{list(batch.holders)} at t = {batch.threshold}; the round asks "
                        f"{list(holders)} at t = {t}: refused"
                    )
                return batch
        if r < self._sealed_upto:
            raise ValueError(
                f"client {self.client_id} already sealed seeds up to round "
                f"{self._sealed_upto - 1}; round {r} comes too late: refused"
            )
        return None

    def _batch_count(self, r: int, rounds_left: object = None) -> int:
        """Rounds of a batch starting at r: ``config.seed_batch``, within the round ids, and
        no more than ``rounds_left`` (the server's hint; a value it cannot be is ignored)."""
        most = self.config.seed_batch
        if type(rounds_left) is int and rounds_left >= 1:  # bool, float, str: no hint
            most = min(most, rounds_left)
        return max(1, min(most, 2**64 - r))

    def _new_batch(self, r, holders, t, plan, seeds: np.ndarray, raw: bytes) -> SeedBatch:
        """Seal batch [r, r + len(seeds)): ``raw`` holds each holder's shares in holder
        order, ``len(seeds)`` 40-byte shares each (one contiguous slice per holder)."""
        count, size = len(seeds), len(seeds) * shamir.SHARE_BYTES
        rows = [raw[k : k + size] for k in range(0, len(raw), size)]
        mine = rows.pop(plan.own)
        # Header (s, count) ‖ ChaCha20-Poly1305(k_{u→v}, share_nonce(s), shares, AD ‖ header).
        head, nonce = _SPAN.pack(r, count), share_nonce(r)
        sealed = {
            v: head + seal(nonce, row, ad + head)
            for v, (seal, ad), row in zip(plan.others, plan.seal, rows, strict=True)
        }
        step = shamir.SHARE_BYTES
        batch = SeedBatch(
            start=r, holders=holders, threshold=t, seeds=list(seeds), sealed=sealed,
            own=[mine[i : i + step] for i in range(0, size, step)],
        )  # fmt: skip
        self._batches[r] = batch
        self._sealed_upto = batch.end
        return batch

    def _use(self, batch: SeedBatch, r: int) -> tuple[np.ndarray, bytes]:
        """Round r's seed and own share. The seeds of r and of the batch's earlier rounds
        are forgotten here: one mask per seed, and round ids only go up."""
        i = r - batch.start
        seed = batch.seeds[i]
        if seed is None:
            raise ValueError(f"client {self.client_id}'s round-{r} seed was used or passed")
        own = batch.own[i]  # kept in the round's record until the round is answered
        batch.seeds[: i + 1] = [None] * (i + 1)
        batch.own[: i + 1] = [None] * (i + 1)
        if i + 1 == len(batch.seeds):
            del self._batches[batch.start]  # no round left: the sealed batch is not needed
        return seed, own

    def _held_shares(self, r: int, senders: Sequence[int], inbox: Mapping[int, bytes]) -> bytes:
        """The shares of b_w^r for the w of ``senders``, one after the other (40 bytes each,
        in ``senders``' order): each held already, or opened from its
        sealed batch ``inbox[w]`` (kept for the batch's later rounds). ValueError naming
        a sender whose share is neither, whose batch fails authentication or does not
        cover r, or who sent two different batches covering one round."""
        if r < self._answered_upto:  # its shares were dropped with an answered later round
            raise ValueError(f"round {r} comes after round {self._answered_upto - 1}: refused")
        last = self._rows_of  # (senders, span, its held entry, their rows): the latest
        if last and last[0] is senders and last[1][0] <= r < last[1][1]:
            if self._held.get(last[1]) is last[2]:  # the very entry: no batch came since
                lo = (r - last[1][0]) * shamir.SHARE_BYTES
                return last[2][1][last[3], lo : lo + shamir.SHARE_BYTES].tobytes()
        spans = self._spans
        got = set(map(spans.get, senders))  # the spans held (usually one: batches align)
        if None in got or not all(span[0] <= r < span[1] for span in got):
            need = [w for w in senders if not (w in spans and spans[w][0] <= r < spans[w][1])]
            if missing := [w for w in need if w not in inbox]:
                raise ValueError(
                    f"no share of client {missing[0]}'s round-{r} seed: neither held nor "
                    "in the inbox"
                )
            self._take(need, inbox, r)
            got = set(map(spans.get, senders))
        size, out = shamir.SHARE_BYTES, {}
        for span in got:
            rows, data = self._held[span]
            mine = senders if len(got) == 1 else [w for w in senders if spans[w] == span]
            at = np.fromiter(map(rows.__getitem__, mine), dtype=np.intp, count=len(mine))
            lo = (r - span[0]) * size
            column = data[at, lo : lo + size]  # one row per sender, in its order
            if len(got) == 1:
                self._rows_of = (senders, span, self._held[span], at)
                return column.tobytes()
            out.update(zip(mine, column, strict=True))
        return b"".join([out[w].tobytes() for w in senders])

    def _take(self, senders: Sequence[int], inbox: Mapping[int, bytes], r: int) -> None:
        """Open each sender's sealed batch and hold its shares (one array per span)."""
        spans, sealed = self._spans, list(map(inbox.__getitem__, senders))
        heads = [bytes(c[:SPAN_BYTES]) for c in sealed]
        by_head = {heads[0]: list(senders)} if len(set(heads)) == 1 else {}  # batches align
        for w, head in () if by_head else zip(senders, heads, strict=True):
            by_head.setdefault(head, []).append(w)  # one span check per distinct header
        for head, group in by_head.items():
            sizes = set(map(len, map(inbox.__getitem__, group)))  # one header: one length
            for w in group if len(sizes) > 1 else group[:1]:  # each named if malformed
                try:
                    start, count = span_of(inbox[w])
                except ValueError as err:
                    raise ValueError(f"the shares from client {w} are malformed: {err}") from None
            if count > self.config.seed_batch:  # the run's batch: a node keeps no more
                raise ValueError(
                    f"the shares from client {group[0]} cover {count} rounds, more than "
                    f"secagg-seed-batch = {self.config.seed_batch}: refused"
                )
            end = start + count
            if not start <= r < end:  # the header is authenticated below: refused either way
                raise ValueError(
                    f"the shares from client {group[0]} cover rounds [{start}, {end}), not "
                    f"round {r}"
                )
            for w in () if spans.keys().isdisjoint(group) else group:
                old = spans.get(w)
                if old is not None and old[0] < end and start < old[1]:
                    raise ValueError(f"client {w} sent two batches of shares covering one round")
            self._hold((start, end), group, self._opened(head, group, inbox, r))

    def _opened(self, head: bytes, group: Sequence[int], inbox, r: int) -> bytes:
        """The plaintexts of ``group``'s sealed batches under ``head``, concatenated."""
        nonce, box = share_nonce(_SPAN.unpack(head)[0]), self._open
        try:
            pairs = zip(map(box.__getitem__, group), group, strict=True)
            return b"".join([op(nonce, inbox[w][SPAN_BYTES:], ad + head) for (op, ad), w in pairs])
        except InvalidTag:
            pass
        for w in group:  # which one: the rare path
            op, ad = box[w]
            try:
                op(nonce, inbox[w][SPAN_BYTES:], ad + head)
            except InvalidTag:
                raise ValueError(
                    f"the shares from client {w} for round {r} failed authentication"
                ) from None
        raise AssertionError("a batch failed authentication once only")  # pragma: no cover

    def _hold(self, span: tuple[int, int], group: Sequence[int], raw: bytes) -> None:
        """Keep ``group``'s opened batches of ``span`` (``raw``: one row per owner)."""
        new = np.frombuffer(raw, np.uint8).reshape(len(group), -1)
        rows, data = self._held.get(span, ({}, None))
        last = len(rows)
        rows = {**rows, **dict(zip(group, range(last, last + len(group)), strict=True))}
        data = new.copy() if data is None else np.concatenate([data, new])  # writable
        # Shares of rounds already answered are not kept.
        data[:, : max(0, self._answered_upto - span[0]) * shamir.SHARE_BYTES] = 0
        self._held[span] = (rows, data)
        self._spans.update(zip(group, repeat(span)))

    def _forget(self, r: int) -> None:
        """Round r answered: zero the held shares of round r and earlier rounds (revealed
        or withheld; round ids only go up, so none is needed again), and drop batches
        with no round left."""
        size = shamir.SHARE_BYTES
        for span in list(self._held):
            rows, data = self._held[span]
            if r + 1 >= span[1]:
                data[:] = 0  # zeroed, as every answered round's (copies handed out are not)
                del self._held[span]
                self._rows_of = ()
                for w in rows:
                    if self._spans.get(w) == span:
                        del self._spans[w]
            elif r >= span[0]:
                data[:, : (r + 1 - span[0]) * size] = 0
        self._answered_upto = max(self._answered_upto, r + 1)

    def _batches_state(self) -> dict:
        held = [
            [s, e, {str(w): data[i].tobytes().hex() for w, i in rows.items()}]
            for (s, e), (rows, data) in self._held.items()
        ]
        return {
            "batches": [b.state() for b in self._batches.values()], "held": held,
            "sealed-upto": self._sealed_upto, "answered-upto": self._answered_upto,
        }  # fmt: skip

    def _load_batches(self, data: Mapping) -> None:
        self._batches = {b.start: b for b in map(SeedBatch.of, data.get("batches", []))}
        self._sealed_upto = int(data.get("sealed-upto", 0))
        self._answered_upto = int(data.get("answered-upto", 0))
        self._held, self._spans = {}, {}
        for s, e, rows in data.get("held", []):
            owners = [int(w) for w in rows]
            raw = b"".join(bytes.fromhex(x) for x in rows.values())
            arr = np.frombuffer(raw, np.uint8).reshape(len(owners), -1).copy()
            self._held[(int(s), int(e))] = ({w: i for i, w in enumerate(owners)}, arr)
            self._spans.update((w, (int(s), int(e))) for w in owners)
