"""The Flower message side of a run: keys, round queries, replies, unmasking.

:class:`GridTransport` sends a round's messages over a Flower ``Grid`` and
takes only the replies the protocol allows (the message types and the reply
rules are described in :mod:`fedpriv.server.grid_runtime`, whose
:class:`~fedpriv.server.grid_runtime.GridRuntime` drives it). Kept apart from
that module (the round engine over these messages), which re-exports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from fedpriv.server.grid_messages import (
    GridReport,
    SentMessages,
    _send,
    report_error,
    wait_for_nodes,
)
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpriv import logs
from fedpriv.federation.engine import Replies, RoundPlan
from fedpriv.federation.rounds import UnmaskRequest
from fedpriv.federation.secagg import MaskedInput, SecAggConfig, UnmaskAnswer
from fedpriv.federation.settings import RunSettings
from fedpriv.federation.wire import query_to_wire
from fedpriv.privacy.distributed import KEY_ORIGIN

log = logs.get_logger(__name__)


class GridTransport:
    """The round engine's transport over a Flower ``Grid`` (:mod:`fedpriv.server.grid_runtime`).

    Error replies are printed (:func:`report_error`) and counted in
    ``report.client_errors``; their senders count as dropped.
    """

    def __init__(self, grid: Grid, settings: RunSettings, report: GridReport) -> None:
        self.grid = grid
        self.settings = settings
        self.report = report
        self.secagg = SecAggConfig.of_run(settings)
        self.run_id: str | None = None  # the nodes' Flower run id: SecAgg+'s graph seed
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
        self.report.client_errors += len(errors)
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
            # No keys, no secure aggregation: the run fails, naming each node's own reason.
            raise RuntimeError(
                f"key exchange: {len(replies)} of {len(nodes)} nodes answered; "
                + ("; ".join(errors) if errors else "the others sent nothing")
            )
        runs = {str(rep.content["meta"].get("run-id", "")) for rep in replies.values()}
        if len(runs) != 1 or "" in runs:
            raise RuntimeError(f"key exchange: the nodes name run ids {sorted(runs)}, not one")
        (self.run_id,) = runs
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
                f"key book: {len(replies)} of {len(pids)} nodes pinned it; "
                + ("; ".join(errors) if errors else "the others sent nothing")
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
                f"({'; '.join(errors) or 'the others sent nothing'}); nothing is asked"
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
                "secagg-threshold": plan.threshold,
                "codec-scale": plan.codec.scale,
                "codec-max-abs": plan.codec.max_abs,
            }
        )
        if plan.noise is not None:  # distributed noise: each node adds its own share
            config["noise-share-std"] = plan.noise.share_std
            config["noise-min-survivors"] = plan.noise.min_survivors
        record = ArrayRecord({k: _arr(v) for k, v in arrays.items()})

        def ask(p: int) -> Message:
            cfg = {**config, **self._named(plan, p)}
            cfg["secagg-resend"] = plan.resend is None or p in plan.resend  # its sealed shares
            if plan.rounds_left is not None:  # a hint: a new batch of seeds covers no more
                cfg["secagg-rounds-left"] = plan.rounds_left
            if plan.graph is not None:  # SecAgg+: the node's neighbours, which it checks
                cfg["neighbours"] = list(plan.graph.neighbours(p))
                cfg["num-participants"] = len(plan.asked)
            content = RecordDict({"query": record, "config": ConfigRecord(cfg)})
            return Message(content, dst_node_id=self.node_of[p], message_type="query.fedpriv")

        return self._track([ask(p) for p in plan.asked])

    def _named(self, plan: RoundPlan, p: int | None, *, verify: bool = False) -> dict:
        """The ids and pinned keys a message to partition ``p`` names: the round's
        participants, or under SecAgg+'s graph its closed neighbourhood only."""
        ids = plan.asked if plan.graph is None or p is None else list(plan.graph.closed(p))
        out = {"participants": ids, "public-keys": [self.public_keys[q] for q in ids]}
        if verify:
            out["verify-keys"] = [self.verify_keys[q] for q in ids]  # checked against pins
        return out

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

    def _view(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int], p: int | None = None, **kw
    ) -> dict:
        cfg = {"round": plan.query.round, "survivors": survivors, "dropped": dropped}
        return {**cfg, **self._named(plan, p, **kw)}

    def consistency(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int]
    ) -> dict[int, bytes]:
        """Each survivor's signature on (S, D) (``query.consistency``), by partition."""
        content = {
            self.node_of[p]: RecordDict(
                {"config": ConfigRecord(self._view(plan, survivors, dropped, p, verify=True))}
            )
            for p in survivors
        }
        return self._survivor_replies(
            "consistency", content, survivors, "signature",
            lambda rep: bytes(rep.content["meta"]["signature"]),
        )  # fmt: skip

    def unmask(self, request: UnmaskRequest) -> dict[int, UnmaskAnswer]:
        plan, content = request.plan, {}
        for p in request.survivors:
            signatures = request.signatures_for(p)  # SecAgg+: t of its neighbours'
            signers = sorted(signatures)
            cfg = self._view(plan, request.survivors, request.dropped, p)
            cfg.update({"n": plan.query.reply_length, "signers": signers})
            cfg["signatures"] = [bytes(signatures[j]) for j in signers]
            box = request.inboxes[p]
            cfg.update({"from": list(box), "ct": list(box.values())})
            content[self.node_of[p]] = RecordDict({"config": ConfigRecord(cfg)})

        return self._survivor_replies(
            "unmask", content, request.survivors, "unmask answer", unmask_answer_of
        )

    def _survivor_replies(
        self, kind: str, content: dict, survivors: list[int], what: str, read: Callable
    ) -> dict[int, Any]:
        """Send ``content`` (a ``kind`` message per survivor's node) and read each
        survivor's first reply with ``read``; any other reply, or one ``read`` cannot
        parse, is refused and left out."""
        out: dict[int, Any] = {}
        for node, rep in self._send(kind, content).items():
            pid = self.pid_of.get(node)
            if pid not in survivors or pid in out:
                self._refuse(f"a {what} from node {node}, not a survivor's first")
                continue
            try:
                out[pid] = read(rep)
            except (KeyError, TypeError, ValueError) as err:
                self._refuse(f"partition {pid}'s {what} is malformed ({type(err).__name__})")
        return out


def _arr(v: np.ndarray):
    from flwr.app import Array

    return Array(np.asarray(v, order="C"))


def unmask_answer_of(rep: Message) -> UnmaskAnswer:
    """A node's unmask reply as the answer the server's shim reads: its shares, the
    dropped clients its mask sum covers, and that sum (absent when none dropped)."""
    got, rec = rep.content["unmask"], rep.content["masks"]
    return UnmaskAnswer(
        shares=dict(zip(got["of"], got["share"], strict=True)),
        lost=tuple(int(v) for v in got["lost"]),
        mask=rec["sum"].numpy() if "sum" in rec.keys() else None,
    )
