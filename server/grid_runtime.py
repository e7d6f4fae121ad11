"""The round logic of a Flower run, driven by
:class:`fedpriv.server.flower_strategy.FlowerStrategy`.

Message types (Flower 1.42 allows ``query.<action>``):

* ``query.keys``    — once per run: each node answers its partition id, X25519 public key
  and Ed25519 verify key;
* ``query.keybook`` — once per run, right after: every node receives the key book
  {partition id: (public key, verify key)} and pins it (later messages with other keys
  are refused);
* ``query.fedpriv`` — one per round to each asked client: the public query, the round's
  participants, their (pinned) public keys and the Shamir threshold t; the reply is
  the client's double-masked vector and its encrypted share for each other participant;
* ``query.consistency`` — one per round, to the survivors (if at least t): the survivor
  and dropped lists; the reply is the node's Ed25519 signature on them
  (:mod:`fedpriv.federation.secagg_consistency`); fewer than t valid ones abort the round;
* ``query.unmask``  — one per round, to the survivors: the survivor and dropped lists,
  the survivors' signatures on them and the shares addressed to the node; the reply
  holds its shares of the survivors' self-mask seeds and its pair masks with the dropped
  clients (:mod:`fedpriv.federation.secagg`). The round is then closed; late replies are
  ignored.

Clients are addressed by partition id (node ids are random); replies are read in
partition order, so results do not depend on arrival order.

Who sent a reply is the transport's knowledge, never the content's: Flower stamps
each reply with its authenticated source node id (``metadata.src_node_id``; with
node authentication, the node's key), which the key exchange bound to one partition
id. A reply is taken only if it answers a message this round sent to that very node
(``reply_to_message_id``), once; its ``round`` must be the round's; anything else,
e.g. a reply naming another partition, a replay of an earlier round, a late reply
or a second reply, is refused and counted (``rejected_replies``), and its sender
counts as dropped. A restarted node has a new node id and none of its keys: it cannot
rejoin the running run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
from fedpriv.server.grid_messages import (
    GridReport,
    PlannedRound,
    PollingGrid,
    _send,
)
from fedpriv.server.grid_transport import GridTransport
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpriv import logs
from fedpriv.federation.engine import Communication, RoundEngine
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy.distributed import DERIVED_KEYS_CAVEAT, FRESH
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.randomness import SecretKey

log = logs.get_logger(__name__)

__all__ = ["GridReport", "GridRuntime", "GridTransport", "PlannedRound", "PollingGrid"]


class GridRuntime:
    """The shared round engine (:mod:`fedpriv.federation.engine`) over Flower messages."""

    def __init__(self, grid: Grid, settings: RunSettings, *, max_records: int) -> None:
        if not settings.secure_aggregation:
            # Plain sums exist for in-process benchmarks only: over a network
            # the server must never see a single client's vector.
            raise ValueError("secure-aggregation must be true for a Flower run")
        self.grid = grid
        self.settings = settings
        self.max_records = max_records
        self.report = GridReport(Communication(settings.num_clients))
        self.transport = GridTransport(grid, settings, self.report)
        self._ledgers: list[PrivacyLedger | None] = []  # every begun strategy's
        self.engine = RoundEngine(
            self.transport,
            n_clients=settings.num_clients,
            max_records=max_records,
            participation=settings.participation,
            secagg=self.transport.secagg,
            communication=self.report.communication,
            noise=settings.distributed_noise,
        )

    @property
    def node_of(self) -> dict[int, int]:
        return self.transport.node_of

    @property
    def public_keys(self) -> dict[int, bytes]:
        return self.transport.public_keys

    def connect(self) -> None:
        """Wait for the nodes and run the run's key exchange: collect keys, pin the book.

        Under distributed noise, a node whose key derives from an injected reproduction
        key (``key-origin`` ``injected``, or no origin said) lets whoever holds that key
        recompute its shares: every begun strategy's ledger is marked uncertified.
        """
        self.engine.setup_keys()
        for ledger in self._ledgers:
            self._void_if_derived(ledger)

    def derived_key_nodes(self) -> list[int]:
        """The partitions whose key-exchange reply did not say ``key-origin`` ``fresh``."""
        return sorted(p for p, o in self.transport.key_origins.items() if o != FRESH)

    def _void_if_derived(self, ledger: PrivacyLedger | None) -> None:
        if ledger is None or self.settings.distributed_noise is None:
            return
        derived = self.derived_key_nodes()
        if derived:
            log.warning("nodes %s run on injected reproduction keys: %s", derived,
                        DERIVED_KEYS_CAVEAT)  # fmt: skip
            ledger.mark_uncertified(DERIVED_KEYS_CAVEAT)

    def ping(self, rounds: int) -> None:
        """Time ``rounds`` empty round trips to every node: Flower's own cost per round."""
        for i in range(rounds):
            t0 = time.perf_counter()
            content = {
                n: RecordDict({"config": ConfigRecord({"i": i})}) for n in self.node_of.values()
            }
            replies, _, _ = _send(self.grid, "ping", content, self.settings.round_timeout)
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
        noise_stream: str = "noise",
    ) -> None:
        """Start ``strategy``: public generator from the seed, private ones from ``secret_key``.

        The same derivations as :class:`~fedpriv.federation.runtime.InProcessRuntime`,
        so one injected key gives the same run in both.
        """
        self._ledgers.append(ledger)
        self._void_if_derived(ledger)  # a later strategy (the DP evaluation), once connected
        self.engine.begin(
            strategy,
            n_features=n_features,
            ledger=ledger,
            seed=self.settings.seed,
            secret_key=secret_key,
            noise_stream=noise_stream,
        )

    def plan_round(self, query: Query) -> tuple[PlannedRound, list[Message]]:
        """Who is asked in ``query``'s round, and the messages that ask them.

        No message at all if fewer than :data:`~fedpriv.federation.engine.MIN_PARTIES`
        are asked: the engine aborts the round before anything is sent.
        """
        plan = self.engine.plan(query)
        return PlannedRound(plan=plan, started=time.perf_counter()), self.transport.messages(plan)

    def finish_round(self, planned: PlannedRound, replies: Iterable[Message]) -> np.ndarray | None:
        """The unmasked sum of the round's replies (after the round's unmask exchange),
        or ``None`` if the round had to be aborted."""
        plan = planned.plan
        got = None if plan.aborted else self.transport.collect(plan, replies)
        planned.replies = 0 if got is None else len(got.senders)
        planned.senders = () if got is None else tuple(int(u) for u in got.senders)
        return self.engine.finish(plan, got)

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
