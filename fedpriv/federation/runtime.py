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

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from fedpriv.federation.engine import (
    DEFAULT_SCALE,
    MIN_PARTIES,
    Communication,
    RoundDone,
    RoundEngine,
    begin_strategy,
    client_key,
    codec_for,
    participation_streams,
    round_plan,
)
from fedpriv.federation.inprocess_transport import InProcessTransport
from fedpriv.federation.protocol import ClientData, ClientHandler, Strategy
from fedpriv.federation.secagg import SecAggConfig
from fedpriv.federation.secagg_common import RUN_SEED_BATCH
from fedpriv.federation.secagg_server import forget_latest
from fedpriv.privacy.distributed import DERIVED_KEYS_CAVEAT, DistributedNoise
from fedpriv.privacy.node_budget import NodeLedger
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
        Secure aggregation's public parameters (the Shamir threshold rule and SecAgg+'s
        targets; default ``SecAggConfig(seed_batch=RUN_SEED_BATCH)``: a strict majority of
        each round's participants, or of each neighbourhood once K is large enough for
        the sparse graph, :mod:`fedpriv.federation.secagg_topology`; participation 1
        only; seeds shared 16 rounds at a time, :mod:`fedpriv.federation.secagg_seeds`).
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
        self.secagg = secagg or SecAggConfig(seed_batch=RUN_SEED_BATCH)  # a run's default
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
        # SecAgg+'s sparse graph and batches of seeds only when every client answers.
        secagg = self.secagg.for_participation(rho)
        transport = InProcessTransport(
            clients=self.clients,
            handler=self.handler,
            client_keys=[client_key(key, c.client_id) for c in self.clients],
            secure_aggregation=self.secure_aggregation,
            secagg=secagg,
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
            secagg=secagg,
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
        if not self.secure_aggregation:
            return engine.run(strategy, on_round=on_round)
        large = len(self.clients) >= LARGE_RUN and not gc.get_freeze_count()
        engine.setup_keys()
        try:
            with _long_lived(large):
                return engine.run(strategy, on_round=on_round)
        finally:
            forget_latest()  # the process-wide memos of the run's latest round


#: Clients from which an in-process secure run sets its key material aside (below: tiny).
LARGE_RUN = 100


@contextlib.contextmanager
def _long_lived(active: bool) -> Iterator[None]:
    """A large run's key material, set up: left out of the cycle collector's full passes.

    K parties' pair keys and ciphers (at K = 1,000 and k = 196, about a million tracked
    objects) live until the run ends; each full collection during the rounds would walk
    them all again (about 0.4 s CPU at K = 1,000). :func:`gc.freeze` sets everything alive
    once the keys are set up aside until :func:`gc.unfreeze` at the run's end: garbage
    cycles that exist by then are collected after the run, not during it. A process that
    froze objects itself (a pre-fork server) is left as it is; of two runs in threads of
    one process, the first to end thaws both sets (time, not results).
    """
    if not active:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
