"""One round engine for every runtime: plan, send, collect, secure sum, strategy update.

A federated round is the same whatever carries the messages (the runtimes differ only
in their :class:`Transport`, in-process or Flower Grid: :mod:`fedpriv.federation.rounds`):

1. **plan**: the strategy's query, and which clients are asked (each independently
   w.p. ρ, from the server's private participation coins, :func:`round_plan`);
   under secure aggregation a round with fewer than :data:`MIN_PARTIES` asked is
   aborted *before anything is sent* (a "sum" of one vector is that vector);
2. **send / collect**: the :class:`Transport` asks the clients and returns what
   arrived (:class:`Replies`, each upload bound to its sender by the transport);
   every upload is **checked** (:mod:`fedpriv.federation.replies`: round, dtype,
   length, shares) and a malformed one is that client's dropout for the round;
3. **secure sum**: the shim's server (:class:`~fedpriv.federation.secagg.SecAggServer`)
   decides who survived, or aborts below the Shamir threshold t (under SecAgg+'s
   graph, :mod:`fedpriv.federation.secagg_topology`: survivors not connected, or a
   neighbourhood with fewer than t survivors); otherwise one consistency exchange
   (every survivor signs the survivor list; fewer than t signatures abort) and one
   unmask exchange through the transport, whose answers remove every self-mask and
   every pair mask with a dropped client;
4. **update**: the decoded sum (``None`` if aborted: nothing is released) goes to
   ``strategy.update``, which adds the noise through the ledger and range-checks the
   noisy value (:mod:`fedpriv.privacy.range_guard`); a sum beyond what honest clients
   can produce is discarded (:meth:`RoundEngine.deliver`): spent, counted as aborted.

:class:`RoundEngine` states these rules and the communication counts once. No Flower imports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fedpriv import logs
from fedpriv.federation.planning import (
    DEFAULT_SCALE,
    MIN_PARTIES,
    begin_strategy,
    check_participation,
    client_key,
    codec_for,
    participation_streams,
    round_plan,
)
from fedpriv.federation.protocol import Query, Strategy
from fedpriv.federation.replies import check_masked, check_plain
from fedpriv.federation.round_sums import RoundSums, _plain_sum
from fedpriv.federation.rounds import Communication, Replies, RoundDone, RoundPlan, Transport
from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggConfig,
)
from fedpriv.federation.secagg_consistency import VERIFY_KEY_BYTES, book_digest
from fedpriv.federation.secagg_store import SealedStore
from fedpriv.federation.secagg_topology import Sparse, topology_for
from fedpriv.federation.status import RoundAbortedError
from fedpriv.privacy.distributed import DistributedNoise, round_shares
from fedpriv.privacy.node_budget import strategy_plan
from fedpriv.privacy.randomness import PrivateStreams, SecretKey
from fedpriv.privacy.range_guard import ReleaseOutOfRange
from fedpriv.validation import check_probability

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) costs a ClientApp ~0.7 s to import
    from fedpriv.privacy.ledger import PrivacyLedger

PUBLIC_KEY_BYTES = 32  # one client's X25519 public key, uploaded once per run
KEY_UPLOAD_BYTES = PUBLIC_KEY_BYTES + VERIFY_KEY_BYTES  # with its Ed25519 verify key

log = logs.get_logger(__name__)

__all__ = [
    "DEFAULT_SCALE",
    "MIN_PARTIES",
    "PUBLIC_KEY_BYTES",
    "Communication",
    "Replies",
    "RoundDone",
    "RoundEngine",
    "RoundPlan",
    "Transport",
    "begin_strategy",
    "check_participation",
    "client_key",
    "codec_for",
    "participation_streams",
    "round_plan",
]


def _update_aborted(strategy: Strategy, query: Query) -> None:
    """``strategy.update(query, None)``: a round that released nothing. A strategy that
    cannot go on without it (its own error) ends the run as :class:`RoundAbortedError`."""
    try:
        strategy.update(query, None)
    except Exception as err:  # whatever it raised, the aborted round is the cause
        raise RoundAbortedError(query.round, err) from err


class RoundEngine(RoundSums):
    """Runs rounds over a :class:`Transport`: the abort rules and counts live here only.

    Parameters
    ----------
    transport : Transport
        What carries the messages.
    n_clients : int
        K; clients are positions 0..K−1.
    max_records : int
        Public bound on records per client (the fixed-point range).
    participation : float
        ρ in (0, 1]: each client is asked independently w.p. ρ.
    dropout_rate : float
        Probability that an asked client's upload is lost (simulated; in-process only).
    secure_aggregation : bool
        Masked sums (default) or plain fixed-point sums (in-process benchmarks).
    secagg : SecAggConfig, optional
        The Shamir threshold rule (default: a strict majority) and SecAgg+'s targets;
        the sparse graph only at participation 1 (:mod:`fedpriv.federation.secagg_topology`).
    scale : float
        Fixed-point scale; must be :data:`DEFAULT_SCALE`.
    communication : Communication, optional
        Where to count (default: a fresh one); a runtime passes its own to tally across runs.
    noise : DistributedNoise, optional
        Distributed noise (:mod:`fedpriv.privacy.distributed`): each asked client adds
        its share inside secure aggregation; a round with fewer than m = n − f
        survivors is aborted before the unmask. ``None`` (default): central noise.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        n_clients: int,
        max_records: int,
        participation: float = 1.0,
        dropout_rate: float = 0.0,
        secure_aggregation: bool = True,
        secagg: SecAggConfig | None = None,
        scale: float = DEFAULT_SCALE,
        communication: Communication | None = None,
        noise: DistributedNoise | None = None,
    ) -> None:
        if noise is not None and not secure_aggregation:
            raise ValueError(
                "noise: distributed noise protects against the server only inside secure "
                "aggregation; set secure-aggregation = true (got false)"
            )
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must lie in [0, 1); got {dropout_rate!r}")
        self.transport = transport
        self.n_clients = n_clients
        self.max_records = max_records
        self.participation = check_probability("participation", participation)
        self.dropout_rate = dropout_rate
        self.secure = secure_aggregation
        # Random subsets: no sparse graph, one round per batch of seeds.
        self.secagg = (secagg or SecAggConfig()).for_participation(self.participation)
        self.graph: Sparse | None = None  # the run's SecAgg+ graph, set by setup_keys
        self.book_digest: bytes | None = None  # the key book's digest, set by setup_keys
        self.scale = scale
        self.communication = communication or Communication(n_clients)
        self._codecs: dict[tuple[float, int], FixedPointCodec] = {}
        self._fates: PrivateStreams | None = None
        self.noise = noise
        self._strategy: Strategy | None = None
        self._ledger: PrivacyLedger | None = None
        self.sealed = SealedStore()  # the clients' sealed seed shares, kept across rounds

    # -- set-up ----------------------------------------------------------------
    def setup_keys(self) -> None:
        """The key exchange (two exchanges, as over Flower: upload keys, pin the book), then
        the run's SecAgg+ graph from the transport's run id and the key book, as every
        client derives it (``None``: the complete graph)."""
        self.transport.setup_keys()
        self.communication.round_trips += 2
        self.communication.bytes_uploaded += KEY_UPLOAD_BYTES
        run_id = getattr(self.transport, "run_id", None)
        if run_id is not None:
            public, verify = self.transport.key_book
            self.book_digest = book_digest(public, verify)  # fixed for the run: kept
            self.graph = topology_for(
                self.secagg, ids=public, run_id=str(run_id), book_digest=self.book_digest
            )

    def begin(
        self,
        strategy: Strategy,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        seed: int,
        secret_key: SecretKey,
        noise_stream: str = "noise",
    ) -> None:
        """Start ``strategy`` (:func:`begin_strategy`); participation coins from ``secret_key``
        (per round index: a later strategy's rounds must use indices of their own).
        A strategy planned for another ρ than this engine's is refused first
        (:func:`check_participation`)."""
        check_participation(strategy, self.participation)
        if self.noise is not None:
            if ledger is not None:
                ledger.use_distributed_noise(self.noise)
            if not callable(getattr(strategy, "noise_std", None)):
                raise ValueError(
                    f"noise: {type(strategy).__name__} has no distributed form (its rounds "
                    "declare no Gaussian noise); use noise = 'central'"
                )
        self._strategy = strategy
        self._ledger = ledger
        begin_strategy(
            strategy,
            n_features=n_features,
            ledger=ledger,
            seed=seed,
            secret_key=secret_key,
            noise_stream=noise_stream,
        )
        self._fates = participation_streams(secret_key)
        declare = getattr(self.transport, "declare_plan", None)
        if declare is not None and getattr(self.transport, "wants_plan", True):
            declare(strategy_plan(strategy, ledger, stage=noise_stream))

    # -- rounds ------------------------------------------------------------------
    def plan(self, query: Query) -> RoundPlan:
        """Who is asked in ``query``'s round; aborted (no codec) if too few for a secure sum."""
        if self._fates is None:
            raise RuntimeError("begin() must run before the first round")
        asked, lost = round_plan(
            self._fates, query.round, self.n_clients, self.participation, self.dropout_rate
        )
        if self.secure and len(asked) < MIN_PARTIES:
            # A "sum" of one vector is that client's vector: send nothing, release nothing.
            return RoundPlan(query=query, asked=asked, lost=frozenset(lost))
        shape = (query.record_bound, len(asked))
        if (codec := self._codecs.get(shape)) is None:
            codec = self._codecs[shape] = codec_for(
                query.record_bound, self.max_records, len(asked) or 1, self.scale
            )
        noise = None
        if self.noise is not None:
            noise = self._shares(query, asked, codec)
            if noise is None:  # fewer than two would survive f dropouts: send nothing
                return RoundPlan(query=query, asked=asked, lost=frozenset(lost))
        t = None  # the announced Shamir threshold: the neighbourhood's, or the round's
        if self.secure:
            t = self.graph.threshold if self.graph else self.secagg.effective_threshold(len(asked))
        return RoundPlan(
            query=query, asked=asked, lost=frozenset(lost), codec=codec, noise=noise,
            graph=self.graph if self.secure else None, threshold=t,
            resend=self.sealed.resend(query.round, asked) if self.secure else None,
            rounds_left=self._rounds_left(query) if self.secure else None,
        )  # fmt: skip

    def _rounds_left(self, query: Query) -> int | None:
        """The strategy's rounds from ``query``'s on (its ``config.rounds``, the run's
        rounds by the :class:`Strategy` contract, round ids counted from 0), else ``None``."""
        total = getattr(getattr(self._strategy, "config", None), "rounds", None)
        if type(total) is int and 0 <= query.round < total:
            return total - query.round
        return None

    def _shares(self, query: Query, asked: list[int], codec: FixedPointCodec):
        """The round's shares (:func:`~fedpriv.privacy.distributed.round_shares`)."""
        std = self._strategy.noise_std(query) if self._strategy is not None else None
        if std is None:
            raise ValueError(
                f"round {query.round}: the strategy declares no noise for this query, and a "
                "distributed run never sends a query whose sum would be released exact"
            )
        worst = codec.max_summands * (codec.max_abs * codec.scale + 0.5)
        try:
            return round_shares(
                std, asked=len(asked), setting=self.noise, dims=query.reply_length,
                headroom=float(2**63 - 1) - worst,
            )  # fmt: skip
        except ValueError as err:
            raise ValueError(f"round {query.round}: {err}") from None

    def finish(self, plan: RoundPlan, replies: Replies | None) -> np.ndarray | None:
        """Count the round's uploads and sum them: the decoded sum, or ``None`` (aborted)."""
        comm = self.communication
        comm.rounds += 1
        if plan.aborted:
            comm.rounds_aborted += 1
            return None
        if replies is None:
            raise ValueError(f"round {plan.query.round} was sent: its replies are required")
        if stray := sorted(set(replies.senders) - set(plan.asked)):
            raise ValueError(f"the transport returned uploads from clients never asked: {stray}")
        if len(set(replies.senders)) != len(replies.senders):
            raise ValueError(f"the transport returned one client twice: {replies.senders}")
        comm.round_trips += 1
        comm.client_errors += replies.errors
        replies = self._screen(plan, replies)
        n = plan.query.reply_length
        for u in replies.senders:
            comm.floats_uploaded[u] += n
            if self.secure:
                m = replies.masked[u]
                comm.bytes_uploaded[u] += 8 * m.vector.size + sum(map(len, m.shares.values()))
            else:
                comm.bytes_uploaded[u] += 8 * n
        if self.secure:
            aggregate = self._secure_sum(plan, replies)
        else:
            aggregate = _plain_sum(plan, replies)
        if aggregate is None:
            comm.rounds_aborted += 1
        return aggregate

    def _screen(self, plan: RoundPlan, replies: Replies) -> Replies:
        """The well-formed uploads; each malformed one is its sender's dropout (logged)."""
        q = plan.query
        keep, masked, plain, rejected = [], {}, [], 0
        rows = replies.plain
        for i, u in enumerate(replies.senders):
            if self.secure:
                m = replies.masked.get(u)
                near = None if plan.graph is None else plan.graph.neighbours(u)
                why = check_masked(
                    m, sender=u, round_id=q.round, n=q.reply_length, participants=plan.asked,
                    addressees=near, sealed_due=plan.resend is None or u in plan.resend,
                    max_batch=self.secagg.seed_batch,
                )  # fmt: skip
            else:
                m = rows[i]
                why = check_plain(m, n=q.reply_length, max_abs=plan.codec.max_abs)
            if why is not None:
                rejected += 1
                log.warning(
                    "round %d: upload of client %d refused (%s); it counts as a dropout",
                    q.round,
                    u,
                    why,
                )
                continue
            keep.append(u)
            if self.secure:
                masked[u] = m
            else:
                plain.append(m)
        if not rejected:
            return replies
        self.communication.rejected_replies += rejected
        return Replies(senders=tuple(keep), masked=masked, plain=plain, errors=replies.errors)

    def deliver(self, strategy: Strategy, query: Query, aggregate: np.ndarray | None) -> bool:
        """``strategy.update`` with the round's sum; ``True`` if the round released it.

        A sum whose noisy release fails the range check
        (:class:`~fedpriv.privacy.range_guard.ReleaseOutOfRange`, raised before the
        strategy changes any state) is discarded: the round's event stays in the
        ledger, and the strategy gets the round as aborted (``None``).
        """
        if aggregate is None:
            _update_aborted(strategy, query)
            return False
        try:
            strategy.update(query, aggregate)
        except ReleaseOutOfRange as err:
            comm = self.communication
            comm.rounds_aborted += 1
            comm.rounds_discarded += 1
            log.warning("round %d: %s", query.round, err)
            _update_aborted(strategy, query)
            return False
        self.communication.rounds_released += 1
        return True

    def run_round(self, query: Query) -> np.ndarray | None:
        """One whole round through the transport: plan, ask (unless aborted), sum."""
        plan = self.plan(query)
        return self.finish(plan, None if plan.aborted else self.transport.ask(plan))

    def run(
        self, strategy: Strategy, *, on_round: Callable[[RoundDone], None] | None = None
    ) -> Strategy:
        """Every round of an already begun ``strategy``; returns it. ``on_round``: called
        after each round with its :class:`RoundDone` (a progress bar)."""
        while (query := strategy.next_query()) is not None:
            released = self.deliver(strategy, query, self.run_round(query))
            if on_round is not None:
                on_round(RoundDone(round=query.round, released=released, ledger=self._ledger))
        return strategy
