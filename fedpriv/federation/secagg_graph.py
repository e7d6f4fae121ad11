"""SecAgg+'s sparse communication graph: a random Harary graph, its degree and threshold.

Bell, Bonawitz, Gascón, Lepoint, Raykova, "Secure Single-Server Aggregation with
(Poly)Logarithmic Overhead" (CCS 2020): each client masks with, and Shamir-shares its
self-mask seed to, only its k neighbours in a random graph instead of all K − 1 peers,
with k = O(log K). The graph is the Harary graph H(K, k) (ring positions at distance at
most k/2 adjacent) under a uniformly random assignment of clients to positions (§3).

Public randomness: :func:`graph_seed` hashes the run id and the pinned key book, so every
client recomputes the graph and refuses an announced neighbourhood that differs
(:func:`check_neighbourhood`). No one party picks the seed, but one able to try 2^g key
books (grinding its own key, withholding clients) multiplies each bound below by at most
2^g (union bound over its tries): σ must carry that margin.

:func:`choose_parameters` computes the paper's conditions (§3, the good-graph conditions
and the appendix's concrete parameters) for at most γK corrupt and δK dropped clients,
a fixed-size set independent of the labelling (dropouts not chosen after seeing G):

* security ≤ 2^-σ, half each: (i) the honest survivors stay connected in G (else the
  server learns a component's sum); (ii) no honest client has c_u corrupt neighbours
  enough to rebuild its seed: c_u ≥ t against a semi-honest server, c_u ≥ 2t − k
  against a semi-malicious one that shows neighbours different survivor lists (their
  k − c_u honest answers then split between the two secrets the paper shares);
* correctness ≤ 2^-η: every client keeps t neighbours that survive *and* are honest
  (corrupt ones may withhold: stricter than the paper's semi-honest correctness).

Each is computed, not read off a closed form: per client an exact hypergeometric tail
(its neighbours are a uniform k-subset of the K − 1 others), a union bound over the K
clients, and for (i) a union bound over pairs of separated windows of k/2 consecutive
positions all removed (removing a set disconnects H(K, k) only if it holds two), each
with probability (B)_k/(K)_k for B = ⌊γK⌋ + ⌊δK⌋. A server that claims dropouts
*after* seeing G falls outside (i): k/2 claimed dropouts on each side cut an arc off.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy.special import gammaln

from fedpriv.validation import check_count

_SEED_TAG = b"fedpriv-secagg-graph-v1"  # domain tag: graph seeds and nothing else
_FRACTION_SLACK = 1e-9  # ⌊0.29·100⌋ must be 29 despite 0.29·100 = 28.999…
_LOG_SLACK = 1e-9  # relative margin on every target probability (float rounding)
Server = Literal["semi-honest", "semi-malicious"]


class NeighbourhoodMismatch(ValueError):
    """An announced neighbourhood differs from the one derived from the public seed."""


@dataclass(frozen=True, kw_only=True, eq=False)
class CommunicationGraph:
    """A Harary graph H(K, k) over client ids under a random labelling (O(K) memory).

    ``ids`` are the K client ids, sorted; ``ring`` [i] is the index (into ``ids``) of the
    client at ring position i, ``position`` its inverse. ``degree`` k is even and at most
    K − 2, or K − 1 (the complete graph, Bonawitz et al. 2017's setting).
    """

    ids: np.ndarray  # uint64, sorted
    degree: int
    ring: np.ndarray  # int64, ring position -> client index
    position: np.ndarray  # int64, client index -> ring position

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def complete(self) -> bool:
        return self.degree >= self.size - 1


@dataclass(frozen=True, kw_only=True)
class FailureBounds:
    """Union bounds on the failure events of one (K, k, t) (module docstring)."""

    disconnect: float  # honest survivors disconnected: security event (i)
    shares: float  # some honest client's seed recoverable by the adversary: event (ii)
    correctness: float  # some client left with fewer than t honest surviving neighbours

    @property
    def security(self) -> float:
        return self.disconnect + self.shares


@dataclass(frozen=True, kw_only=True)
class GraphParameters:
    """The smallest degree meeting the targets, its threshold and the bounds it achieves.

    ``threshold`` is the smallest t meeting the security target (the most dropouts
    tolerated); every t in [threshold, threshold_max] meets both targets.
    """

    num_nodes: int
    degree: int
    threshold: int
    threshold_max: int
    corrupt: int  # ⌊γK⌋
    dropouts: int  # ⌊δK⌋
    server: Server
    sigma: float
    eta: float
    bounds: FailureBounds


def _count_of(name: str, fraction: object, num_nodes: int) -> int:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"{name} must be a number in [0, 1); got {fraction!r}")
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"{name} must lie in [0, 1); got {fraction!r}")
    return math.floor(fraction * num_nodes + _FRACTION_SLACK)


def _check_degree(num_nodes: int, degree: int) -> int:
    k = check_count("degree", degree)
    if k != num_nodes - 1 and (k % 2 or k > num_nodes - 2 or k < 2):
        raise ValueError(
            f"degree must be even in [2, K − 2] or K − 1 = {num_nodes - 1} (complete); got {k}"
        )
    return k


def graph_seed(*, run_id: str, book_digest: bytes) -> bytes:
    """The graph's public 32-byte seed: SHA-256(tag ‖ len ‖ run id ‖ key-book digest).

    ``book_digest`` is the pinned key book's digest
    (:func:`fedpriv.federation.secagg_consistency.book_digest`), which every client
    holds after the key exchange: the graph is fixed once per run, with the keys.
    """
    rid = run_id.encode()
    digest = bytes(book_digest)
    if len(digest) != 32:
        raise ValueError(f"book_digest must be 32 bytes (SHA-256); got {len(digest)}")
    return hashlib.sha256(_SEED_TAG + len(rid).to_bytes(8, "big") + rid + digest).digest()


def _ring_order(seed: bytes, size: int) -> np.ndarray:
    """A uniform random permutation of range(size) from ``seed``: sort by 128-bit ChaCha20
    keys (RFC 8439), ties (probability < K²·2^-129) broken by index. Spelled out rather
    than a numpy Generator so every client, whatever its numpy version, agrees."""
    nonce = bytes(16)  # counter 0, nonce 0: the key is used for this stream only
    stream = Cipher(algorithms.ChaCha20(seed, nonce), mode=None).encryptor()
    words = np.frombuffer(stream.update(bytes(16 * size)), dtype="<u8").reshape(size, 2)
    return np.lexsort((np.arange(size), words[:, 1], words[:, 0])).astype(np.int64)


def harary_graph(client_ids: Iterable[int], degree: int, seed: bytes) -> CommunicationGraph:
    """The random Harary graph H(K, k) on ``client_ids`` labelled by ``seed`` (Bell et al.
    2020, §3): deterministic given the seed, O(K) memory, O(K log K) time."""
    ids = np.array(sorted({int(i) for i in client_ids}), dtype=np.uint64)
    if ids.size < 3:
        raise ValueError(f"a communication graph needs at least 3 clients; got {ids.size}")
    seed = bytes(seed)
    if len(seed) != 32:
        raise ValueError(f"seed must be 32 bytes (graph_seed); got {len(seed)}")
    k = _check_degree(int(ids.size), degree)
    ring = _ring_order(seed, int(ids.size))
    position = np.empty_like(ring)
    position[ring] = np.arange(ring.size)
    return CommunicationGraph(ids=ids, degree=k, ring=ring, position=position)


def _indices(graph: CommunicationGraph, us: Iterable[int]) -> np.ndarray:
    """Positions in ``graph.ids`` of clients ``us`` (one searchsorted), or KeyError."""
    want = np.array(us if isinstance(us, list | tuple) else list(us), dtype=np.uint64)
    idx = np.minimum(np.searchsorted(graph.ids, want), graph.size - 1)
    if (bad := graph.ids[idx] != want).any():
        raise KeyError(f"client {int(want[bad][0])} is not a node of the communication graph")
    return idx


def _offsets(graph: CommunicationGraph) -> np.ndarray:
    """Ring offsets of a client's neighbours: ±1..±k/2, or 1..K − 1 (complete graph)."""
    if graph.complete:
        return np.arange(1, graph.size)
    half = graph.degree // 2
    return np.concatenate([np.arange(-half, 0), np.arange(1, half + 1)])


def neighbours(graph: CommunicationGraph, u: int) -> tuple[int, ...]:
    """Client ``u``'s k neighbours, sorted: those within k/2 of it on the ring."""
    near = graph.ring[(graph.position[_indices(graph, [u])[0]] + _offsets(graph)) % graph.size]
    return tuple(np.sort(graph.ids[near]).tolist())


def adjacency(graph: CommunicationGraph) -> np.ndarray:
    """(K, k) int64: row i holds the indices (into ``graph.ids``) of client i's neighbours
    (the server's whole view; O(K·k) memory)."""
    return graph.ring[(graph.position[:, None] + _offsets(graph)[None, :]) % graph.size]


def check_neighbourhood(graph: CommunicationGraph, u: int, announced: Iterable[int]) -> None:
    """Refuse an announced neighbourhood of ``u`` other than the derived one.

    Raises
    ------
    NeighbourhoodMismatch
        Naming the ids missing from, and the ids extra in, the announcement.
    """
    derived, given = set(neighbours(graph, u)), [int(v) for v in announced]
    if len(set(given)) != len(given) or set(given) != derived:
        missing, extra = sorted(derived - set(given)), sorted(set(given) - derived)
        raise NeighbourhoodMismatch(
            f"neighbourhood announced for client {u} is not the one derived from the public "
            f"seed: missing {missing}, extra {extra}, repeated {len(given) != len(set(given))}"
        )


def mask_signs(graph: CommunicationGraph, u: int, participants: Iterable[int]) -> dict[int, int]:
    """{v: ±1} over u's neighbours among ``participants``: u adds m_uv for v > u and
    subtracts it for v < u (Bonawitz et al. 2017, §4, restricted to G's edges), so the
    pair masks cancel in the sum over the participants."""
    present = {int(v) for v in participants}
    return {v: 1 if v > u else -1 for v in neighbours(graph, u) if v in present}


def unmask_duties(
    graph: CommunicationGraph, u: int, survivors: Iterable[int], dropped: Iterable[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(survivors whose seed share u reveals, dropped clients whose pair mask u reveals):
    u's neighbours in each list, and nobody else."""
    near = set(neighbours(graph, u))
    live = tuple(sorted(near & {int(v) for v in survivors}))
    return live, tuple(sorted(near & {int(v) for v in dropped}))


def survivors_connected(graph: CommunicationGraph, survivors: Iterable[int]) -> bool:
    """Whether G restricted to ``survivors`` is connected, in O(K): on H(K, k) a set is
    connected iff at most one cyclic gap between its consecutive ring positions exceeds
    k/2 (an edge spans at most k/2 positions)."""
    idx = _indices(graph, survivors)
    if len(idx) <= 1 or graph.complete:
        return True
    pos = np.sort(graph.position[idx])
    gaps = np.diff(np.append(pos, pos[0] + graph.size))
    return int(np.count_nonzero(gaps > graph.degree // 2)) <= 1


def _log_hypergeom_tail(population: int, marked: int, draws: int) -> np.ndarray:
    """log P[X ≥ x] for x = 0..draws, X ~ Hypergeometric(population, marked, draws):
    exact pmf in log space (lgamma), tails by log-sum-exp."""

    def lcomb(n: int, j: np.ndarray) -> np.ndarray:
        ok = (j >= 0) & (j <= n)
        jj = np.where(ok, j, 0).astype(float)
        return np.where(ok, gammaln(n + 1) - gammaln(jj + 1) - gammaln(n - jj + 1), -np.inf)

    x = np.arange(draws + 1)
    logpmf = lcomb(marked, x) + lcomb(population - marked, draws - x)
    logpmf -= lcomb(population, np.array([draws]))[0]
    return np.logaddexp.accumulate(logpmf[::-1])[::-1]


def _log_disconnect(num_nodes: int, degree: int, removed: int) -> float:
    """log of the union bound on H(K, k) minus ``removed`` random clients disconnecting:
    K(K − k − 1)/2 pairs of separated k/2-windows, each all removed w.p. (B)_k/(K)_k."""
    k, n, b = degree, num_nodes, removed
    if k >= n - 1 or b < k:
        return -math.inf
    pairs = math.log(n) + math.log(n - k - 1) - math.log(2)
    falling_b = math.lgamma(b + 1) - math.lgamma(b - k + 1)  # log (B)_k
    falling_n = math.lgamma(n + 1) - math.lgamma(n - k + 1)  # log (K)_k
    return pairs + falling_b - falling_n


def _setting(n: object, gamma: object, delta: object, server: object) -> tuple[int, int, int]:
    """(K, ⌊γK⌋, ⌊δK⌋), checked: the model named, and fewer than K − 1 clients bad."""
    n = check_count("num_nodes", n, minimum=3)
    if server not in ("semi-honest", "semi-malicious"):
        raise ValueError(f"server must be 'semi-honest' or 'semi-malicious'; got {server!r}")
    c = _count_of("corrupt_fraction", gamma, n)
    d = _count_of("dropout_fraction", delta, n)
    if c + d >= n - 1:
        raise ValueError(f"{c} corrupt and {d} dropped of K = {n} clients leave no honest pair")
    return n, c, d


def _log_tails(n: int, k: int, c: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """log tails of a client's corrupt neighbours and of its corrupt-or-dropped ones: its k
    neighbours are a uniform k-subset of the K − 1 others (the random labelling)."""
    return _log_hypergeom_tail(n - 1, c, k), _log_hypergeom_tail(n - 1, c + d, k)


def _share_cut(degree: int, threshold: int, server: Server) -> int:
    """The corrupt-neighbour count from which the adversary rebuilds a seed."""
    return threshold if server == "semi-honest" else 2 * threshold - degree


def _log_at(log_tail: np.ndarray, x: int) -> float:
    """log P[X ≥ x] from :func:`_log_hypergeom_tail`'s array, for any integer x."""
    return 0.0 if x <= 0 else (-math.inf if x >= log_tail.size else float(log_tail[x]))


def failure_bounds(
    num_nodes: int,
    degree: int,
    threshold: int,
    *,
    corrupt_fraction: float,
    dropout_fraction: float,
    server: Server = "semi-malicious",
) -> FailureBounds:
    """The union bounds of the module docstring for H(K, k) and Shamir threshold t."""
    n, c, d = _setting(num_nodes, corrupt_fraction, dropout_fraction, server)
    k, t = _check_degree(n, degree), check_count("threshold", threshold)
    corrupt_tail, bad_tail = _log_tails(n, k, c, d)
    return FailureBounds(
        disconnect=min(1.0, math.exp(_log_disconnect(n, k, c + d))),
        shares=min(1.0, n * math.exp(_log_at(corrupt_tail, _share_cut(k, t, server)))),
        correctness=min(1.0, n * math.exp(_log_at(bad_tail, k - t + 1))),
    )


def check_parameters(
    num_nodes: int,
    degree: int,
    threshold: int,
    *,
    corrupt_fraction: float,
    dropout_fraction: float,
    sigma: float,
    eta: float,
    server: Server = "semi-malicious",
) -> FailureBounds:
    """A node's own check of an announced (k, t) against its targets: the bounds, or
    ValueError if security exceeds 2^-σ or correctness 2^-η."""
    b = failure_bounds(
        num_nodes, degree, threshold, corrupt_fraction=corrupt_fraction,
        dropout_fraction=dropout_fraction, server=server,
    )  # fmt: skip
    if b.security > 2.0**-sigma or b.correctness > 2.0**-eta:
        raise ValueError(
            f"degree {degree} with threshold {threshold} for K = {num_nodes} fails the node's "
            f"targets: security {b.security:.3g} (≤ 2^-{sigma} asked), correctness "
            f"{b.correctness:.3g} (≤ 2^-{eta} asked)"
        )
    return b


def choose_parameters(
    num_nodes: int,
    *,
    corrupt_fraction: float = 0.1,
    dropout_fraction: float = 0.1,
    sigma: float = 40.0,
    eta: float = 20.0,
    server: Server = "semi-malicious",
) -> GraphParameters:
    """The smallest degree k (and its threshold t) of the random Harary graph meeting
    security failure ≤ 2^-σ and correctness failure ≤ 2^-η (module docstring).

    Each security event gets 2^-(σ+1). The defaults σ = 40, η = 20 are the concrete
    choices of Bell et al. 2020. Falls back to the complete graph (k = K − 1, Bonawitz
    et al. 2017) when no sparser degree does.

    Raises
    ------
    ValueError
        If not even the complete graph meets the targets (γ and δ too large for K).
    """
    n, c, d = _setting(num_nodes, corrupt_fraction, dropout_fraction, server)
    for name, v in (("sigma", sigma), ("eta", eta)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1000:
            raise ValueError(f"{name} must be a number in (0, 1000); got {v!r}")
    # Per-client targets (before the ×K union bound), a hair below so float rounding
    # in the log tails never lets a bound overshoot its target.
    log_sec = -(sigma + 1) * math.log(2) - _LOG_SLACK
    log_share, log_cor = log_sec - math.log(n), -eta * math.log(2) - math.log(n) - _LOG_SLACK
    for k in [*range(2, n - 1, 2), n - 1]:
        if _log_disconnect(n, k, c + d) > log_sec:
            continue
        corrupt_tail, bad_tail = _log_tails(n, k, c, d)
        cut = [_share_cut(k, t, server) for t in range(k + 1)]
        secure = [t for t in range(2, k + 1) if _log_at(corrupt_tail, cut[t]) <= log_share]
        correct = [t for t in range(2, k + 1) if _log_at(bad_tail, k - t + 1) <= log_cor]
        if secure and correct and secure[0] <= correct[-1]:
            t = secure[0]
            bounds = failure_bounds(
                n, k, t, corrupt_fraction=corrupt_fraction,
                dropout_fraction=dropout_fraction, server=server,
            )  # fmt: skip
            return GraphParameters(
                num_nodes=n, degree=k, threshold=t, threshold_max=correct[-1], corrupt=c,
                dropouts=d, server=server, sigma=float(sigma), eta=float(eta), bounds=bounds,
            )  # fmt: skip
    raise ValueError(
        f"no degree meets 2^-{sigma} security and 2^-{eta} correctness for K = {n} with "
        f"{c} corrupt and {d} dropped clients ({server} server), not even the complete graph"
    )
