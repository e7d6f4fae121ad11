"""The round logic of a Flower run, driven by :class:`fedpriv.server.flower_strategy.FlowerStrategy`.

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

import json
import time
from collections.abc import Iterable, Mapping

import numpy as np
from fedpriv.server.grid_messages import (
    GridReport,
    PlannedRound,
    PollingGrid,
    SentMessages,
    _send,
    report_error,
    wait_for_nodes,
)
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpriv import logs
from fedpriv.federation.engine import Communication, Replies, RoundEngine, RoundPlan
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.federation.secagg import MaskedInput, SecAggConfig, UnmaskAnswer
from fedpriv.federation.settings import RunSettings
from fedpriv.federation.wire import query_to_wire
from fedpriv.privacy.distributed import DERIVED_KEYS_CAVEAT, FRESH, KEY_ORIGIN
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.randomness import SecretKey

log = logs.get_logger(__name__)

__all__ = ["GridReport", "GridRuntime", "GridTransport", "PlannedRound", "PollingGrid"]


class GridTransport:
    """The round engine's transport over a Flower ``Grid`` (module docstring).

    Error replies are printed (:func:`report_error`) and counted in
    ``report.client_errors``; their senders count as dropped.
    """

    def __init__(self, grid: Grid, settings: RunSettings, report: GridReport) -> None:
        self.grid = grid
        self.settings = settings
        self.report = report
        self.secagg = SecAggConfig(threshold_fraction=settings.secagg_threshold)
        self.node_of: dict[int, int] = {}
        self.pid_of: dict[int, int] = {}  # node id -> partition id, bound at the key exchange
        self.public_keys: dict[int, bytes] = {}
        self.verify_keys: dict[int, bytes] = {}
        #: Each node's reported key origin ("fresh" or "injected"; "unknown" if unsaid).
        self.key_origins: dict[int, str] = {}
        #: Each node's remaining lifetime budget (ε, δ) after it admitted the plan (∞: none).
        self.remaining: dict[int, tuple[float, float]] = {}
        self._pending_plan: dict | None = None  # declared before the key exchange
        self._sent = SentMessages([])  # this round's query messages

    def _refuse(self, why: str) -> None:
        self.report.communication.rejected_replies += 1
        log.warning("reply refused: %s; its sender counts as dropped", why)

    def _track(self, msgs: list[Message]) -> list[Message]:
        self._sent = SentMessages(msgs)
        return msgs

    def _send(self, kind: str, content: dict[int, RecordDict]) -> dict[int, Message]:
        replies, errors, refused = _send(self.grid, kind, content, self.settings.round_timeout)
        self.report.client_errors += errors
        self.report.communication.rejected_replies += refused
        return replies

    def setup_keys(self) -> None:
        """Wait for the nodes and run the run's key exchange: collect keys, pin the book."""
        s = self.settings
        nodes = wait_for_nodes(self.grid, s.num_clients, s.node_wait_timeout)
        log.info("%d nodes connected", len(nodes))
        # Nothing secret or seeded goes out: each node draws its own key locally. The
        # strategy's plan rides along: each node's own budget admits it first.
        plan = {} if self._pending_plan is None else {"plan": json.dumps(self._pending_plan)}
        content = {n: RecordDict({"config": ConfigRecord(plan)}) for n in nodes}
        replies, errors, _ = _send(self.grid, "keys", content, s.setup_timeout)
        if errors or len(replies) != len(nodes):
            # No keys, no secure aggregation: the run fails (client errors are printed above).
            raise RuntimeError(
                f"key exchange: {len(replies)} of {len(nodes)} nodes answered, "
                f"{errors} client errors (a node refusing the plan is one; reasons above)"
            )
        for node, rep in replies.items():
            # The one place a node names its partition; from here on its node id says it.
            meta = rep.content["meta"]
            pid = int(meta["partition-id"])
            if pid in self.node_of:
                raise RuntimeError(
                    f"nodes {self.node_of[pid]} and {node} both claim partition {pid}: "
                    "the key exchange is refused"
                )
            self.node_of[pid], self.pid_of[node] = node, pid
            self.public_keys[pid] = bytes(meta["public-key"])
            self.verify_keys[pid] = bytes(meta["verify-key"])
            self.key_origins[pid] = str(meta.get(KEY_ORIGIN, "unknown"))
            if plan:
                self._note_remaining(pid, meta)
        if sorted(self.node_of) != list(range(s.num_clients)):
            raise RuntimeError(f"partition ids {sorted(self.node_of)} != 0..{s.num_clients - 1}")
        pids = sorted(self.public_keys)
        book = ConfigRecord(
            {
                "participants": pids,
                "public-keys": [self.public_keys[p] for p in pids],
                "verify-keys": [self.verify_keys[p] for p in pids],
            }
        )
        content = {self.node_of[p]: RecordDict({"config": book}) for p in pids}
        replies, errors, _ = _send(self.grid, "keybook", content, s.setup_timeout)
        if errors or len(replies) != len(pids):
            raise RuntimeError(
                f"key book: {len(replies)} of {len(pids)} nodes pinned it, {errors} client errors"
            )

    def declare_plan(self, plan: dict) -> None:
        """Declare a begun strategy's plan to every node; each node's own ledger admits it
        or refuses (:mod:`fedpriv.privacy.node_budget`), and one refusal stops the run.

        Before the key exchange the plan waits and travels with its first message
        (no exchange of its own); a later strategy's (the DP evaluation) is sent alone.
        """
        if not self.pid_of:
            self._pending_plan = plan
            return
        text = json.dumps(plan)
        content = {n: RecordDict({"config": ConfigRecord({"plan": text})}) for n in self.pid_of}
        replies, errors, _ = _send(self.grid, "plan", content, self.settings.setup_timeout)
        self.report.communication.round_trips += 1
        if errors or len(replies) != len(content):
            raise RuntimeError(
                f"plan {plan['stage']!r}: {len(replies)} of {len(content)} nodes admitted it "
                f"({errors} refused or failed; their reasons are logged above); nothing is asked"
            )
        for node, rep in replies.items():
            self._note_remaining(self.pid_of[node], rep.content["meta"])

    def _note_remaining(self, pid: int, meta) -> None:
        self.remaining[pid] = (float(meta["remaining-epsilon"]), float(meta["remaining-delta"]))

    def messages(self, plan: RoundPlan) -> list[Message]:
        """The ``query.fedpriv`` messages that ask ``plan.asked`` (none if aborted)."""
        if plan.aborted:
            return []
        arrays, config = query_to_wire(plan.query)
        config.update(
            {
                "participants": plan.asked,
                "public-keys": [self.public_keys[p] for p in plan.asked],
                "secagg-threshold": self.secagg.effective_threshold(len(plan.asked)),
                "codec-scale": plan.codec.scale,
                "codec-max-abs": plan.codec.max_abs,
            }
        )
        if plan.noise is not None:  # distributed noise: each node adds its own share
            config["noise-share-std"] = plan.noise.share_std
            config["noise-min-survivors"] = plan.noise.min_survivors
        record = ArrayRecord({k: _arr(v) for k, v in arrays.items()})
        return self._track(
            [
                Message(
                    RecordDict({"query": record, "config": ConfigRecord(config)}),
                    dst_node_id=self.node_of[p],
                    message_type="query.fedpriv",
                )
                for p in plan.asked
            ]
        )

    def collect(self, plan: RoundPlan, replies: Iterable[Message]) -> Replies:
        """The uploads among ``replies`` bound to their senders, in partition order.

        Only the reply of each asked node to this round's message counts; its
        content is read defensively (a malformed one is refused and counted) and
        checked in full by the engine (:mod:`fedpriv.federation.replies`).
        """
        masked: dict[int, MaskedInput] = {}
        errors = 0
        for rep in replies:
            node, why = self._sent.sender(rep)
            pid = self.pid_of.get(node)
            if node is None or pid not in plan.asked:
                self._refuse(why or f"node {node} was not asked in this round")
                continue
            if rep.has_error():
                report_error(rep)
                errors += 1
                continue
            try:
                sealed = rep.content["shares"]
                masked[pid] = MaskedInput(
                    vector=rep.content["reply"]["masked"].numpy(),
                    shares=dict(zip(sealed["to"], sealed["ct"], strict=True)),
                    round_id=int(rep.content["meta"]["round"]),
                )
            except (KeyError, TypeError, ValueError) as err:
                self._refuse(f"partition {pid}'s upload is malformed ({type(err).__name__})")
        self._sent = SentMessages([])  # the round is closed: a late reply answers nothing
        return Replies(senders=tuple(sorted(masked)), masked=masked, errors=errors)

    def ask(self, plan: RoundPlan) -> Replies:
        msgs = self.messages(plan)
        return self.collect(
            plan, self.grid.send_and_receive(msgs, timeout=self.settings.round_timeout)
        )

    @property
    def key_book(self) -> tuple[dict[int, bytes], dict[int, bytes]]:
        """(public keys, verify keys) by partition, as broadcast at the key exchange."""
        return self.public_keys, self.verify_keys

    def _view(self, plan: RoundPlan, survivors: list[int], dropped: list[int]) -> dict:
        asked = plan.asked
        keys = [self.public_keys[p] for p in asked]
        cfg = {"round": plan.query.round, "survivors": survivors, "dropped": dropped}
        cfg.update({"participants": asked, "public-keys": keys})
        return cfg

    def consistency(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int]
    ) -> dict[int, bytes]:
        """Each survivor's signature on (S, D) (``query.consistency``), by partition."""
        cfg = self._view(plan, survivors, dropped)
        cfg["verify-keys"] = [self.verify_keys[p] for p in plan.asked]  # checked against pins
        content = {self.node_of[p]: RecordDict({"config": ConfigRecord(cfg)}) for p in survivors}
        signatures: dict[int, bytes] = {}
        for node, rep in self._send("consistency", content).items():
            pid = self.pid_of.get(node)
            if pid not in survivors or pid in signatures:
                self._refuse(f"a signature from node {node}, not a survivor's first")
                continue
            try:
                signatures[pid] = bytes(rep.content["meta"]["signature"])
            except (KeyError, TypeError, ValueError) as err:
                self._refuse(f"partition {pid}'s signature is malformed ({type(err).__name__})")
        return signatures

    def unmask(
        self,
        plan: RoundPlan,
        survivors: list[int],
        dropped: list[int],
        inboxes: Mapping[int, Mapping[int, bytes]],
        signatures: Mapping[int, bytes],
    ) -> dict[int, UnmaskAnswer]:
        signers = sorted(signatures)
        content = {}
        for p in survivors:
            cfg = self._view(plan, survivors, dropped)
            cfg.update({"n": plan.query.reply_length, "signers": signers})
            cfg["signatures"] = [bytes(signatures[j]) for j in signers]
            cfg.update({"from": list(inboxes[p]), "ct": list(inboxes[p].values())})
            content[self.node_of[p]] = RecordDict({"config": ConfigRecord(cfg)})
        answers = {}
        for node, rep in self._send("unmask", content).items():
            pid = self.pid_of.get(node)
            if pid not in survivors or pid in answers:
                self._refuse(f"an unmask answer from node {node}, not a survivor's first")
                continue
            try:
                got, rec = rep.content["unmask"], rep.content["masks"]
                answers[pid] = UnmaskAnswer(
                    shares=dict(zip(got["of"], got["share"], strict=True)),
                    masks={int(k): rec[k].numpy() for k in rec.keys()},
                )
            except (KeyError, TypeError, ValueError) as err:
                self._refuse(f"partition {pid}'s unmask answer is malformed ({type(err).__name__})")
        return answers


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


def _arr(v: np.ndarray):
    from flwr.app import Array

    return Array(np.asarray(v, order="C"))
