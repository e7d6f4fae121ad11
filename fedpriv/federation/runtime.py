"""In-process runtime: K clients in one process, the same protocol as Flower.

Per round the runtime (1) asks the strategy for a query, (2) draws which
clients respond, each independently with probability ρ, (3) lets every
responding client Poisson-sample its records at rate q with coins from its
own private key (never from the public seed) and answer through its handler,
(4) sums the replies through the secure-aggregation shim (double masking in a
64-bit ring, then one unmask exchange; the strategy sees only the decoded sum)
and (5) hands the sum to the strategy, which adds noise through the ledger
before releasing anything.

Simulated dropouts (``dropout_rate``) exercise the shim's recovery: in the
round's unmask exchange survivors also reveal that round's pair masks with the
missing clients; a round that cannot be recovered (fewer than t survivors) is
aborted and releases nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.federation.protocol import ClientData, ClientHandler, Strategy, poisson_sample
from fedpriv.federation.secagg import (
    FixedPointCodec,
    MaskedInput,
    SecAggAbort,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    sum_plain,
)
from fedpriv.privacy.randomness import GRID, PrivateStreams, SecretKey
from fedpriv.seeding import derive_generator
from fedpriv.validation import check_probability

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) costs a ClientApp ~0.7 s to import
    from fedpriv.privacy.ledger import PrivacyLedger

#: Fixed-point scale of the shim: 2^-32 ≈ 2.3e-10 resolution per summand. It must be
#: the noise grid's 1/γ: the mechanisms' rounding margin γ√d (γd in L1) covers the
#: codec's rounding of the one client a record changes only then (see
#: :func:`codec_for`), and the decoded sum then lies on the grid already.
DEFAULT_SCALE = 1.0 / GRID  # = 2.0**32 exactly
#: Fewest clients whose sum may be revealed; below it a round is aborted.
MIN_PARTIES = 2


@dataclass
class Communication:
    """What crossed the network in a run."""

    n_clients: int
    floats_uploaded: np.ndarray = field(init=False)
    bytes_uploaded: np.ndarray = field(init=False)
    round_trips: int = 0
    rounds: int = 0
    aborted_rounds: int = 0
    recoveries: int = 0

    def __post_init__(self) -> None:
        self.floats_uploaded = np.zeros(self.n_clients, dtype=np.int64)
        self.bytes_uploaded = np.zeros(self.n_clients, dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "floats_uploaded_per_client": self.floats_uploaded.tolist(),
            "bytes_uploaded_per_client": self.bytes_uploaded.tolist(),
            "mean_floats_uploaded_per_client": float(self.floats_uploaded.mean()),
            "round_trips": self.round_trips,
            "rounds": self.rounds,
            "aborted_rounds": self.aborted_rounds,
            "dropout_recoveries": self.recoveries,
        }


def codec_for(
    record_bound: float, max_records: int, n_clients: int, scale: float
) -> FixedPointCodec:
    """Fixed-point codec whose range holds the largest possible sum.

    One client's coordinate is at most ``record_bound · max_records`` in
    absolute value (clipping bound times a public bound on its record count),
    and at most ``n_clients`` vectors are summed; the codec refuses a scale
    that could overflow instead of wrapping silently.

    Rounding and DP: one record changes one client's vector v by Δ (L2); its
    encoding rint(v·s)/s moves by at most Δ + √d/s (each coordinate's rounding
    error is ≤ 1/(2s), so two roundings differ by ≤ 1/s), and no other
    client's encoding moves. With s = 1/γ = 2^32 that is Δ₂ + γ√d, exactly the
    margin every Gaussian/Laplace mechanism adds to its sensitivity
    (:func:`fedpriv.privacy.randomness.rounding_margin`); the decoded sum is
    then on the grid γℤ, so the mechanism's own rounding adds nothing more. A
    coarser scale would leave the margin short (√d/s > γ√d), a finer one
    would round twice: both are refused.
    """
    if scale != DEFAULT_SCALE:
        raise ValueError(
            f"scale must be 2**32 = {DEFAULT_SCALE!r} (the noise grid's 1/γ, which the "
            f"mechanisms' rounding margin assumes); got {scale!r}"
        )
    return FixedPointCodec(scale=scale, max_abs=record_bound * max_records, max_summands=n_clients)


def round_plan(
    fates: PrivateStreams,
    round_id: int,
    n_clients: int,
    participation: float,
    dropout_rate: float = 0.0,
) -> tuple[list[int], set[int]]:
    """Which clients are asked in ``round_id`` (each w.p. ρ) and whose replies get lost.

    Drawn from the server's private streams (participation coins are private
    randomness: the ρ-amplification assumes no one can predict them); every
    runtime draws the same substream from the same key, so the in-process and
    Flower runs ask the same clients.
    """
    if participation >= 1.0 and not dropout_rate:
        # Everyone, for sure: the draws below could only say so (u < 1 always).
        return list(range(n_clients)), set()
    fate = fates.at(round_id)
    asked = [i for i in range(n_clients) if fate.random() < participation]
    lost = {i for i in asked if dropout_rate and fate.random() < dropout_rate}
    return asked, lost


def client_key(key: SecretKey, client_id: int) -> SecretKey:
    """Client ``client_id``'s own key: its coins are secret from the server and its peers."""
    return key.derive("client", client_id)


def begin_strategy(
    strategy: Strategy,
    *,
    n_features: int,
    ledger: PrivacyLedger | None,
    seed: int,
    secret_key: SecretKey,
) -> None:
    """Start ``strategy`` as every runtime does: public generator from ``seed``, the
    server's private one from ``secret_key`` (a debug key voids the ledger's guarantee)."""
    if ledger is not None and not secret_key.certified:
        ledger.mark_uncertified(secret_key.public_reason)
    strategy.begin(
        n_features=n_features,
        ledger=ledger,
        rng=derive_generator(seed, "server"),
        secret_rng=secret_key.derive("server").generator("noise"),
    )


def participation_streams(key: SecretKey) -> PrivateStreams:
    """The server's private per-round participation coins."""
    return key.derive("server").streams("participation")


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
    participation : float
        ρ in (0, 1]: each client answers a round independently w.p. ρ.
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
    """

    def __init__(
        self,
        *,
        clients: Sequence[ClientData],
        handler: ClientHandler,
        seed: int,
        secret_key: SecretKey | bytes | None = None,
        participation: float = 1.0,
        secure_aggregation: bool = True,
        dropout_rate: float = 0.0,
        max_records: int | None = None,
        scale: float = DEFAULT_SCALE,
        vectorised: bool = True,
        secagg: SecAggConfig | None = None,
    ) -> None:
        if not clients:
            raise ValueError("need at least one client")
        self.clients = list(clients)
        self.handler = handler
        self.seed = seed
        self.secret_key = SecretKey.coerce(secret_key)
        self.participation = check_probability("participation", participation)
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must lie in [0, 1); got {dropout_rate!r}")
        self.dropout_rate = dropout_rate
        self.secure_aggregation = secure_aggregation
        self.max_records = max_records or max(c.n for c in self.clients)
        self.scale = scale
        self.vectorised = vectorised and hasattr(handler, "answer_many")
        self.communication = Communication(len(self.clients))
        self.secagg = secagg or SecAggConfig()

    def _setup_keys(self) -> list[SecAggClient]:
        parties = [SecAggClient(client_id=c.client_id, config=self.secagg) for c in self.clients]
        keys = {p_.client_id: p_.public_key for p_ in parties}
        for p_ in parties:
            p_.setup(keys)  # pins the key book
        # Two exchanges per run, as over Flower: every client uploads its 32-byte
        # public key, then receives the key book and pins it.
        self.communication.round_trips += 2
        self.communication.bytes_uploaded += 32
        return parties

    def run(self, strategy: Strategy, *, ledger: PrivacyLedger | None) -> Strategy:
        """Train ``strategy`` to completion; returns it (holding the released model)."""
        n_features = self.clients[0].X.shape[1]
        key = self.secret_key
        begin_strategy(
            strategy, n_features=n_features, ledger=ledger, seed=self.seed, secret_key=key
        )
        ids = [c.client_id for c in self.clients]
        parties = self._setup_keys() if self.secure_aggregation else None
        states: list[dict[str, Any]] = [{} for _ in self.clients]
        shared_state: dict[str, Any] = {}
        # Client c's round-r coins: substream r of its own key's "poisson" streams
        # (the Flower ClientApp derives the very same one from the same key).
        client_keys = [client_key(key, c.client_id) for c in self.clients]
        streams = [k.streams("poisson") for k in client_keys]
        fates = participation_streams(key)
        comm = self.communication
        codecs: dict[tuple[float, int], FixedPointCodec] = {}
        empty = np.zeros(0, dtype=np.intp)
        uploaded = np.zeros(len(self.clients), dtype=bool)
        while (query := strategy.next_query()) is not None:
            r = query.round
            asked, lost = round_plan(
                fates, r, len(self.clients), self.participation, self.dropout_rate
            )
            if parties is not None and len(asked) < MIN_PARTIES:
                # A "sum" of one vector is that client's vector: release nothing.
                comm.rounds += 1
                comm.aborted_rounds += 1
                strategy.update(query, None)
                continue
            shape = (query.record_bound, len(asked))
            if (codec := codecs.get(shape)) is None:
                codec = codecs[shape] = codec_for(
                    query.record_bound, self.max_records, len(asked) or 1, self.scale
                )
            samples = {
                i: poisson_sample(self.clients[i].n, query.sampling_rate, streams[i].at(r))
                for i in asked
            }
            if self.vectorised and asked:
                # One call for all clients (identical replies, see answer_many).
                every = [samples.get(i, empty) for i in range(len(self.clients))]
                batch = self.handler.answer_many(
                    query, self.clients, every, shared_state, client_keys
                )
                if parties is None and not lost and batch.shape[1:] == (query.reply_length,):
                    # Plain sums of everyone's rows: no per-client bookkeeping needed.
                    rows = batch[asked] if len(asked) < batch.shape[0] else batch
                    comm.floats_uploaded[asked] += query.reply_length
                    comm.bytes_uploaded[asked] += 8 * query.reply_length
                    comm.round_trips += 1
                    comm.rounds += 1
                    strategy.update(query, sum_plain(rows, codec))
                    continue
                vectors = {i: batch[i] for i in asked}
            else:
                vectors = {
                    i: self.handler.answer(
                        query, self.clients[i], samples[i], states[i], client_keys[i]
                    )
                    for i in asked
                }
            replies: dict[int, np.ndarray | MaskedInput] = {}
            participants = [ids[j] for j in asked]
            for i, vec in vectors.items():
                if vec.shape != (query.reply_length,) or vec.dtype != np.float64:
                    vec = np.asarray(vec, dtype=np.float64)
                    if vec.shape != (query.reply_length,):
                        raise ValueError(
                            f"client {ids[i]} replied shape {vec.shape}; "
                            f"expected ({query.reply_length},)"
                        )
                if i in lost:
                    continue
                uploaded[i] = True
                if parties is None:
                    replies[ids[i]] = vec
                else:
                    replies[ids[i]] = up = parties[i].mask(
                        vec, round_id=r, participants=participants, codec=codec
                    )
                    comm.bytes_uploaded[i] += up.nbytes - up.vector.nbytes  # encrypted shares
            comm.floats_uploaded += uploaded * query.reply_length
            comm.bytes_uploaded += uploaded * (8 * query.reply_length)
            uploaded[:] = False
            comm.round_trips += 1
            comm.rounds += 1
            aggregate = self._aggregate(
                query.reply_length, r, participants, replies, parties, codec
            )
            if aggregate is None:
                comm.aborted_rounds += 1
            strategy.update(query, aggregate)
        return strategy

    def _aggregate(
        self,
        n: int,
        round_id: int,
        participants: list[int],
        replies: dict[int, np.ndarray | MaskedInput],
        parties: list[SecAggClient] | None,
        codec: FixedPointCodec,
    ) -> np.ndarray | None:
        if not participants:
            return np.zeros(n)
        if parties is None:
            if not replies:
                return np.zeros(n)
            if len(replies) > codec.max_summands:
                raise ValueError(f"{len(replies)} replies for {codec.max_summands} summands")
            # One vector at a time (same ring sum as sum_plain): memory O(n), not O(K·n).
            acc = np.zeros(n, dtype=np.uint64)
            for vec in replies.values():
                acc += codec.encode(vec)
            return codec.decode(acc)
        server = SecAggServer(codec=codec, config=self.secagg)
        try:
            survivors, dropped = server.unmask_plan(
                round_id=round_id, participants=participants, masked=replies
            )
        except SecAggAbort:
            return None  # fewer than t survivors: abort, release nothing
        # The unmask exchange, every round: survivors return shares of the survivors'
        # self-mask seeds and their pair masks with the dropped clients.
        index = {c.client_id: k for k, c in enumerate(self.clients)}
        inboxes = server.inboxes(survivors, {u: m.shares for u, m in replies.items()})
        self.communication.round_trips += 1
        self.communication.recoveries += bool(dropped)
        answers = {}
        for cid in survivors:
            try:
                answers[cid] = ans = parties[index[cid]].unmask(
                    round_id=round_id, survivors=survivors, dropped=dropped, n=n, inbox=inboxes[cid]
                )
            except ValueError:
                return None  # a refusal: abort, release nothing
            self.communication.bytes_uploaded[index[cid]] += ans.nbytes
        masked = {u: m.vector for u, m in replies.items()}
        try:
            return server.aggregate(
                round_id=round_id, participants=participants, masked=masked, answers=answers
            )
        except SecAggAbort:
            return None
