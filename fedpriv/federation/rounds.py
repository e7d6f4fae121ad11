"""What a round is made of: the plan, the replies, the transport, the tally.

The data the round engine (:mod:`fedpriv.federation.engine`) passes between its
steps and its transports, kept apart from the engine's rules so both stay small.
This module never imports Flower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fedpriv.federation.protocol import Query
from fedpriv.federation.secagg import FixedPointCodec, MaskedInput, UnmaskAnswer
from fedpriv.federation.secagg_topology import Sparse
from fedpriv.privacy.distributed import ShareSpec

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) costs a ClientApp ~0.7 s to import
    from fedpriv.privacy.ledger import PrivacyLedger


@dataclass
class Communication:
    """What crossed the network in a run."""

    n_clients: int
    floats_uploaded: np.ndarray = field(init=False)
    bytes_uploaded: np.ndarray = field(init=False)
    round_trips: int = 0
    rounds: int = 0
    #: Rounds whose sum the strategy released (its update went through with a sum).
    rounds_released: int = 0
    #: Rounds that released nothing (too few asked or survivors, or a discarded sum).
    rounds_aborted: int = 0
    #: Of those, rounds whose released sum failed the range check (spent, discarded).
    rounds_discarded: int = 0
    recoveries: int = 0
    #: Error replies (a client that raised, or whose transport reported a failure).
    client_errors: int = 0
    #: Uploads and unmask answers refused as malformed (each its sender's dropout).
    rejected_replies: int = 0

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
            "rounds_released": self.rounds_released,
            "rounds_aborted": self.rounds_aborted,
            "rounds_discarded": self.rounds_discarded,
            "dropout_recoveries": self.recoveries,
            "client_errors": self.client_errors,
            "rejected_replies": self.rejected_replies,
        }


@dataclass(frozen=True, kw_only=True)
class RoundPlan:
    """One round as planned: the query, who is asked, and the codec of their sum.

    Clients are named by position 0..K−1 (the partition id over Flower).
    ``lost`` are simulated losses (the in-process runtime's ``dropout_rate``):
    those clients answer but their upload never arrives. ``codec`` is ``None``
    when the round was aborted before anything was sent.
    """

    query: Query
    asked: list[int]
    lost: frozenset[int] = frozenset()
    codec: FixedPointCodec | None = None
    #: Distributed noise: the shares each asked client adds (``None``: central noise).
    noise: ShareSpec | None = None
    #: The run's SecAgg+ graph (``None``: the complete graph over ``asked``).
    graph: Sparse | None = None
    #: The Shamir threshold t announced to the asked clients (``None``: no secure sum).
    threshold: int | None = None
    #: The asked clients whose sealed seed shares covering this round the server lacks
    #: (they send them with their masked input; ``None``: every client sends its own).
    resend: frozenset[int] | None = None
    #: The rounds the strategy still plans, this one included (public: its ``config.rounds``;
    #: ``None``: unknown). A hint for the length of a new batch of seeds, never more than
    #: the run's ``secagg-seed-batch``: a wrong one costs time, not privacy.
    rounds_left: int | None = None

    @property
    def aborted(self) -> bool:
        return self.codec is None


@dataclass(frozen=True, kw_only=True)
class Replies:
    """The uploads that arrived for one round, by client position.

    Secure aggregation fills ``masked`` (y_u and u's encrypted shares); plain
    sums fill ``plain`` with the senders' float vectors in ``senders`` order,
    either one array per sender or one 2-D array (a row per sender). Senders are
    the transport's knowledge of who sent (the message's authenticated source),
    never a field of the content. Error replies and losses are absent; ``errors``
    counts the error replies.
    """

    senders: tuple[int, ...]
    masked: Mapping[int, MaskedInput] = field(default_factory=dict)
    plain: Sequence[np.ndarray] | np.ndarray = ()
    errors: int = 0


@dataclass(frozen=True, kw_only=True)
class UnmaskRequest:
    """What the unmask exchange sends (Bonawitz §4, Unmasking): the round's plan, the
    server's view (survivors S, dropped D), each survivor's inbox of encrypted shares
    (by sender) and the survivors' signatures on (S, D)."""

    plan: RoundPlan
    survivors: list[int]
    dropped: list[int]
    inboxes: Mapping[int, Mapping[int, bytes]]
    signatures: Mapping[int, bytes]
    #: Whose signatures go to each survivor (SecAgg+: t of its neighbours'); ``None``: all.
    forward: Mapping[int, Sequence[int]] | None = None

    def signatures_for(self, survivor: int) -> dict[int, bytes]:
        """The signatures sent to ``survivor`` with its unmask request."""
        if self.forward is None:
            return dict(self.signatures)
        to = self.forward[survivor]
        return dict(zip(to, map(self.signatures.__getitem__, to), strict=True))


class Transport(Protocol):
    """What carries a round: the engine calls these and nothing else.

    Implementations: :class:`fedpriv.federation.runtime.InProcessTransport`
    (handlers and ``SecAggClient`` objects in this process) and
    ``fedpriv.server.grid_transport.GridTransport`` (Flower messages over a Grid).
    """

    def setup_keys(self) -> None:
        """The run's key exchange: every client uploads its public key, then pins the
        key book. Raises if it cannot complete (no keys, no secure aggregation)."""
        ...

    def ask(self, plan: RoundPlan) -> Replies:
        """Send ``plan.query`` to ``plan.asked`` and return what arrived."""
        ...

    @property
    def key_book(self) -> tuple[Mapping[int, bytes], Mapping[int, bytes]]:
        """(public keys, verify keys) by client, as broadcast at the key exchange."""
        ...

    # Optional: ``run_id`` (str), the public run id every client also holds. With it,
    # the engine and the clients derive SecAgg+'s graph from it and the key book; a
    # transport without one keeps the complete graph.

    def consistency(
        self, plan: RoundPlan, survivors: list[int], dropped: list[int]
    ) -> dict[int, bytes]:
        """The round's consistency exchange: each survivor is sent (S, D) and returns its
        signature on them; returns the signatures that arrived, by survivor."""
        ...

    def unmask(self, request: UnmaskRequest) -> dict[int, UnmaskAnswer]:
        """The round's one unmask exchange with ``request.survivors`` (each gets its
        inbox of encrypted shares and the survivors' signatures on (S, D)); returns the
        answers that arrived, by survivor."""
        ...


@dataclass(frozen=True)
class RoundDone:
    """What a progress callback (``on_round``) learns after each round: public facts.

    Attributes
    ----------
    round : int
        The round's public index (its query's ``round``, from 0).
    released : bool
        Whether the round released its sum (``False``: aborted or discarded).
    ledger : PrivacyLedger or None
        The ledger the run charges (``None``: non-private), read for an upper bound on
        ε spent so far (``epsilon_upper_bound()``).
    """

    round: int
    released: bool
    ledger: PrivacyLedger | None = None
