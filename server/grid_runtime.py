"""The round logic of a Flower run, driven by :class:`server.flower_strategy.FlowerStrategy`.

Message types (Flower 1.42 allows ``query.<action>``):

* ``query.keys``    — once per run: each node answers its partition id and X25519 public key;
* ``query.keybook`` — once per run, right after: every node receives the key book
  {partition id: public key} and pins it (later messages with other keys are refused);
* ``query.fedpriv`` — one per round to each asked client: the public query, the round's
  participants, their (pinned) public keys and the Shamir threshold t; the reply is
  the client's double-masked vector and its encrypted share for each other participant;
* ``query.unmask``  — one per round, to the survivors (if at least t): the survivor and
  dropped lists and the shares addressed to the node; the reply holds its shares of the
  survivors' self-mask seeds and its pair masks with the dropped clients
  (:mod:`fedpriv.federation.secagg`). The round is then closed; late replies are ignored.

Clients are addressed by partition id (node ids are random); replies are read in
partition order, so results do not depend on arrival order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpriv import logs
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.federation.runtime import (
    DEFAULT_SCALE,
    MIN_PARTIES,
    Communication,
    begin_strategy,
    codec_for,
    participation_streams,
    round_plan,
)
from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggAbort,
    SecAggConfig,
    SecAggServer,
    UnmaskAnswer,
)
from fedpriv.federation.settings import RunSettings
from fedpriv.federation.wire import query_to_wire
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.randomness import SecretKey

log = logs.get_logger(__name__)


@dataclass
class PlannedRound:
    """One round between :meth:`GridRuntime.plan_round` and :meth:`GridRuntime.finish_round`."""

    query: Query
    asked: list[int]
    started: float
    codec: FixedPointCodec | None = None  # None: aborted, nothing sent
    replies: int = 0


@dataclass
class GridReport:
    """What happened on the wire."""

    communication: Communication
    client_errors: int = 0
    round_seconds: list[float] = field(default_factory=list)
    empty_round_seconds: list[float] = field(default_factory=list)


def wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    """Node ids once ``n`` nodes are connected (simulated nodes register late)."""
    deadline = time.monotonic() + timeout
    while len(ids := sorted(grid.get_node_ids())) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids)} of {n} nodes connected after {timeout:.0f} s")
        time.sleep(0.1)
    return ids


def report_error(rep: Message) -> None:
    """Log a client's error reply (it is counted, and the client treated as dropped).

    The reason is Flower's ``<class ...>:<'str(exc)'>`` of what the ClientApp
    raised, which ``clients.app.sanitised`` reduces to an error code and a
    schema column (e.g. ``DataError(code='not_a_number', column='BMI')``): no
    cell value, line number or path reaches this log.
    """
    log.warning(
        "client error from node %s: %s %s",
        rep.metadata.src_node_id,
        rep.error.code,
        rep.error.reason,
    )


def _send(
    grid: Grid, kind: str, content: dict[int, RecordDict], timeout: float
) -> tuple[dict[int, Message], int]:
    msgs = [
        Message(c, dst_node_id=node, message_type=f"query.{kind}") for node, c in content.items()
    ]
    replies = grid.send_and_receive(msgs, timeout=timeout)
    ok, errors = {}, 0
    for rep in replies:
        if rep.has_error():
            report_error(rep)
            errors += 1
        else:
            ok[rep.metadata.src_node_id] = rep
    return ok, errors


class PollingGrid:
    """A Flower ``Grid`` whose ``send_and_receive`` polls for replies every ``interval`` s.

    Flower 1.42's deployment grid sleeps 3 s between pulls, which puts a 3 s
    floor under every round; the simulation grid polls every 0.1 s. Pushing
    and pulling through the grid's own ``push_messages``/``pull_messages``
    with one interval makes both runtimes poll alike. Everything else is the
    wrapped grid's.
    """

    def __init__(self, grid: Grid, *, interval: float = 0.1) -> None:
        if not 0.0 < interval <= 10.0:
            raise ValueError(f"interval must lie in (0, 10] seconds; got {interval!r}")
        self._grid, self.interval = grid, interval

    def __getattr__(self, name: str):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list[Message]:
        pending = set(self._grid.push_messages(list(messages)))
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Message] = []
        while pending:
            got = list(self._grid.pull_messages(pending))
            out.extend(got)
            pending -= {m.metadata.reply_to_message_id for m in got}
            if not pending or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(self.interval)
        return out


class GridRuntime:
    """The in-process runtime's round logic, over Flower messages."""

    def __init__(self, grid: Grid, settings: RunSettings, *, max_records: int) -> None:
        if not settings.secure_aggregation:
            # Plain sums exist for in-process benchmarks only: over a network
            # the server must never see a single client's vector.
            raise ValueError("secure-aggregation must be true for a Flower run")
        self.grid = grid
        self.settings = settings
        self.max_records = max_records
        self.report = GridReport(Communication(settings.num_clients))
        self.secagg = SecAggConfig(threshold_fraction=settings.secagg_threshold)

    def connect(self) -> None:
        """Wait for the nodes and run the run's key exchange: collect keys, pin the book."""
        s = self.settings
        nodes = wait_for_nodes(self.grid, s.num_clients, s.node_wait_timeout)
        log.info("%d nodes connected", len(nodes))
        # Nothing secret or seeded goes out: each node draws its own key locally.
        content = {n: RecordDict({"config": ConfigRecord({})}) for n in nodes}
        replies, errors = _send(self.grid, "keys", content, s.round_timeout)
        if errors or len(replies) != len(nodes):
            # No keys, no secure aggregation: the run fails (client errors are printed above).
            raise RuntimeError(
                f"key exchange: {len(replies)} of {len(nodes)} nodes answered, "
                f"{errors} client errors"
            )
        self.node_of: dict[int, int] = {}
        self.public_keys: dict[int, bytes] = {}
        for node, rep in replies.items():
            meta = rep.content["meta"]
            pid = int(meta["partition-id"])
            self.node_of[pid] = node
            self.public_keys[pid] = bytes(meta["public-key"])
        if sorted(self.node_of) != list(range(s.num_clients)):
            raise RuntimeError(f"partition ids {sorted(self.node_of)} != 0..{s.num_clients - 1}")
        pids = sorted(self.public_keys)
        book = ConfigRecord(
            {"participants": pids, "public-keys": [self.public_keys[p] for p in pids]}
        )
        content = {self.node_of[p]: RecordDict({"config": book}) for p in pids}
        replies, errors = _send(self.grid, "keybook", content, s.round_timeout)
        if errors or len(replies) != len(pids):
            raise RuntimeError(
                f"key book: {len(replies)} of {len(pids)} nodes pinned it, {errors} client errors"
            )
        comm = self.report.communication
        comm.round_trips += 2
        comm.bytes_uploaded += 32

    def ping(self, rounds: int) -> None:
        """Time ``rounds`` empty round trips to every node: Flower's own cost per round."""
        for i in range(rounds):
            t0 = time.perf_counter()
            content = {
                n: RecordDict({"config": ConfigRecord({"i": i})}) for n in self.node_of.values()
            }
            replies, _ = _send(self.grid, "ping", content, self.settings.round_timeout)
            if len(replies) != len(content):
                raise RuntimeError(f"ping {i}: {len(replies)} of {len(content)} nodes answered")
            self.report.empty_round_seconds.append(time.perf_counter() - t0)

    def begin(
        self,
        strategy: Strategy,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        secret_key: SecretKey,
    ) -> None:
        """Start ``strategy``: public generator from the seed, private ones from ``secret_key``.

        The same derivations as :class:`~fedpriv.federation.runtime.InProcessRuntime`,
        so one injected key gives the same run in both.
        """
        begin_strategy(
            strategy,
            n_features=n_features,
            ledger=ledger,
            seed=self.settings.seed,
            secret_key=secret_key,
        )
        self._fates = participation_streams(secret_key)

    def plan_round(self, query: Query) -> tuple[PlannedRound, list[Message]]:
        """Who is asked in ``query``'s round, and the messages that ask them.

        No message at all if fewer than :data:`MIN_PARTIES` are asked: a
        "sum" of one vector would be that client's vector, so the round is
        aborted before anything is sent.
        """
        s = self.settings
        r = query.round
        asked, _ = round_plan(self._fates, r, s.num_clients, s.participation)
        planned = PlannedRound(query=query, asked=asked, started=time.perf_counter())
        if len(asked) < MIN_PARTIES:
            return planned, []
        planned.codec = codec_for(query.record_bound, self.max_records, len(asked), DEFAULT_SCALE)
        arrays, config = query_to_wire(query)
        config.update(
            {
                "participants": asked,
                "public-keys": [self.public_keys[p] for p in asked],
                "secagg-threshold": self.secagg.threshold(len(asked)),
                "codec-scale": planned.codec.scale,
                "codec-max-abs": planned.codec.max_abs,
            }
        )
        record = ArrayRecord({k: _arr(v) for k, v in arrays.items()})
        msgs = [
            Message(
                RecordDict({"query": record, "config": ConfigRecord(config)}),
                dst_node_id=self.node_of[p],
                message_type="query.fedpriv",
            )
            for p in asked
        ]
        return planned, msgs

    def finish_round(self, planned: PlannedRound, replies: Iterable[Message]) -> np.ndarray | None:
        """The unmasked sum of the round's replies (after the round's unmask exchange),
        or ``None`` if the round had to be aborted."""
        comm, query = self.report.communication, planned.query
        comm.rounds += 1
        if planned.codec is None:
            comm.aborted_rounds += 1
            return None
        comm.round_trips += 1
        masked, shares = {}, {}
        for rep in replies:
            if rep.has_error():
                report_error(rep)
                self.report.client_errors += 1
                continue
            pid = int(rep.content["meta"]["partition-id"])
            if pid not in planned.asked or pid in masked:
                self.report.client_errors += 1  # never asked, or a duplicate: ignore it
                continue
            vec = rep.content["reply"]["masked"].numpy()
            masked[pid] = vec
            sealed = rep.content["shares"]
            shares[pid] = dict(zip(sealed["to"], sealed["ct"], strict=True))
            comm.floats_uploaded[pid] += query.reply_length
            comm.bytes_uploaded[pid] += 8 * vec.size + sum(len(c) for c in sealed["ct"])
        aggregate = self._aggregate(
            query.round, planned.asked, masked, shares, planned.codec, query.reply_length
        )
        if aggregate is None:
            comm.aborted_rounds += 1
        planned.replies = len(masked)
        return aggregate

    def log_round(self, planned: PlannedRound, ledger: PrivacyLedger | None) -> float | None:
        """Record the round's wall time and log one progress line.

        About every tenth round (and the last) the line carries an upper bound
        on ε spent, which is returned (``None`` on the other rounds).
        """
        self.report.round_seconds.append(time.perf_counter() - planned.started)
        r, T = planned.query.round, self.settings.rounds
        bound = None
        if ledger is not None and ((r + 1) % max(1, T // 10) == 0 or r + 1 == T):
            bound = float(ledger.epsilon_upper_bound())
        eps = "" if bound is None else f", ε spent ≤ {bound:.3f}"
        log.info("round %d/%d: %d/%d replies%s", r + 1, T, planned.replies, len(planned.asked), eps)
        return bound

    def _aggregate(
        self,
        r: int,
        asked: list[int],
        masked: dict[int, np.ndarray],
        shares: dict[int, dict[int, bytes]],
        codec: Any,
        n: int,
    ) -> np.ndarray | None:
        server = SecAggServer(codec=codec, config=self.secagg)
        try:
            survivors, dropped = server.unmask_plan(round_id=r, participants=asked, masked=masked)
            inboxes = server.inboxes(survivors, shares)
        except (SecAggAbort, ValueError):
            return None  # fewer than t survivors, or a malformed reply: release nothing
        keys = [self.public_keys[p] for p in asked]
        content = {}
        for p in survivors:
            cfg = {"round": r, "survivors": survivors, "dropped": dropped, "n": n}
            cfg.update({"participants": asked, "public-keys": keys})
            cfg.update({"from": list(inboxes[p]), "ct": list(inboxes[p].values())})
            content[self.node_of[p]] = RecordDict({"config": ConfigRecord(cfg)})
        replies, errors = _send(self.grid, "unmask", content, self.settings.round_timeout)
        self.report.client_errors += errors
        comm = self.report.communication
        comm.round_trips += 1
        comm.recoveries += bool(dropped)
        answers = {}
        for rep in replies.values():
            pid = int(rep.content["meta"]["partition-id"])
            got = rep.content["unmask"]
            rec = rep.content["masks"]
            answers[pid] = ans = UnmaskAnswer(
                shares=dict(zip(got["of"], got["share"], strict=True)),
                masks={int(k): rec[k].numpy() for k in rec.keys()},
            )
            comm.bytes_uploaded[pid] += ans.nbytes
        try:
            return server.aggregate(round_id=r, participants=asked, masked=masked, answers=answers)
        except (SecAggAbort, ValueError):
            return None


def _arr(v: np.ndarray):
    from flwr.app import Array

    return Array(np.ascontiguousarray(v))
