"""In-process runtime: K clients in one process, the same protocol as Flower.

Per round the shared :class:`~fedpriv.federation.engine.RoundEngine` (1) asks the
strategy for a query, (2) draws which clients respond, each independently with
probability ρ, (3) lets every responding client Poisson-sample its records at
rate q with coins from its own private key (never from the public seed) and
answer through its handler, (4) sums the replies through the secure-aggregation
shim (double masking in a 64-bit ring, then one consistency exchange, the survivors'
signatures on the survivor list, and one unmask exchange; the strategy
sees only the decoded sum) and (5) hands the sum to the strategy, which adds
noise through the ledger before releasing anything. This module is the engine's
in-process :class:`~fedpriv.federation.engine.Transport`.

Simulated dropouts (``dropout_rate``) exercise the shim's recovery: in the
round's unmask exchange survivors also reveal that round's pair masks with the
missing clients; a round that cannot be recovered (fewer than t survivors) is
aborted and releases nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.errors import public_error
from fedpriv.federation.engine import (
    DEFAULT_SCALE,
    MIN_PARTIES,
    Communication,
    Replies,
    RoundDone,
    RoundEngine,
    RoundPlan,
    begin_strategy,
    client_key,
    codec_for,
    participation_streams,
    round_plan,
)
from fedpriv.federation.protocol import ClientData, ClientHandler, Strategy, poisson_sample
from fedpriv.federation.secagg import SecAggClient, SecAggConfig, UnmaskAnswer
from fedpriv.privacy.distributed import (
    DERIVED_KEYS_CAVEAT,
    DistributedNoise,
    draw_share,
    share_streams,
)
from fedpriv.privacy.node_budget import NodeLedger, NodeRefusal
from fedpriv.privacy.randomness import SecretKey
from fedpriv.validation import check_probability

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) costs a ClientApp ~0.7 s to import
    from fedpriv.privacy.ledger import PrivacyLedger

__all__ = [
    "DEFAULT_SCALE",
    "MIN_PARTIES",
    "Communication",
    "InProcessRuntime",
    "InProcessTransport",
    "begin_strategy",
    "client_key",
    "codec_for",
    "participation_streams",
    "round_plan",
]

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

    def setup_keys(self) -> None:
        self.parties = [
            SecAggClient(client_id=i, config=self.node_secagg) for i in range(len(self.clients))
        ]
        keys = {p.client_id: p.public_key for p in self.parties}
        verify = {p.client_id: p.verify_key for p in self.parties}
        for p in self.parties:
            p.setup(keys, verify_keys=verify)  # pins the key book
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
                try:  # the announced t, the run's, against the node's own rule
                    t = self.secagg.effective_threshold(max(len(plan.asked), 2))
                    self.parties[i].check_threshold(max(len(plan.asked), 2), t)
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
            i: poisson_sample(self.clients[i].n, query.sampling_rate, self.streams[i].at(r))
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
        senders, plain, masked, errors = [], [], {}, 0
        for i, vec in vectors.items():
            if i in lost:
                continue  # answered, but the upload never arrives
            try:
                if isinstance(vec, Exception):
                    raise vec
                if self.secure:
                    share = None
                    if plan.noise is not None:  # the client's own share, its own stream
                        share = draw_share(self.share_streams[i], r, n, plan.noise.share_std)
                    # The client's own shim refuses a malformed vector (length, NaN, bound).
                    masked[i] = self.parties[i].mask(
                        vec, round_id=r, participants=asked, codec=plan.codec, noise=share,
                        threshold=self.secagg.effective_threshold(len(asked)),  # announced
                        min_survivors=None if plan.noise is None else plan.noise.min_survivors,
                    )  # fmt: skip
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

    def consistency(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int]
    ) -> dict[int, bytes]:
        signatures = {}
        for u in survivors:
            try:
                signatures[u] = self.parties[u].sign_survivors(
                    round_id=plan.query.round, survivors=survivors, dropped=dropped
                )
            except ValueError as err:  # a refusal: that survivor does not sign
                logger.warning(
                    "client %d refused to sign the survivors of round %d: %s",
                    u, plan.query.round, err,
                )  # fmt: skip
        return signatures

    def unmask(
        self,
        plan: RoundPlan,
        survivors: list[int],
        dropped: list[int],
        inboxes: Mapping[int, Mapping[int, bytes]],
        signatures: Mapping[int, bytes],
    ) -> dict[int, UnmaskAnswer]:
        answers, r = {}, plan.query.round
        for u in survivors:
            led = self.node_ledgers[u]
            try:
                answers[u] = self.parties[u].unmask(
                    round_id=r,
                    survivors=survivors,
                    dropped=dropped,
                    n=plan.query.reply_length,
                    inbox=inboxes[u],
                    signatures=signatures,
                )
            except ValueError as err:  # a refusal: that survivor stays silent
                logger.warning("client %d refused the unmask of round %d: %s", u, r, err)
                if led is not None:
                    led.note("unmask-refused", run=self.run_id, round=r, reason=str(err))
                continue
            if led is not None:
                led.note("unmask", run=self.run_id, round=r, survivors=len(survivors),
                         dropped=len(dropped))  # fmt: skip
        return answers


class InProcessRuntime:
    """Runs a strategy against K in-process clients.

    Parameters
    ----------
    clients : sequence of ClientData
        Each client's rows.
    handler : ClientHandler
        The method's client half.
    seed : int
        Public run seed: public randomness only (tree structure, thresholds,
        initial weights; ``fedpriv.seeding``).
    secret_key : SecretKey or bytes, optional
        Key of the private randomness (noise, Poisson coins, participation,
        mechanism draws). ``None`` (default): a fresh key from OS entropy.
        Inject one only to reproduce a run; it is never logged or saved. A
        key from :meth:`SecretKey.from_public_seed` marks the run uncertified.
    participation : float, optional
        ρ in (0, 1]: each client answers a round independently w.p. ρ. ``None``
        (default): the ρ the strategy was planned for (its ``participation``, from
        :class:`~fedpriv.methods.StrategyContext`), else 1. Given, it must be that ρ:
        a strategy planned for another is refused before any round
        (:func:`~fedpriv.federation.engine.check_participation`).
    secure_aggregation : bool
        Sum through the masking shim (default) or plain fixed-point sums
        (identical result; for large benchmarks).
    dropout_rate : float
        Probability that an asked client's reply is lost (tests the recovery).
    max_records : int, optional
        Public bound on records per client for the fixed-point range
        (default: the largest client's size, public under the trust model).
    vectorised : bool
        Use the handler's ``answer_many`` (all clients in one call) when it
        has one; replies are bit-identical to per-client ``answer`` calls.
    secagg : SecAggConfig, optional
        Secure aggregation's public parameters (the Shamir threshold rule;
        default ``SecAggConfig()``: a strict majority of each round's participants).
    noise : DistributedNoise, optional
        Distributed noise (:mod:`fedpriv.privacy.distributed`): the clients add the
        noise inside secure aggregation. ``None`` (default): the server adds it. In
        process every client key derives from the run's key, which the server side
        holds too, so such a run's report says ``certified: false``
        (:data:`~fedpriv.privacy.distributed.DERIVED_KEYS_CAVEAT`): the protocol is
        exercised, its trust claim is not.
    node_ledgers : sequence of NodeLedger or None, optional
        Each client's own ledger and policy (:mod:`fedpriv.privacy.node_budget`):
        it admits the declared plan or stops the run, and refuses any query beyond it.
    node_min_threshold : float, optional
        Every node's own Shamir threshold floor in [0.5, 1] (:class:`InProcessTransport`).
    """

    def __init__(
        self,
        *,
        clients: Sequence[ClientData],
        handler: ClientHandler,
        seed: int,
        secret_key: SecretKey | bytes | None = None,
        participation: float | None = None,
        secure_aggregation: bool = True,
        dropout_rate: float = 0.0,
        max_records: int | None = None,
        scale: float = DEFAULT_SCALE,
        vectorised: bool = True,
        secagg: SecAggConfig | None = None,
        noise: DistributedNoise | None = None,
        node_ledgers: Sequence[NodeLedger | None] = (),
        node_min_threshold: float | None = None,
    ) -> None:
        if not clients:
            raise ValueError("need at least one client")
        if secure_aggregation and len(clients) < MIN_PARTIES:
            # Refused before anything runs: every round would abort (a "sum" of one
            # client's vector is that vector) and the run would release nothing.
            raise ValueError(
                f"clients: secure aggregation needs at least {MIN_PARTIES} clients "
                f"(allowed [{MIN_PARTIES}, inf)); got {len(clients)}"
            )
        self.clients = list(clients)
        self.handler = handler
        self.seed = seed
        self.secret_key = SecretKey.coerce(secret_key)
        self.participation = (
            None if participation is None else check_probability("participation", participation)
        )
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must lie in [0, 1); got {dropout_rate!r}")
        self.dropout_rate = dropout_rate
        self.secure_aggregation = secure_aggregation
        self.max_records = max_records or max(c.n for c in self.clients)
        self.scale = scale
        self.vectorised = vectorised and hasattr(handler, "answer_many")
        self.communication = Communication(len(self.clients))
        self.secagg = secagg or SecAggConfig()
        self.noise = noise
        if node_ledgers and len(node_ledgers) != len(self.clients):
            raise ValueError(
                f"node_ledgers: one per client ({len(self.clients)}); got {len(node_ledgers)}"
            )
        self.node_ledgers = list(node_ledgers)
        self.node_min_threshold = node_min_threshold

    def run(
        self,
        strategy: Strategy,
        *,
        ledger: PrivacyLedger | None,
        on_round: Callable[[RoundDone], None] | None = None,
    ) -> Strategy:
        """Train ``strategy`` to completion; returns it (holding the released model).
        ``on_round``: called after each round (:class:`~fedpriv.federation.engine.RoundDone`)."""
        rho = self.participation
        if rho is None:  # one ρ: the strategy's, which its accounting was planned for
            rho = float(getattr(strategy, "participation", None) or 1.0)
        key = self.secret_key
        if self.noise is not None and ledger is not None:
            # client_key(run key, i) below: whoever holds the run key recomputes every share.
            ledger.mark_uncertified(DERIVED_KEYS_CAVEAT)
        transport = InProcessTransport(
            clients=self.clients,
            handler=self.handler,
            client_keys=[client_key(key, c.client_id) for c in self.clients],
            secure_aggregation=self.secure_aggregation,
            secagg=self.secagg,
            vectorised=self.vectorised,
            node_ledgers=self.node_ledgers,
            node_min_threshold=self.node_min_threshold,
        )
        engine = RoundEngine(
            transport,
            n_clients=len(self.clients),
            max_records=self.max_records,
            participation=rho,
            dropout_rate=self.dropout_rate,
            secure_aggregation=self.secure_aggregation,
            secagg=self.secagg,
            scale=self.scale,
            communication=self.communication,  # a tally across runs, as before
            noise=self.noise,
        )
        engine.begin(
            strategy,
            n_features=self.clients[0].X.shape[1],
            ledger=ledger,
            seed=self.seed,
            secret_key=key,
        )
        if self.secure_aggregation:
            engine.setup_keys()
        return engine.run(strategy, on_round=on_round)
