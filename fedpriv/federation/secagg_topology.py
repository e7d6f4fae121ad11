"""Who masks with and shares to whom in a round: the complete graph or SecAgg+'s sparse one.

Bonawitz et al. 2017 pair every two participants; SecAgg+ (Bell, Bonawitz, Gascón,
Lepoint, Raykova, CCS 2020) pairs a client with its k neighbours in a random Harary
graph (:mod:`fedpriv.federation.secagg_graph`) and shares its self-mask seed t-of-
(k + 1) within its closed neighbourhood (its neighbours and itself). Both sides of the
protocol ask one of two objects the same questions (:class:`Complete`,
:class:`Sparse`): a client's neighbours, the Shamir point at which a holder keeps an
owner's share, and the threshold t.

The sparse graph is fixed once per run, from public randomness: the run id and the
pinned key book's digest (:func:`~fedpriv.federation.secagg_graph.graph_seed`), so
every client derives it, and refuses a server message naming another neighbourhood
or threshold. :func:`topology_for` decides which graph a run uses, from public
settings only (:meth:`~fedpriv.federation.secagg_common.SecAggConfig.
graph_parameters`): the sparse graph when its analysis covers at least one colluding
and one dropped client (⌊γK⌋ ≥ 1, ⌊δK⌋ ≥ 1) and its degree k is below K − 1, and
every client takes part in every round (participation 1); else the complete graph
over each round's participants, the protocol of Bonawitz et al. unchanged.

Share points. Under the complete graph holder v keeps its share of any seed at
v + 1, as before. Under the sparse graph holder v keeps its share of u's seed at
1 + (v's rank in u's sorted closed neighbourhood), in [1, k + 1]: every client shares
at the same k + 1 points, so the server reconstructs all the seeds whose holders all
answered with one Lagrange computation and one matrix product (Shamir secrecy does not
depend on which distinct non-zero points are used).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fedpriv.federation.secagg_graph import (
    CommunicationGraph,
    GraphParameters,
    adjacency,
    graph_seed,
    harary_graph,
    neighbours,
    survivors_connected,
)


@dataclass(frozen=True, kw_only=True, eq=False)
class Complete:
    """The complete graph over one round's ``participants`` (Bonawitz et al. 2017)."""

    participants: tuple[int, ...]
    threshold: int
    sparse = False

    def neighbours(self, u: int) -> tuple[int, ...]:
        return tuple(v for v in self.participants if v != u)

    def closed(self, u: int) -> tuple[int, ...]:
        return self.participants

    def point(self, owner: int, holder: int) -> int:
        """Holder ``holder``'s Shamir point for any owner's seed: its id + 1."""
        return holder + 1

    def problem(self, survivors: Sequence[int]) -> str | None:
        """Why ``survivors`` cannot be unmasked (fewer than t), or ``None``."""
        if len(survivors) < self.threshold:
            return f"{len(survivors)} survivors, below threshold t = {self.threshold}"
        return None


@dataclass(frozen=True, kw_only=True, eq=False)
class Sparse:
    """The run's random Harary graph H(K, k) and its neighbourhood threshold t.

    ``params`` are the degree and bounds :func:`~fedpriv.federation.secagg_graph.
    choose_parameters` gave for the run's (K, γ, δ, σ, η); ``threshold`` may exceed
    ``params.threshold`` when the run's or node's threshold rule raises it.
    """

    graph: CommunicationGraph
    params: GraphParameters
    threshold: int
    sparse = True
    _near: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _closed: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _points: dict[int, dict[int, int]] = field(default_factory=dict, repr=False)
    # survivor list -> (connected, as a set): the clients' own checks of one round's list
    _lists: dict[tuple[int, ...], tuple[bool, frozenset[int]]] = field(
        default_factory=dict, repr=False
    )
    _last: list = field(default_factory=lambda: [()], repr=False)  # [(latest list, verdict)]

    @cached_property
    def ids(self) -> tuple[int, ...]:
        """The run's K client ids, sorted: every round's participants."""
        return tuple(self.graph.ids.tolist())

    @cached_property
    def id_set(self) -> frozenset[int]:
        return frozenset(self.ids)

    @property
    def degree(self) -> int:
        return self.graph.degree

    def neighbours(self, u: int) -> tuple[int, ...]:
        """u's k neighbours, sorted (cached: the graph is fixed for the run)."""
        if (near := self._near.get(u)) is None:
            near = self._near[u] = neighbours(self.graph, u)
        return near

    def closed(self, u: int) -> tuple[int, ...]:
        """u's neighbours and u, sorted: the holders of u's seed (cached)."""
        if (near := self._closed.get(u)) is None:
            near = self._closed[u] = tuple(self.points(u))
        return near

    def points(self, owner: int) -> dict[int, int]:
        """{holder: Shamir point} for ``owner``'s seed: 1 + rank in its closed neighbourhood."""
        if (pts := self._points.get(owner)) is None:
            holders = sorted((*self.neighbours(owner), owner))
            pts = self._points[owner] = {v: i + 1 for i, v in enumerate(holders)}
        return pts

    def point(self, owner: int, holder: int) -> int:
        return self.points(owner)[holder]

    def problem(self, survivors: Sequence[int]) -> str | None:
        """Why the server cannot unmask ``survivors`` without leaking, or ``None``:
        they are not connected in the graph (the server would learn each part's sum),
        or some survivor keeps fewer than t surviving neighbours (its seed, and its
        own check of t neighbours' signatures, would fail)."""
        if not survivors_connected(self.graph, survivors):
            return f"the {len(survivors)} survivors are not connected in the communication graph"
        alive = np.zeros(self.graph.size, dtype=bool)
        idx = np.searchsorted(self.graph.ids, np.asarray(survivors, dtype=np.uint64))
        alive[idx] = True
        counts = alive[adjacency(self.graph)].sum(axis=1)
        short = idx[counts[idx] < self.threshold]
        if short.size:
            u = int(self.graph.ids[short[0]])
            return (
                f"survivor {u} keeps {int(counts[short[0]])} surviving neighbours, below the "
                f"neighbourhood threshold t = {self.threshold} ({short.size} such survivors)"
            )
        return None

    def own_problem(self, u: int, survivors: Iterable[int]) -> str | None:
        """A client's own check of a survivor list: connected, and t of its neighbours in it."""
        last = self._last[0]  # one tuple, replaced whole: a consistent read
        if last and last[0] is survivors:  # the very list the last client checked
            seen, live = last[1], survivors
        elif (seen := self._lists.get(live := tuple(survivors))) is None:  # one list a round
            if len(self._lists) >= 4:
                del self._lists[next(iter(self._lists))]
            seen = self._lists[live] = (survivors_connected(self.graph, live), frozenset(live))
        if type(survivors) is tuple:  # immutable: kept (alive) with its verdict
            self._last[0] = (survivors, seen)
        if not seen[0]:
            return f"the {len(live)} survivors are not connected in the communication graph"
        near = len(seen[1].intersection(self.neighbours(u)))
        if near < self.threshold:
            return (
                f"{near} of client {u}'s neighbours survive, below the neighbourhood "
                f"threshold t = {self.threshold}"
            )
        return None


Topology = Complete | Sparse


def topology_for(config, *, ids: Iterable[int], run_id: str, book_digest: bytes) -> Sparse | None:
    """The run's sparse graph, or ``None`` for the complete graph (module docstring).

    ``config`` is a :class:`~fedpriv.federation.secagg_common.SecAggConfig`; raises its
    :meth:`check_node_targets` error when a node's own floors refuse the run's targets.
    """
    config.check_node_targets()
    ids = tuple(sorted({int(i) for i in ids}))
    key = (config, ids, str(run_id), bytes(book_digest))
    if key in _derived:  # a deterministic function of public values: derived once per process
        return _derived[key]
    params = config.graph_parameters(len(ids))
    out = None
    if params is not None:
        seed = graph_seed(run_id=run_id, book_digest=book_digest)
        graph = harary_graph(ids, params.degree, seed)
        out = Sparse(graph=graph, params=params, threshold=config.neighbourhood_threshold(params))
    if len(_derived) >= 2:  # a run or two: a graph caches every neighbourhood
        del _derived[next(iter(_derived))]
    _derived[key] = out
    return out


# (config, ids, run id, book digest) -> the run's graph: every party of one process (the
# in-process runtime: the server and K clients) derives the same public graph; one object
# serves them all, with its caches of neighbourhoods and survivor checks.
_derived: dict[tuple, Sparse | None] = {}


def round_topology(sparse: Sparse | None, participants: Sequence[int], threshold: int) -> Topology:
    """The round's topology: the run's sparse graph, or the complete graph over
    ``participants`` with the round's threshold ``threshold``."""
    if sparse is not None:
        return sparse
    return Complete(participants=tuple(sorted(participants)), threshold=threshold)
