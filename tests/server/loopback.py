"""A Flower ``Grid`` whose nodes are the real ClientApp handlers, in this process.

Every message goes through Flower's protobuf encoding, as over the network, and
each node's ``Context`` survives the same encoding between messages (a
deployment starts a fresh ClientApp process per message). Message ids are
stamped on the pushed messages as Flower's grids do, and replies carry their
node's id as source, so the server's binding of replies to senders is the real
one. ``tamper`` lets a test play a hostile node: it sees each reply before the
server does and returns what the server receives instead (a list: none, the
reply, or several). ``forge`` lets a test play a lying coordinator: it sees each
message the server sends, with its node's partition id, and returns what that
node receives instead.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from fedpriv.clients import app as client_app
from flwr.app import Context, Error, Message, Metadata, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.serde import (
    context_from_proto,
    context_to_proto,
    message_from_proto,
    message_to_proto,
)

RUN_ID = 4242
HANDLERS = {
    "query.keys": client_app.keys,
    "query.keybook": client_app.keybook,
    "query.plan": client_app.plan,
    "query.ping": client_app.ping,
    "query.fedpriv": client_app.answer,
    "query.consistency": client_app.consistency,
    "query.unmask": client_app.unmask,
}
#: (pid, message type, the node's reply) -> the replies the server receives.
Tamper = Callable[[int, str, Message], list[Message]]
#: (pid, message type, the server's message) -> the message the node receives.
Forge = Callable[[int, str, Message], Message]


def wire(msg: Message) -> Message:
    """``msg`` after Flower's protobuf round trip."""
    return message_from_proto(message_to_proto(msg))


class LoopbackGrid:
    """Push/pull and send-and-receive; node ``100 + p`` holds partition ``p``."""

    def __init__(
        self,
        run_config: dict,
        num_nodes: int,
        *,
        tamper: Tamper | None = None,
        node_config: dict[int, dict] | None = None,
        forge: Forge | None = None,
    ):
        self._ids = itertools.count(1)
        self._replies: dict[str, list[Message]] = {}
        self.tamper = tamper
        self.forge = forge
        self.sent: list[Message] = []
        self.received: list[Message] = []
        self.contexts = {
            100 + p: Context(
                run_id=RUN_ID,
                node_id=100 + p,
                node_config={
                    "partition-id": p,
                    "num-partitions": num_nodes,
                    **(node_config or {}).get(p, {}),  # e.g. the node's own data-path
                },
                state=RecordDict(),
                run_config=run_config,
            )
            for p in range(num_nodes)
        }

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            meta = Metadata(
                run_id=RUN_ID,
                message_id=f"m{next(self._ids)}",
                src_node_id=0,
                dst_node_id=msg.metadata.dst_node_id,
                reply_to_message_id="",
                group_id="",
                created_at=time.time(),
                ttl=600.0,
                message_type=msg.metadata.message_type,
            )
            msg.metadata.__dict__["_message_id"] = meta.message_id  # as Flower's grids do
            incoming = wire(Message(msg.content, metadata=meta))
            node = meta.dst_node_id
            if self.forge is not None:
                incoming = wire(self.forge(node - 100, meta.message_type, incoming))
            self.sent.append(incoming)
            context = context_from_proto(context_to_proto(self.contexts[node]))
            try:
                reply = wire(HANDLERS[meta.message_type](incoming, context))
            except Exception as exc:  # as Flower does: the exception becomes an error reply
                reason = str(type(exc)) + ":<'" + str(exc) + "'>"
                error = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason)
                reply = wire(Message(error, reply_to=incoming))
            self.contexts[node] = context
            self.received.append(reply)
            pid = node - 100
            out = [reply] if self.tamper is None else self.tamper(pid, meta.message_type, reply)
            self._replies[meta.message_id] = [wire(r) for r in out]
            ids.append(meta.message_id)
        return ids

    def pull_messages(self, message_ids):
        out = []
        for i in list(message_ids):
            out.extend(self._replies.pop(i, []))
        return out

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))
