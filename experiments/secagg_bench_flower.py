"""Flower 1.42's own SecAgg+ for one vector sum, driven in one process.

The server side is ``flwr``'s :class:`~flwr.server.workflow.SecAggPlusWorkflow`, its
four stage methods called in the order its ``__call__`` calls them (setup, share
keys, collect masked vectors, unmask); the client side is ``flwr``'s
``secaggplus_mod`` in front of a train function that returns the client's vector.
Between them sits :class:`MemoryGrid`, a synchronous in-memory ``Grid``: every
message and reply goes through Flower's protobuf serde (``recorddict_to_proto``),
as over the network, which also gives its size. CPU is split by where it is spent:
each node's handler call is timed with ``time.process_time`` (the client side); the
serde, the byte count and the message stamping are the transport's and excluded;
the rest of each stage is the server's.

Dropouts (Bell et al. 2020's setting): the ``drop`` nodes answer the setup and
share-keys stages, then send nothing in the collect-masked-vectors stage; the
workflow reconstructs their pairwise-mask keys from their neighbours' shares.

Flower's output is the weighted mean of the survivors' (clipped, stochastically
quantised) vectors; with every weight 1 (``num_examples = max_weight = 1``) it is
the plain mean, so the sum is mean · |S|, exact up to |S| quantisation steps of
2·clipping_range / quantization_range per coordinate.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import flwr.compat.common.recorddict_compat as compat
import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from flwr.supercore.task_identity import TaskIdentity

RUN_ID = 7
SETUP_STAGES = ("setup_stage", "share_keys_stage")
ROUND_STAGES = ("collect_masked_vectors_stage", "unmask_stage")


@dataclass(frozen=True, kw_only=True)
class FlowerParams:
    """SecAggPlusWorkflow's parameters (its defaults but for the two it requires)."""

    num_shares: int
    reconstruction_threshold: int
    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32

    @property
    def step(self) -> float:
        """One quantisation step: each client's rounding error is below it."""
        return 2 * self.clipping_range / self.quantization_range


@dataclass
class _Ledger:
    """What the grid saw: client CPU, transport CPU, bytes per node and direction."""

    client_cpu: dict[int, float] = field(default_factory=dict)
    transport_cpu: float = 0.0
    data_cpu: float = 0.0  # drawing the clients' vectors: neither side's protocol cost
    up: dict[int, int] = field(default_factory=dict)
    down: dict[int, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.client_cpu.clear()
        self.up.clear()
        self.down.clear()
        self.transport_cpu = 0.0
        self.data_cpu = 0.0


def _wire(content: RecordDict) -> tuple[RecordDict, int]:
    """``content`` after Flower's protobuf round trip, and its serialised size."""
    proto = recorddict_to_proto(content)
    return recorddict_from_proto(proto), proto.ByteSize()


class MemoryGrid:
    """A ``Grid`` delivering each message to its node's ClientApp at once, in order.

    Node ``i + 1`` holds ``vectors[i]`` (read when it trains); nodes in ``drop`` send no
    reply to the collect-masked-vectors stage (they dropped after sharing keys).
    """

    def __init__(self, vectors: Mapping[int, np.ndarray], drop: Iterable[int] = ()) -> None:
        self.vectors = vectors
        self.drop = set(drop)
        self.ledger = _Ledger()
        self._ids = itertools.count(1)
        self._replies: dict[str, Message] = {}
        self.contexts = {
            nid: Context(
                run_id=RUN_ID, node_id=nid, node_config={}, state=RecordDict(), run_config={}
            )
            for nid in range(1, len(vectors) + 1)
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def _train(self, msg: Message, ctxt: Context) -> Message:
        """The ClientApp's train function: this node's vector as a FitRes, weight 1."""
        t0 = time.process_time()
        x = np.asarray(self.vectors[msg.metadata.dst_node_id - 1], dtype=np.float64)
        self.ledger.data_cpu += time.process_time() - t0
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([x]), 1, {})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids, book = [], self.ledger
        for msg in messages:
            t0 = time.process_time()
            nid, mid = msg.metadata.dst_node_id, f"m{next(self._ids)}"
            meta = Metadata(
                run_id=RUN_ID, message_id=mid, src_node_id=0, dst_node_id=nid,
                reply_to_message_id="", group_id=msg.metadata.group_id,
                created_at=time.time(), ttl=3600.0, message_type=msg.metadata.message_type,
            )  # fmt: skip
            content, size = _wire(msg.content)
            book.down[nid] = book.down.get(nid, 0) + size
            stage = content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
            ids.append(mid)
            book.transport_cpu += time.process_time() - t0
            if nid in self.drop and stage == Stage.COLLECT_MASKED_VECTORS:
                continue  # dropped: no reply, ever
            t0 = time.process_time()
            incoming = Message(content, metadata=meta)
            reply = secaggplus_mod(incoming, self.contexts[nid], self._train)
            t1 = time.process_time()
            book.client_cpu[nid] = book.client_cpu.get(nid, 0.0) + t1 - t0
            back, size = _wire(reply.content)
            book.up[nid] = book.up.get(nid, 0) + size
            self._replies[mid] = Message(back, reply_to=incoming)
            book.transport_cpu += time.process_time() - t1
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None) -> list[Message]:
        return self.pull_messages(self.push_messages(messages))


@dataclass
class _Proxy:
    node_id: int


class _SumStrategy:
    """The legacy-strategy half the workflow calls: every node sampled, weight 1; keeps
    the aggregate (the survivors' mean) instead of updating a model."""

    def __init__(self, node_ids: Iterable[int]) -> None:
        self.node_ids = list(node_ids)
        self.mean: np.ndarray | None = None
        self.results = 0

    def configure_fit(self, server_round, parameters, client_manager):
        ins = FitIns(Parameters(tensors=[], tensor_type="numpy.ndarray"), {})
        return [(_Proxy(nid), ins) for nid in self.node_ids]

    def aggregate_fit(self, server_round, results, failures):
        if failures:
            raise RuntimeError(f"Flower SecAgg+ reported failures: {failures[:3]}")
        self.results = len(results)
        self.mean = parameters_to_ndarrays(results[0][1].parameters)[0]
        return None, {}


class _Nodes:
    """``client_manager.num_available()``, for the workflow's log line."""

    def __init__(self, n: int) -> None:
        self.n = n

    def num_available(self) -> int:
        return self.n


def _context(strategy: _SumStrategy, n: int) -> LegacyContext:
    state = RecordDict({"config": ConfigRecord({"current_round": 1}), "parameters": ArrayRecord()})
    base = Context(run_id=RUN_ID, node_id=0, node_config={}, state=state, run_config={})
    return LegacyContext(base, strategy=strategy, client_manager=_Nodes(n))


def run_flower(
    vectors: Mapping[int, np.ndarray], drop: Iterable[int], params: FlowerParams
) -> dict:
    """One SecAgg+ round of Flower over ``vectors`` (client i → node i + 1).

    Returns the survivors' sum (mean · |S|, Flower's quantisation) and the costs:
    server CPU and mean client CPU of the setup stages (setup, share keys) and of the
    round stages (collect masked vectors, unmask), mean bytes per node (protobuf size
    of each RecordDict, metadata excluded) up and down in each part.
    """
    # What Flower's ServerApp runtime sets before a workflow runs (flwr.server.compat.app).
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, RUN_ID, 0
    nodes = range(1, len(vectors) + 1)
    grid = MemoryGrid(vectors, drop=[i + 1 for i in drop])
    strategy = _SumStrategy(nodes)
    context = _context(strategy, len(nodes))
    workflow = SecAggPlusWorkflow(
        params.num_shares, params.reconstruction_threshold,
        max_weight=1.0, clipping_range=params.clipping_range,
        quantization_range=params.quantization_range, modulus_range=params.modulus_range,
    )  # fmt: skip
    state, out = WorkflowState(), {}
    for part, stages in (("setup", SETUP_STAGES), ("round", ROUND_STAGES)):
        grid.ledger.reset()
        t0 = time.process_time()
        for name in stages:
            if not getattr(workflow, name)(grid, context, state):
                raise RuntimeError(f"Flower SecAgg+ halted in {name}")
        total = time.process_time() - t0
        book = grid.ledger
        clients = sum(book.client_cpu.values()) - book.data_cpu
        served = max(len(book.client_cpu), 1)
        out[f"{part}_server_cpu_s"] = total - clients - book.transport_cpu
        out[f"{part}_client_cpu_s"] = clients / served
        out[f"{part}_up_bytes"] = sum(book.up.values()) / served
        out[f"{part}_down_bytes"] = sum(book.down.values()) / max(len(book.down), 1)
    survivors = len(nodes) - len(grid.drop)
    if strategy.mean is None or strategy.results != survivors:
        raise RuntimeError(f"Flower SecAgg+ aggregated {strategy.results} of {survivors}")
    out["total"] = strategy.mean * survivors
    out["survivors"] = survivors
    return out
