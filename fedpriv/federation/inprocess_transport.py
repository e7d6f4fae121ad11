"""The in-process runtime's transport: the engine's rounds to clients in this process.

:class:`InProcessTransport` is the :class:`~fedpriv.federation.engine.Transport`
of :class:`~fedpriv.federation.runtime.InProcessRuntime` (its protocol is told in
:mod:`fedpriv.federation.runtime`): each responding client Poisson-samples its
rows with coins from its own key, answers through its handler, and masks its
reply in its own ``SecAggClient``; node ledgers refuse what their plan does not
allow. Kept apart from the runtime, which only wires a run together;
re-exported from :mod:`fedpriv.federation.runtime`.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv.errors import public_error
from fedpriv.federation.engine import Replies, RoundPlan
from fedpriv.federation.protocol import ClientData, ClientHandler, client_sample
from fedpriv.federation.rounds import UnmaskRequest
from fedpriv.federation.secagg import SecAggClient, SecAggConfig, UnmaskAnswer
from fedpriv.federation.secagg_batch import mask_many
from fedpriv.privacy.distributed import draw_share, share_streams
from fedpriv.privacy.node_budget import NodeLedger, NodeRefusal
from fedpriv.privacy.randomness import SecretKey

logger = logging.getLogger(__name__)


class InProcessTransport:
    """The engine's transport to handlers and ``SecAggClient`` objects in this process.

    Client position i is ``clients[i]``; its secure-aggregation id is i (the
    partition id over Flower), its secret key ``client_key(run key, client_id)``.
    ``node_min_threshold`` is every node's own Shamir threshold floor (node-config
    ``secagg-min-threshold`` over Flower; ``None``: the run's ``secagg`` as is);
    each node refuses a round whose announced t, the run's, is below it.
    """

    def __init__(
        self,
        *,
        clients: Sequence[ClientData],
        handler: ClientHandler,
        client_keys: Sequence[SecretKey],
        secure_aggregation: bool,
        secagg: SecAggConfig,
        vectorised: bool,
        node_ledgers: Sequence[NodeLedger | None] = (),
        node_min_threshold: float | None = None,
    ) -> None:
        self.clients = list(clients)
        # Each node's own ledger (None: no policy), consulted before its rows are read.
        self.node_ledgers = list(node_ledgers) or [None] * len(self.clients)
        self.run_id = secrets.token_hex(8)  # public: names this run in the nodes' ledgers
        self.stage = "noise"
        self.handler = handler
        self.client_keys = list(client_keys)
        # Client c's round-r coins: substream r of its own key's "poisson" streams
        # (the Flower ClientApp derives the very same one from the same key).
        self.streams = [k.streams("poisson") for k in self.client_keys]
        self.share_streams = [share_streams(k) for k in self.client_keys]  # distributed noise
        self.secure = secure_aggregation
        self.secagg = secagg
        self.node_secagg = secagg  # what each node enforces: its floor, the run's rule
        if node_min_threshold is not None:
            self.node_secagg = dataclasses.replace(
                secagg, min_threshold_fraction=node_min_threshold
            )
        self.vectorised = vectorised and hasattr(handler, "answer_many")
        self.states: list[dict[str, Any]] = [{} for _ in self.clients]
        self.shared_state: dict[str, Any] = {}
        self.parties: list[SecAggClient] = []
        self._book: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})
        self._lists: tuple = (None, None)  # (round, (S, D)) of the latest consistency round

    def setup_keys(self) -> None:
        self.parties = [
            SecAggClient(client_id=i, config=self.node_secagg) for i in range(len(self.clients))
        ]
        keys = {p.client_id: p.public_key for p in self.parties}
        verify = {p.client_id: p.verify_key for p in self.parties}
        for p in self.parties:
            # Pins the key book; derives the run's graph from it and the public run id.
            p.setup(keys, verify_keys=verify, run_id=self.run_id)
        self._book = (keys, verify)

    @property
    def key_book(self) -> tuple[dict[int, bytes], dict[int, bytes]]:
        """(public keys, verify keys) as broadcast at the key exchange."""
        return self._book

    @property
    def wants_plan(self) -> bool:
        """Whether any node keeps a ledger (else no plan is built: it costs an accounting)."""
        return any(led is not None for led in self.node_ledgers)

    def declare_plan(self, plan: dict) -> None:
        """Every node with a policy admits the plan, or the run stops before any round."""
        self.stage = str(plan["stage"])
        for i, led in enumerate(self.node_ledgers):
            if led is not None:
                try:
                    led.admit_plan(self.run_id, plan, self.handler_of)
                except NodeRefusal as err:
                    raise NodeRefusal(f"client {i}: {err}") from None

    def handler_of(self, method: str) -> ClientHandler:
        """The client half a node derives sensitivities from: the one that answers here."""
        return self.handler

    def _refused(self, plan: RoundPlan) -> dict[int, Exception]:
        """The asked nodes whose own ledger or threshold floor refuses this query (before
        any row is read, as the ClientApp does)."""
        out: dict[int, Exception] = {}
        for i in plan.asked:
            if self.secure and self.parties:
                try:  # the announced t and neighbourhood against the node's own derivation
                    self.parties[i].check_threshold(max(len(plan.asked), 2), plan.threshold)
                    self.parties[i].check_neighbourhood(_announced(plan, i))
                except ValueError as err:
                    out[i] = err
                    continue
            led = self.node_ledgers[i]
            if led is None:
                continue
            share = None
            if plan.noise is not None:
                share = (plan.noise.share_std, plan.noise.min_survivors)
            try:
                led.admit_query(self.run_id, self.stage, plan.query, self.handler_of, share=share)
            except NodeRefusal as err:
                out[i] = err
        return out

    def ask(self, plan: RoundPlan) -> Replies:
        query, asked, lost = plan.query, plan.asked, plan.lost
        r, n = query.round, query.reply_length
        refused = self._refused(plan)
        samples = {
            i: client_sample(self.clients[i], query.sampling_rate, self.streams[i].at(r))
            for i in asked
        }
        if self.vectorised and asked and not refused:
            # One call for all clients (identical replies, see answer_many).
            empty = np.zeros(0, dtype=np.intp)
            every = [samples.get(i, empty) for i in range(len(self.clients))]
            batch = self.handler.answer_many(
                query, self.clients, every, self.shared_state, self.client_keys
            )
            if not self.secure and not lost and batch.shape[1:] == (n,):
                # Plain sums of everyone's rows: no per-client bookkeeping needed.
                rows = batch[asked] if len(asked) < batch.shape[0] else batch
                return Replies(senders=tuple(asked), plain=rows)
            vectors = {i: batch[i] for i in asked}
        else:
            vectors = dict(refused)  # a refusing node answers nothing: its error
            for i in asked:
                if i in refused:
                    continue
                try:
                    vectors[i] = self.handler.answer(
                        query, self.clients[i], samples[i], self.states[i], self.client_keys[i]
                    )
                except Exception as err:
                    vectors[i] = err
        if self.secure:
            vectors = {**vectors, **self._mask_all(plan, vectors, lost, asked)}
        senders, plain, masked, errors = [], [], {}, 0
        for i, vec in vectors.items():
            if i in lost:
                continue  # answered, but the upload never arrives
            try:
                if isinstance(vec, Exception):
                    raise vec
                if self.secure:
                    masked[i] = vec  # masked by the client's own party (_mask_all)
                else:
                    plain.append(vec)  # the engine checks it before it enters the sum
            except Exception as err:
                errors += 1
                # The public part at WARNING (a code, a column); the text may quote data.
                logger.warning("client %d failed in round %d: %s", i, r, public_error(err))
                logger.debug("client %d's failure in round %d", i, r, exc_info=err)
                continue
            senders.append(i)
        return Replies(senders=tuple(senders), masked=masked, plain=plain, errors=errors)

    def _mask_all(self, plan: RoundPlan, vectors: dict, lost, asked) -> dict:
        """Every answering client's masked input (or its error), its own party masking its
        vector: all at once (:func:`~fedpriv.federation.secagg_batch.mask_many`)."""
        r, n = plan.query.round, plan.query.reply_length
        todo = [i for i, v in vectors.items() if i not in lost and not isinstance(v, Exception)]
        options, asked = [], tuple(asked)  # one tuple for every party: checked once
        for i in todo:
            share = None
            if plan.noise is not None:  # the client's own share, its own stream
                share = draw_share(self.share_streams[i], r, n, plan.noise.share_std)
            # The client's own shim refuses a malformed vector (length, NaN, bound).
            options.append(dict(
                round_id=r, participants=asked, codec=plan.codec, noise=share,
                threshold=plan.threshold, neighbours=_announced(plan, i),  # announced
                min_survivors=None if plan.noise is None else plan.noise.min_survivors,
                public_keys=None, resend=plan.resend is None or i in plan.resend,
                rounds_left=plan.rounds_left,
            ))  # fmt: skip
        done = mask_many([self.parties[i] for i in todo], [vectors[i] for i in todo], options)
        return dict(zip(todo, done, strict=True))

    def consistency(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int]
    ) -> dict[int, bytes]:
        signatures, lists = {}, (tuple(survivors), tuple(dropped))  # one object: checked once
        self._lists = (plan.query.round, lists)  # the unmask passes the same objects
        for u in survivors:
            try:
                signatures[u] = self.parties[u].sign_survivors(
                    round_id=plan.query.round, survivors=lists[0], dropped=lists[1]
                )
            except ValueError as err:  # a refusal: that survivor does not sign
                logger.warning(
                    "client %d refused to sign the survivors of round %d: %s",
                    u, plan.query.round, err,
                )  # fmt: skip
        return signatures

    def unmask(self, request: UnmaskRequest) -> dict[int, UnmaskAnswer]:
        answers, r = {}, request.plan.query.round
        survivors, dropped = tuple(request.survivors), tuple(request.dropped)  # checked once
        if self._lists[0] == r and self._lists[1] == (survivors, dropped):
            survivors, dropped = self._lists[1]  # the very objects each survivor signed
        for u in survivors:
            led = self.node_ledgers[u]
            try:
                answers[u] = self.parties[u].unmask(
                    round_id=r, survivors=survivors, dropped=dropped,
                    n=request.plan.query.reply_length, inbox=request.inboxes[u],
                    signatures=request.signatures_for(u),
                )  # fmt: skip
            except ValueError as err:  # a refusal: that survivor stays silent
                logger.warning("client %d refused the unmask of round %d: %s", u, r, err)
                if led is not None:
                    led.note("unmask-refused", run=self.run_id, round=r, reason=str(err))
                continue
            if led is not None:
                led.note("unmask", run=self.run_id, round=r, survivors=len(survivors),
                         dropped=len(dropped))  # fmt: skip
        return answers


def _announced(plan: RoundPlan, client: int) -> tuple[int, ...] | None:
    """The neighbourhood the server announces to ``client`` (``None``: complete graph)."""
    return None if plan.graph is None else plan.graph.neighbours(client)
