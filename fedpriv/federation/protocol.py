"""The query / reply protocol every method shares.

Each round a *strategy* (server half) emits a public :class:`Query`; each
asked client's *handler* (client half) answers with a fixed-length float
vector computed from a Poisson sample of its rows; the secure-aggregation
shim reveals only the sum to the strategy, which adds noise through the run's
ledger before anything is released (docs/explanation/architecture.md §1).

Runtimes (in-process here; Flower in ``server/`` and ``clients/``) move
queries and replies and own sampling, keys and aggregation, so that the
same strategy and handler run unchanged in every runtime.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.privacy.randomness import check_private
from fedpriv.records import check_partition

if TYPE_CHECKING:  # clients never touch the ledger: keep dp-accounting (and scipy) out
    from fedpriv.federation.node_stage import NodeStage
    from fedpriv.privacy.ledger import PrivacyLedger
    from fedpriv.privacy.randomness import SecretKey


@dataclass(frozen=True)
class Query:
    """What the server broadcasts in one round; every field is public.

    Attributes
    ----------
    round : int
        Round index, from 0.
    method : str
        Which client handler answers (e.g. ``"boosting"``).
    sampling_rate : float
        Poisson rate q at which each client samples its records.
    reply_length : int
        Length of every client's reply vector.
    record_bound : float
        Largest |coordinate| one record can add to a reply (clipping bound);
        with a public bound on records per client it fixes the fixed-point
        range of secure aggregation.
    arrays, config : mapping
        Method-specific public content (e.g. the tree to fill, the model).
    """

    round: int
    method: str
    sampling_rate: float
    reply_length: int
    record_bound: float
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ReplySensitivity:
    """How far one record can move a handler's reply to one query.

    Derived by the client half from the query's public settings alone (its
    ``sampling_rate``, ``record_bound``, ``config``) and the method's own
    constants, exactly as its ``answer`` clips: the node accounts with it and
    never with a Δ a server declares (:mod:`fedpriv.privacy.node_plan`).

    Attributes
    ----------
    stage : str
        The kind of query, naming the declared stage it must belong to
        (:class:`fedpriv.federation.node_stage.NodeStage` ``name``).
    l1, l2 : float
        Largest L1 / L2 change of the reply vector when one record is added or
        removed (before fixed-point rounding, which the accountant adds).
    parts : mapping of str to (l1, l2)
        The same for named parts of the reply that a stage releases separately
        (:class:`fedpriv.federation.node_stage.StageRelease` ``part``), e.g. the
        leaf sums a last tree level's reply holds.
    """

    stage: str
    l1: float
    l2: float
    parts: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientData:
    """One client's rows, as its handler sees them.

    The rows are stored once, feature-major: ``XT`` (d × n, C-contiguous
    float64), because tree routing reads whole feature rows
    (:mod:`fedpriv.models._kernels`); ``X`` is its transposed view.

    ``units``: with unit-level privacy (:mod:`fedpriv.privacy.units`), each row's
    unit as a dense code 0 … U − 1, the rows already bounded to the schema's
    ``max_records_per_unit``; the client then samples whole units
    (:func:`client_sample`) and DP-SGD clips per unit. ``None``: every row is its
    own unit (record-level privacy).
    """

    client_id: int
    X: np.ndarray
    y: np.ndarray
    units: np.ndarray | None = None
    XT: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        XT = np.ascontiguousarray(np.asarray(self.X, dtype=np.float64).T)
        # One copy of the rows: X is a (transposed) view of XT.
        object.__setattr__(self, "XT", XT)
        object.__setattr__(self, "X", XT.T)
        object.__setattr__(self, "y", np.ascontiguousarray(self.y, dtype=np.float64))
        if self.X.ndim != 2 or self.y.shape != (self.X.shape[0],):
            raise ValueError(
                f"client {self.client_id}: X must be (n, d) and y (n,); got {self.X.shape} "
                f"and {self.y.shape}"
            )
        if self.units is not None:
            units = np.ascontiguousarray(self.units, dtype=np.int64)
            dense = units.size == 0 or (
                units.min() == 0 and np.unique(units).size == int(units.max()) + 1
            )
            if units.shape != self.y.shape or not dense:
                raise ValueError(
                    f"client {self.client_id}: units must be one code per row, dense in "
                    f"0 … U − 1; got shape {units.shape}"
                )
            units.flags.writeable = False
            object.__setattr__(self, "units", units)

    @property
    def n(self) -> int:
        return int(self.y.size)

    @property
    def n_units(self) -> int:
        """Units U of the rows (each row its own without ``units``)."""
        return self.n if self.units is None else int(self.units.max(initial=-1)) + 1

    @functools.cached_property
    def X_rows(self) -> np.ndarray:
        """A row-major (n × d, C order) copy of the rows, made on first use and kept.

        Learners that read whole sampled rows (DP-SGD) need it: in ``XT`` one
        row's features lie n·8 bytes apart, a cache miss each, which made a
        130-US step 10x slower than its arithmetic.
        """
        return np.ascontiguousarray(self.X)


class ClientHandler(ABC):
    """Client half of a method: a pure function of (query, data, sample, state).

    Every registered method's client class subclasses it and is built with no
    arguments (:meth:`fedpriv.methods.Method.client_handler`); registration
    checks both (:mod:`fedpriv.method_check`).
    """

    @abstractmethod
    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        """Reply vector of ``query.reply_length`` floats from the rows ``sample``.

        ``state`` persists across rounds for this client within one run (the
        runtime's per-client store); a handler must also work from an empty
        one, rebuilding what it needs from the public query. ``key`` is the
        client's own secret key, for private draws beyond the Poisson sample
        (e.g. record-to-tree assignment); it never leaves the client.
        """

    @abstractmethod
    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """The stage of ``query`` and how far one record can move this handler's reply to
        it, from the query's public settings only (:class:`ReplySensitivity`). Raises
        ``ValueError`` for a query it does not recognise: the node then refuses it."""

    def unit_sensitivity(self, query: Query, max_records: int) -> ReplySensitivity:
        """How far one *unit* of at most ``max_records`` records (bounded and sampled
        whole, :mod:`fedpriv.privacy.units`) can move the reply: ``max_records`` times
        :meth:`reply_sensitivity`, every part too (triangle inequality). A handler that
        clips per unit (DP-SGD's steps) overrides it; a node accounts with it."""
        return scaled_sensitivity(self.reply_sensitivity(query), max_records)


class Strategy(ABC):
    """Server half of a method; transport-agnostic and never sees one client's reply.

    What the round engine, the runtimes, the ServerApp and the estimators read
    from a strategy is declared here: the abstract methods below, and the
    attributes

    * ``method``: the name its queries carry (:attr:`Query.method`), the
      ServerApp's label of its rounds;
    * ``config``: its configuration (the run's ``rounds`` is ``config.rounds``);
    * ``noise_multiplier_``: the Gaussian rounds' noise multiplier z once
      :meth:`begin` calibrated it, ``None`` when there is no single z (the
      estimators report it).

    Optional: ``noise_std(query)``, the std of the Gaussian noise the release of
    ``query``'s sum adds (a strategy with it has a distributed-noise form:
    :mod:`fedpriv.privacy.distributed`; the engine refuses ``noise =
    "distributed"`` without it). Every built-in strategy subclasses this class,
    and :meth:`fedpriv.methods.Method.build_strategy` refuses a factory whose
    result does not.
    """

    method: str
    config: Any
    #: The Gaussian rounds' noise multiplier z (``None``: no single z, or not begun).
    noise_multiplier_: float | None = None

    @abstractmethod
    def begin(
        self,
        *,
        n_features: int,
        ledger: PrivacyLedger | None,
        rng: np.random.Generator,
        secret_rng: np.random.Generator,
    ) -> None:
        """Set up a run (e.g. reserve the privacy budget of the whole plan).

        ``rng`` is public randomness (structure, initial weights: released
        anyway); ``secret_rng`` is private (noise, mechanism draws), a ChaCha20
        generator under the run's secret key, never derivable from the seed.
        """

    @abstractmethod
    def next_query(self) -> Query | None:
        """The next round's query, or ``None`` when training is over."""

    @abstractmethod
    def update(self, query: Query, aggregate: np.ndarray | None) -> None:
        """Consume the summed replies of ``query`` (``None``: the round was aborted)."""

    @abstractmethod
    def model(self) -> Any:
        """The released model (:class:`fedpriv.models.base.ReleasedModel`, a function of
        the releases only), ``None`` if nothing was released."""

    @abstractmethod
    def node_stages(self) -> list[NodeStage]:
        """The plan the nodes enforce, after :meth:`begin` (``[]`` in a non-private run):
        every release as a :class:`~fedpriv.federation.node_stage.NodeStage`
        (:func:`fedpriv.privacy.node_budget.strategy_plan` declares it)."""

    def status_notes(self) -> list[str]:
        """Why the released model falls short of the plan although its rounds released
        (from released values only; :func:`fedpriv.federation.status.with_notes`)."""
        return []


def scaled_sensitivity(sens: ReplySensitivity, max_records: int) -> ReplySensitivity:
    """``sens`` of one record as a unit's of at most ``max_records`` (every figure × m)."""
    from fedpriv.privacy.units import scale_sensitivity

    if max_records == 1:
        return sens
    l1, l2 = scale_sensitivity(sens.l1, sens.l2, max_records)
    parts = {k: scale_sensitivity(a, b, max_records) for k, (a, b) in sens.parts.items()}
    return ReplySensitivity(stage=sens.stage, l1=l1, l2=l2, parts=parts)


#: Where :func:`poisson_sample` switches to geometric gaps (measured crossover).
GEOMETRIC_MAX_RATE, GEOMETRIC_MIN_RECORDS = 0.0625, 2048


def poisson_sample(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a Poisson sample: each of ``n`` records kept independently w.p. ``rate``.

    Small samples of large clients are drawn as geometric gaps: the gaps
    between consecutive kept indices of independent Bernoulli(q) trials are
    i.i.d. Geometric(q) (memorylessness), so ``cumsum(G) − 1`` below ``n`` is
    exactly the Bernoulli sample, for ≈ q·n draws instead of n (about 3x
    faster at q = 0.05, n = 10,000). Otherwise one uniform per record is
    compared with q. Privacy amplification by Poisson subsampling needs
    exactly this distribution, with coins no one else can predict: ``rng``
    must be private (a client's own ChaCha20 stream); a test checks both
    paths (inclusion rates, pairwise independence, size distribution).
    """
    check_private("rng", rng)  # the coins are private randomness: never a seeded stream
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must lie in (0, 1]; got {rate!r}")
    if rate == 1.0:
        return np.arange(n, dtype=np.int64)
    if rate > GEOMETRIC_MAX_RATE or n < GEOMETRIC_MIN_RECORDS:
        return (rng.random(n) < rate).nonzero()[0]
    # Enough gaps to pass n with overwhelming probability; the loop tops up otherwise.
    mean = n * rate
    m = int(mean + 6.0 * math.sqrt(mean) + 16)
    idx = np.cumsum(rng.geometric(rate, size=m)) - 1
    while idx[-1] < n:
        idx = np.concatenate([idx, idx[-1] + np.cumsum(rng.geometric(rate, size=m))])
    return idx[: np.searchsorted(idx, n)]


def client_sample(data: ClientData, rate: float, rng: np.random.Generator) -> np.ndarray:
    """The rows a client answers a round from: a Poisson sample of its records, or, with
    ``data.units``, of its whole units (:func:`fedpriv.privacy.units.unit_sample`: one
    private coin per unit, a sampled unit brings all its rows)."""
    if data.units is None:
        return poisson_sample(data.n, rate, rng)
    from fedpriv.privacy.units import unit_sample

    return unit_sample(data.units, data.n_units, rate, rng)


def require_every_record(sample: np.ndarray, data: ClientData, why: str) -> None:
    """Refuse a query whose ``sample`` is not every record of ``data`` (a q = 1 release:
    its sensitivity and the public record count assume every row answers); ``why``
    names the statistic in the error."""
    if np.asarray(sample).size != data.n:
        raise ValueError(f"{why}: the sample must be all rows ({data.n})")


def make_clients(
    X: np.ndarray,
    y: np.ndarray,
    partition: list[np.ndarray],
    units: np.ndarray | None = None,
) -> list[ClientData]:
    """One :class:`ClientData` per index array of ``partition`` (ids 0..K−1); ``units``:
    each row's unit code (a client's rows already bounded per unit), or ``None``.

    Refuses (:class:`~fedpriv.errors.DataError`) a partition that gives a row
    to two clients, or twice to one, or points outside the rows
    (:func:`~fedpriv.records.check_partition`): that record would count twice.
    Labels are not checked here (the label set is the learner's, checked where
    the data enters); the handlers clip whatever they are given.
    """
    parts = check_partition(partition, len(y))
    if units is None:
        return [ClientData(client_id=k, X=X[idx], y=y[idx]) for k, idx in enumerate(parts)]
    from fedpriv.privacy.units import dense_units

    return [
        ClientData(client_id=k, X=X[idx], y=y[idx], units=dense_units(units[idx]))
        for k, idx in enumerate(parts)
    ]
