"""The Flower messages of a run: one exchange, its replies bound to their senders.

:func:`_send` sends one exchange and keeps only the replies that answer a message it
sent, once, from the node it was sent to (:class:`SentMessages`); a Flower error
reply is logged as its public part (:func:`report_error`). :class:`PollingGrid`
polls for replies; :class:`PlannedRound` and :class:`GridReport` carry a round's
plan and the run's counts (:mod:`fedpriv.server.grid_runtime` drives them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedpriv import logs
from fedpriv.federation.engine import Communication, RoundPlan
from fedpriv.federation.protocol import Query
from fedpriv.federation.secagg import FixedPointCodec

log = logs.get_logger(__name__)


@dataclass
class PlannedRound:
    """One round between :meth:`GridRuntime.plan_round` and :meth:`GridRuntime.finish_round`."""

    plan: RoundPlan
    started: float
    replies: int = 0
    #: The partitions whose upload was taken (set by ``finish_round``).
    senders: tuple[int, ...] = ()

    @property
    def query(self) -> Query:
        return self.plan.query

    @property
    def asked(self) -> list[int]:
        return self.plan.asked

    @property
    def codec(self) -> FixedPointCodec | None:
        return self.plan.codec  # None: aborted, nothing sent


@dataclass
class GridReport:
    """What happened on the wire."""

    communication: Communication
    round_seconds: list[float] = field(default_factory=list)
    empty_round_seconds: list[float] = field(default_factory=list)

    @property
    def client_errors(self) -> int:
        """Error replies (the engine's count: one tally per run)."""
        return self.communication.client_errors

    @client_errors.setter
    def client_errors(self, value: int) -> None:
        self.communication.client_errors = value


def wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    """Node ids once ``n`` nodes are connected (simulated nodes register late)."""
    deadline = time.monotonic() + timeout
    while len(ids := sorted(grid.get_node_ids())) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids)} of {n} nodes connected after {timeout:.0f} s")
        time.sleep(0.1)
    return ids


def report_error(rep: Message) -> str:
    """Log a client's error reply (it is counted, and the client treated as dropped).

    The reason is Flower's ``<class ...>:<'str(exc)'>`` of what the ClientApp
    raised, which ``fedpriv.clients.app.sanitised`` reduces to an error code and a
    schema column (e.g. ``DataError(code='not_a_number', column='BMI')``): no
    cell value, line number or path reaches this log.
    """
    log.warning(
        "client error from node %s: %s %s",
        rep.metadata.src_node_id,
        rep.error.code,
        rep.error.reason,
    )
    return public_reason(rep.error.reason)


def public_reason(reason: str) -> str:
    """The client failure's own text out of Flower's ``<class ...>:<'text'>`` reason
    (e.g. ``DataError(code='schema_mismatch', node=1)``); the reason as is otherwise."""
    _, sep, tail = reason.partition(":<'")
    return tail[:-2] if sep and tail.endswith("'>") else reason


class SentMessages:
    """The messages of one exchange, to bind each reply to the node it was sent to.

    A reply counts only if its authenticated source node is the destination of a
    message of this exchange and, where the grid assigned message ids (Flower's do,
    when pushing), if it answers that very message; and only the first per node.
    """

    def __init__(self, msgs: list[Message]) -> None:
        self.msgs = msgs
        self.answered: set[int] = set()

    def sender(self, rep: Message) -> tuple[int | None, str]:
        """The node that sent ``rep``, or ``None`` and why it is refused."""
        node = rep.metadata.src_node_id
        dst = {m.metadata.message_id: m.metadata.dst_node_id for m in self.msgs}
        if "" in dst or None in dst:  # a grid that does not stamp ids: the node must be asked
            bound = node in {m.metadata.dst_node_id for m in self.msgs}
        else:
            bound = dst.get(rep.metadata.reply_to_message_id) == node
        if not bound:
            return None, f"node {node} answered no message of this exchange sent to it"
        if node in self.answered:
            return None, f"node {node} replied twice"
        self.answered.add(node)
        return node, ""


def _send(
    grid: Grid, kind: str, content: dict[int, RecordDict], timeout: float
) -> tuple[dict[int, Message], list[str], int]:
    """Send one exchange; the replies bound to their nodes, the error replies' public
    reasons (:func:`report_error`) and the refused count (replies from nodes not
    asked, or a second reply)."""
    msgs = [
        Message(c, dst_node_id=node, message_type=f"query.{kind}") for node, c in content.items()
    ]
    sent = SentMessages(msgs)
    replies = grid.send_and_receive(msgs, timeout=timeout)
    ok, errors, refused = {}, [], 0
    for rep in replies:
        node, why = sent.sender(rep)
        if node is None:
            log.warning("%s reply refused: %s", kind, why)
            refused += 1
        elif rep.has_error():
            errors.append(report_error(rep))
        else:
            ok[node] = rep
    return ok, errors, refused


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
