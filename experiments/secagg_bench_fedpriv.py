"""fedpriv's secure-aggregation shim for one vector sum, and the plain sum, in one process.

The shim's public API (:mod:`fedpriv.federation.secagg`) driven as the engine drives it
(:mod:`fedpriv.federation.round_sums`): key set-up once per run (each client's X25519
and Ed25519 keys, the broadcast key book, each client pinning it and deriving the run's
SecAgg+ graph), then one round — masked input, consistency (signed survivor list),
unmask, aggregate. Every call is timed with ``time.process_time`` and charged to its
side: :class:`~fedpriv.federation.secagg.SecAggClient` methods to that client,
:class:`~fedpriv.federation.secagg.SecAggServer` methods to the server.

Bytes are payload bytes, counted by one rule for every message: a vector at its
``nbytes`` (uint64), each ciphertext, key and signature at its length, each id or
number at 8 bytes (what ``MaskedInput.nbytes`` and ``UnmaskAnswer.nbytes`` count, plus
the lists and signatures the engine's messages carry).

Dropouts: the ``drop`` clients take part in the key set-up, then send no masked input.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import numpy as np

from fedpriv.federation import planning
from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
)

RUN = "secagg-benchmark"
ID = 8  # bytes per id or number on the wire


def codec_for(num_clients: int) -> FixedPointCodec:
    """The runtimes' codec (:func:`fedpriv.federation.planning.codec_for`: scale 2^32)
    for one record of bound 1 per client, |x| ≤ 1."""
    return planning.codec_for(1.0, 1, max(num_clients, 2), planning.DEFAULT_SCALE)


class _Clock:
    """CPU seconds per party: ``with clock(u): ...`` charges the block to party u."""

    def __init__(self) -> None:
        self.cpu: dict[object, float] = {}

    def __call__(self, party: object):
        clock = self

        class _Span:
            def __enter__(self):
                self.t0 = time.process_time()

            def __exit__(self, *exc):
                clock.cpu[party] = clock.cpu.get(party, 0.0) + time.process_time() - self.t0

        return _Span()

    def server(self) -> float:
        return self.cpu.get("server", 0.0)

    def client_mean(self) -> float:
        times = [v for k, v in self.cpu.items() if k != "server"]
        return sum(times) / max(len(times), 1)


def _mean(counts: Mapping[int, int]) -> float:
    return sum(counts.values()) / max(len(counts), 1)


def _add(counts: dict[int, int], u: int, n: int) -> None:
    counts[u] = counts.get(u, 0) + n


def run_plain(vectors: Mapping[int, np.ndarray], drop: Iterable[int]) -> dict:
    """The plain ring sum (``secure_aggregation=False``): each survivor encodes and
    uploads its vector, the server adds the encodings mod 2^64 and decodes."""
    codec, lost = codec_for(len(vectors)), set(drop)
    clock, ups = _Clock(), {}
    for u in range(len(vectors)):
        if u in lost:
            continue
        x = vectors[u]  # the client's data, before its clock starts
        with clock(u):
            ups[u] = codec.encode(x)
    with clock("server"):
        acc = np.zeros(next(iter(ups.values())).size, dtype=np.uint64)
        for y in ups.values():
            np.add(acc, y, out=acc)
        total = codec.decode(acc)
    n = 8 * acc.size
    return {
        "setup_server_cpu_s": 0.0, "setup_client_cpu_s": 0.0, "setup_up_bytes": 0.0,
        "setup_down_bytes": 0.0, "round_server_cpu_s": clock.server(),
        "round_client_cpu_s": clock.client_mean(), "round_up_bytes": float(n),
        "round_down_bytes": 0.0, "total": total, "survivors": len(ups),
        "exact": ring_sum(vectors, ups, codec),
    }  # fmt: skip


def _setup(k: int, config: SecAggConfig) -> tuple[dict, tuple, dict]:
    """Keys once per run: generate, upload, broadcast the book, pin it, derive the graph."""
    clock, up, down = _Clock(), {}, {}
    clients = {}
    for u in range(k):
        with clock(u):
            clients[u] = SecAggClient(client_id=u, config=config)
            pk, vk = clients[u].public_key, clients[u].verify_key
        _add(up, u, len(pk) + len(vk))
    with clock("server"):
        book = (
            {u: c.public_key for u, c in clients.items()},
            {u: c.verify_key for u, c in clients.items()},
        )
    size = sum(ID + len(book[0][u]) + len(book[1][u]) for u in clients)
    for u, c in clients.items():
        with clock(u):
            c.setup(book[0], verify_keys=book[1], run_id=RUN)
        _add(down, u, size)
    stats = {
        "setup_server_cpu_s": clock.server(), "setup_client_cpu_s": clock.client_mean(),
        "setup_up_bytes": _mean(up), "setup_down_bytes": _mean(down),
    }  # fmt: skip
    return clients, book, stats


def run_fedpriv(
    vectors: Mapping[int, np.ndarray], drop: Iterable[int], config: SecAggConfig | None = None
) -> dict:
    """Key set-up, then one secure round over ``vectors`` (client u holds ``vectors[u]``)
    with the ``drop`` clients silent from the masked input on.

    Returns the decoded sum of the survivors, the plain ring sum of the same vectors
    (``exact``: the secure sum must equal it bit for bit), and the costs of the set-up
    and of the round (server CPU, mean client CPU and bytes over the clients that
    took part).
    """
    config = config or SecAggConfig()
    k, lost = len(vectors), set(drop)
    codec = codec_for(k)
    clients, book, out = _setup(k, config)
    graph = clients[0].graph  # the run's SecAgg+ graph (None: the complete graph)
    everyone = list(range(k))
    clock, up, down = _Clock(), {}, {}
    with clock("server"):
        server = SecAggServer(codec=codec, config=config, graph=graph)
        t = server.topology(everyone).threshold
    ups = {}
    for u in everyone:
        near = None if graph is None else graph.neighbours(u)
        _add(down, u, 3 * ID + ID * len(near if near is not None else everyone))
        if u in lost:
            continue
        x = vectors[u]  # the client's data, before its clock starts
        with clock(u):
            ups[u] = clients[u].mask(
                x, round_id=1, participants=everyone, codec=codec, threshold=t,
                neighbours=near,
            )  # fmt: skip
        _add(up, u, ups[u].nbytes)
    with clock("server"):
        live, gone = server.unmask_plan(round_id=1, participants=everyone, masked=ups)
        inboxes = server.inboxes(live, {u: m.shares for u, m in ups.items()})
    sigs = {}
    for u in live:
        _add(down, u, ID * k)  # (S, D)
        with clock(u):
            sigs[u] = clients[u].sign_survivors(round_id=1, survivors=live, dropped=gone)
        _add(up, u, len(sigs[u]))
    with clock("server"):
        ok = server.check_signatures(
            round_id=1, participants=everyone, survivors=live, dropped=gone, signatures=sigs,
            key_book=book,
        )  # fmt: skip
        forward = {u: {j: ok[j] for j in server.forward(u, ok)} for u in live}
    answers = {}
    for u in live:
        inbox = inboxes[u]
        _add(down, u, ID * k + sum(len(c) for c in inbox.values()))
        _add(down, u, sum(ID + len(s) for s in forward[u].values()))
        with clock(u):
            answers[u] = clients[u].unmask(
                round_id=1, survivors=live, dropped=gone, n=codec_len(ups), inbox=inbox,
                signatures=forward[u],
            )  # fmt: skip
        _add(up, u, answers[u].nbytes)
    with clock("server"):
        total = server.aggregate(
            round_id=1, participants=everyone, masked={u: m.vector for u, m in ups.items()},
            answers=answers,
        )  # fmt: skip
    out.update(
        round_server_cpu_s=clock.server(), round_client_cpu_s=clock.client_mean(),
        round_up_bytes=_mean(up), round_down_bytes=_mean(down), total=total,
        survivors=len(live), degree=None if graph is None else graph.degree, threshold=t,
        exact=ring_sum(vectors, live, codec),
    )  # fmt: skip
    return out


def ring_sum(vectors: Mapping[int, np.ndarray], ids: Iterable[int], codec) -> np.ndarray:
    """The plain ring sum of ``vectors[u]`` over ``ids``, one vector at a time (memory
    O(L), as the engine's plain path; :func:`~fedpriv.federation.secagg.sum_plain`
    gives the same bits)."""
    acc = None
    for u in ids:
        y = codec.encode(vectors[u])
        acc = y if acc is None else np.add(acc, y, out=acc)
    return codec.decode(acc)


def codec_len(ups: Mapping[int, object]) -> int:
    """The round's vector length, from any upload."""
    return int(next(iter(ups.values())).vector.size)
