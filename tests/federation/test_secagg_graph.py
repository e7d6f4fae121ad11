"""SecAgg+'s communication graph: Harary structure, public derivation, degree and bounds.

Module: ``fedpriv/federation/secagg_graph.py`` (Bell, Bonawitz, Gascón, Lepoint, Raykova,
CCS 2020, §3 and its appendix's parameters).
"""

import functools
import hashlib
import math
from collections import deque
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.federation import secagg_graph as sg

ALPHA = 1e-3  # false-alarm rate of every statistical test (fixed generators: deterministic)
# k(K) ≤ c·log2 K at the defaults (γ = δ = 0.1, σ = 40, η = 20), K = 10 … 10^6.
C_LOG = {"semi-malicious": 22.0, "semi-honest": 7.0}
SERVERS = ("semi-honest", "semi-malicious")


def _digest(tag: str) -> bytes:
    return hashlib.sha256(tag.encode()).digest()


@st.composite
def graphs(draw, max_nodes=40):
    """(ids, degree, seed) of a valid graph: k even in [2, K − 2], or K − 1."""
    n = draw(st.integers(3, max_nodes))
    degrees = [*range(2, n - 1, 2), n - 1]
    k = draw(st.sampled_from(degrees))
    ids = draw(st.sets(st.integers(0, 2**64 - 1), min_size=n, max_size=n))
    return sorted(ids), k, draw(st.binary(min_size=32, max_size=32))


def _ring_distance(g: sg.CommunicationGraph, i: int, j: int) -> int:
    d = abs(int(g.position[i]) - int(g.position[j]))
    return min(d, g.size - d)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_graph_is_regular_symmetric_and_harary(case):
    ids, k, seed = case
    g = sg.harary_graph(ids, k, seed)
    a = sg.adjacency(g)
    n = len(ids)
    assert a.shape == (n, k)
    assert sorted(g.ring.tolist()) == list(range(n))  # a permutation of the positions
    edges = set()
    for i in range(n):
        row = a[i].tolist()
        assert len(set(row)) == k and i not in row  # k distinct neighbours, no self-loop
        assert sg.neighbours(g, ids[i]) == tuple(sorted(ids[j] for j in row))
        if k < n - 1:  # Harary: exactly the clients within k/2 on the ring
            assert all(_ring_distance(g, i, j) <= k // 2 for j in row)
        edges.update((i, j) for j in row)
    assert all((j, i) in edges for i, j in edges)  # symmetric
    assert len(edges) == n * k


def test_graph_is_deterministic_under_the_seed_and_differs_across_seeds():
    ids = list(range(100, 200))
    seed = sg.graph_seed(run_id="run", book_digest=_digest("book"))
    assert seed == sg.graph_seed(run_id="run", book_digest=_digest("book"))
    a, b = sg.harary_graph(ids, 10, seed), sg.harary_graph(reversed(ids), 10, seed)
    assert np.array_equal(a.ring, b.ring) and np.array_equal(sg.adjacency(a), sg.adjacency(b))
    seeds = {seed}
    seeds |= {sg.graph_seed(run_id=f"run{i}", book_digest=_digest("book")) for i in range(30)}
    seeds |= {sg.graph_seed(run_id="run", book_digest=_digest(f"b{i}")) for i in range(30)}
    assert len(seeds) == 61  # the run id and the key book both move the seed
    rings = {sg.harary_graph(ids, 10, s).ring.tobytes() for s in seeds}
    assert len(rings) == 61
    hoods = [sg.neighbours(sg.harary_graph(ids, 10, s), 100) for s in seeds]
    assert len(set(hoods)) == 61  # client 100's neighbourhood moves with the seed


def test_each_client_recomputes_its_neighbourhood_and_refuses_another():
    book = {7 * i + 3: _digest(f"pk{i}") for i in range(30)}
    digest = _digest(repr(sorted(book.items())))  # stands for the pinned key book's digest
    server = sg.harary_graph(book, 6, sg.graph_seed(run_id="r1", book_digest=digest))
    for u in book:  # each client derives the graph on its own
        own = sg.harary_graph(book, 6, sg.graph_seed(run_id="r1", book_digest=digest))
        announced = sg.neighbours(server, u)
        assert sg.neighbours(own, u) == announced
        sg.check_neighbourhood(own, u, reversed(announced))  # order does not matter
    u = 3
    honest = list(sg.neighbours(server, u))
    outsider = next(v for v in book if v not in honest and v != u)
    for bad in (
        [*honest[1:], outsider],  # one neighbour swapped for a client the server chose
        honest[1:],  # one withheld
        [*honest[1:], honest[1]],  # one repeated
    ):
        with pytest.raises(sg.NeighbourhoodMismatch, match="client 3"):
            sg.check_neighbourhood(server, u, bad)
    # A server announcing a graph from a seed of its own choosing is caught by most clients.
    ground = sg.harary_graph(book, 6, _digest("server's own seed"))
    refused = 0
    for v in book:
        try:
            sg.check_neighbourhood(server, v, sg.neighbours(ground, v))
        except sg.NeighbourhoodMismatch:
            refused += 1
    assert refused >= 25
    with pytest.raises(KeyError, match="not a node"):
        sg.neighbours(server, 4)


def test_labelling_is_uniform():
    # Every bound assumes a uniform labelling: a fixed pair is adjacent w.p. k/(K − 1), and
    # client 0 sits at each ring position w.p. 1/K.
    n, k, trials = 20, 4, 4000
    adjacent, where = 0, np.zeros(n, int)
    for i in range(trials):
        g = sg.harary_graph(range(n), k, _digest(f"uniform{i}"))
        adjacent += 5 in sg.neighbours(g, 0)
        where[g.position[0]] += 1
    assert stats.binomtest(adjacent, trials, k / (n - 1)).pvalue > ALPHA
    assert stats.chisquare(where).pvalue > ALPHA
    # Power: a pair adjacency rate off by a quarter is rejected at this sample size.
    assert stats.binomtest(adjacent, trials, 1.25 * k / (n - 1)).pvalue < ALPHA


@settings(max_examples=100, deadline=None)
@given(graphs(), st.data())
def test_pair_masks_go_to_neighbours_only_and_cancel(case, data):
    ids, k, seed = case
    g = sg.harary_graph(ids, k, seed)
    present = data.draw(st.lists(st.sampled_from(ids), unique=True, min_size=2))
    rng = np.random.default_rng(len(present))
    masks = {}  # m_uv for each edge {u, v}
    total = 0
    for u in present:
        signs = sg.mask_signs(g, u, present)
        assert set(signs) == set(sg.neighbours(g, u)) & set(present) - {u}
        for v, s in signs.items():
            assert s == -sg.mask_signs(g, v, present)[u]  # antisymmetric
            m = masks.setdefault((min(u, v), max(u, v)), int(rng.integers(2**63)))
            total = (total + s * m) % 2**64  # the ring Z_{2^64}
    assert total == 0
    assert masks or not any(sg.mask_signs(g, u, present) for u in present)


@settings(max_examples=100, deadline=None)
@given(graphs(), st.data())
def test_unmask_duties_are_the_neighbours_in_each_list(case, data):
    ids, k, seed = case
    g = sg.harary_graph(ids, k, seed)
    u = data.draw(st.sampled_from(ids))
    others = [v for v in ids if v != u]
    dropped = set(data.draw(st.lists(st.sampled_from(others), unique=True)))
    survivors = [v for v in ids if v not in dropped]
    live, gone = sg.unmask_duties(g, u, survivors, dropped)
    near = set(sg.neighbours(g, u))
    assert set(live) == near - dropped and set(gone) == near & dropped


def _bfs_connected(adj: np.ndarray, keep: np.ndarray) -> bool:
    nodes = np.flatnonzero(keep)
    if nodes.size <= 1:
        return True
    seen, todo = {int(nodes[0])}, deque([int(nodes[0])])
    while todo:
        for j in adj[todo.popleft()].tolist():
            if keep[j] and j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == nodes.size


@settings(max_examples=200, deadline=None)
@given(graphs(max_nodes=30), st.data())
def test_survivors_connected_matches_a_search(case, data):
    ids, k, seed = case
    g = sg.harary_graph(ids, k, seed)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids))))
    expected = _bfs_connected(sg.adjacency(g), keep)
    assert sg.survivors_connected(g, [ids[i] for i in np.flatnonzero(keep)]) == expected


def _exact_tails(population: int, marked: int, draws: int) -> list[Fraction]:
    """P[X ≥ x] for x = 0..draws in exact rational arithmetic."""
    pmf = [
        math.comb(marked, j) * math.comb(population - marked, draws - j) for j in range(draws + 1)
    ]
    total, tails, acc = math.comb(population, draws), [], 0
    for w in reversed(pmf):
        acc += w
        tails.append(Fraction(acc, total))
    return tails[::-1]


@pytest.mark.parametrize(
    ("population", "marked", "draws"), [(9, 2, 4), (99, 20, 18), (999, 200, 66), (9999, 1000, 280)]
)
def test_hypergeometric_tails_are_exact(population, marked, draws):
    tail = np.exp(sg._log_hypergeom_tail(population, marked, draws))
    for x, exact in enumerate(_exact_tails(population, marked, draws)):
        if exact == 0:
            assert tail[x] == 0
        elif exact > Fraction(1, 10**300):
            assert tail[x] == pytest.approx(float(exact), rel=1e-9)


@pytest.mark.parametrize(("n", "k", "removed"), [(20, 4, 6), (100, 10, 20), (1000, 20, 200)])
def test_disconnection_bound_is_the_union_bound(n, k, removed):
    pairs = Fraction(n * (n - k - 1), 2)
    exact = pairs * Fraction(math.perm(removed, k), math.perm(n, k))
    assert math.exp(sg._log_disconnect(n, k, removed)) == pytest.approx(float(exact), rel=1e-9)
    assert sg._log_disconnect(n, n - 1, removed) == -math.inf  # complete graph never splits


@pytest.mark.parametrize(
    ("server", "k", "t", "cut"), [("semi-honest", 18, 8, 8), ("semi-malicious", 30, 19, 8)]
)
def test_failure_bounds_are_union_bounds_of_exact_tails(server, k, t, cut):
    # K = 100, 10 corrupt, 10 dropped: a client's neighbours are k of the 99 others; the
    # adversary needs t (semi-honest) or 2t − k (semi-malicious) of them corrupt.
    b = sg.failure_bounds(100, k, t, corrupt_fraction=0.1, dropout_fraction=0.1, server=server)
    shares, correct = _exact_tails(99, 10, k)[cut], _exact_tails(99, 20, k)[k - t + 1]
    assert 0 < b.shares < 1 and 0 < b.correctness < 1  # not clipped: the formula itself
    assert b.shares == pytest.approx(float(100 * shares), rel=1e-9)
    assert b.correctness == pytest.approx(float(100 * correct), rel=1e-9)
    assert b.disconnect == pytest.approx(math.exp(sg._log_disconnect(100, k, 20)), rel=1e-12)
    assert b.security == b.disconnect + b.shares


def _feasible(n, k, t, server, sigma, eta) -> bool:
    b = sg.failure_bounds(n, k, t, corrupt_fraction=0.1, dropout_fraction=0.1, server=server)
    half = 2.0 ** -(sigma + 1)
    return b.disconnect <= half and b.shares <= half and b.correctness <= 2.0**-eta


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize(("sigma", "eta"), [(40, 20), (8, 4)])
@pytest.mark.parametrize("n", [10, 50, 100, 300])
def test_chosen_degree_is_the_smallest_meeting_the_targets(n, sigma, eta, server):
    p = sg.choose_parameters(n, sigma=sigma, eta=eta, server=server)
    assert p.bounds.security <= 2.0**-sigma and p.bounds.correctness <= 2.0**-eta
    assert (p.corrupt, p.dropouts) == (n // 10, n // 10)
    for t in range(p.threshold, p.threshold_max + 1):  # every t in the window meets both
        sg.check_parameters(
            n, p.degree, t, corrupt_fraction=0.1, dropout_fraction=0.1,
            sigma=sigma, eta=eta, server=server,
        )  # fmt: skip
    assert p.threshold == 2 or not _feasible(n, p.degree, p.threshold - 1, server, sigma, eta)
    assert not _feasible(n, p.degree, p.threshold_max + 1, server, sigma, eta)
    for k in range(2, p.degree, 2):  # no smaller degree admits any threshold
        assert not any(_feasible(n, k, t, server, sigma, eta) for t in range(1, k + 1))


@pytest.mark.parametrize("server", SERVERS)
def test_degree_grows_as_log_k(server):
    degrees = {n: sg.choose_parameters(n, server=server).degree for n in (10, 100, 10**3, 10**4)}
    for n, k in degrees.items():
        assert k <= C_LOG[server] * math.log2(n), (n, k)
    assert degrees[10**4] < 10**4 / 20  # sparse: under 5% of the clients
    assert sg.choose_parameters(10**6, server=server).degree <= C_LOG[server] * math.log2(10**6)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="even"):
        sg.harary_graph(range(10), 3, bytes(32))
    with pytest.raises(ValueError, match="at least 3"):
        sg.harary_graph(range(2), 1, bytes(32))
    with pytest.raises(ValueError, match="32 bytes"):
        sg.harary_graph(range(10), 4, bytes(16))
    with pytest.raises(ValueError, match="not even the complete graph"):
        sg.choose_parameters(20, corrupt_fraction=0.45, dropout_fraction=0.45)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        sg.choose_parameters(100, corrupt_fraction=1.0)
    with pytest.raises(ValueError, match="server"):
        sg.choose_parameters(100, server="malicious")
    p = sg.choose_parameters(1000)
    with pytest.raises(ValueError, match="fails the node's targets"):  # the k/2 twin
        sg.check_parameters(
            1000, p.degree // 2, p.threshold // 2, corrupt_fraction=0.1,
            dropout_fraction=0.1, sigma=40, eta=20,
        )  # fmt: skip


# --- The bounds against sampled graphs -----------------------------------------------
# K = 100, γ = δ = 0.1 (10 corrupt, 10 dropped, a uniform random set), σ = η = 3: the
# targets (1/8) are large enough to measure. Each trial draws a graph from a fresh seed.
N_SIM, TRIALS, SIGMA, ETA = 100, 3000, 3, 3


@functools.cache
def _simulate(k: int, t: int, server: str) -> np.ndarray:
    """(TRIALS, 3) booleans: honest survivors disconnected; some honest client's seed
    rebuildable; some honest survivor with fewer than t honest surviving neighbours."""
    rng = np.random.default_rng([k, t, len(server)])
    cut = t if server == "semi-honest" else 2 * t - k
    out = np.zeros((TRIALS, 3), bool)
    for i in range(TRIALS):
        g = sg.harary_graph(range(N_SIM), k, rng.bytes(32))
        adj = sg.adjacency(g)
        order = rng.permutation(N_SIM)
        corrupt, bad = np.zeros(N_SIM, bool), np.zeros(N_SIM, bool)
        corrupt[order[:10]], bad[order[:20]] = True, True
        good = ~bad
        out[i, 0] = not sg.survivors_connected(g, np.flatnonzero(good).tolist())
        out[i, 1] = bool(np.any(corrupt[adj].sum(axis=1)[~corrupt] >= cut))
        out[i, 2] = bool(np.any(good[adj].sum(axis=1)[good] < t))
    return out


def _clopper_pearson(hits: int, n: int) -> tuple[float, float]:
    """One-sided (1 − ALPHA) limits of a binomial rate."""
    low = 0.0 if hits == 0 else float(stats.beta.ppf(ALPHA, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - ALPHA, hits + 1, n - hits))
    return low, high


@pytest.mark.parametrize("server", SERVERS)
def test_sampled_failure_rates_respect_the_bounds(server):
    p = sg.choose_parameters(N_SIM, sigma=SIGMA, eta=ETA, server=server)
    events = _simulate(p.degree, p.threshold, server)
    b = p.bounds
    claims = [
        (events[:, 0], b.disconnect),
        (events[:, 1], b.shares),
        (events[:, 2], b.correctness),
        (events[:, 0] | events[:, 1], 2.0**-SIGMA),
        (events[:, 2], 2.0**-ETA),
    ]
    for hit, bound in claims:
        low, _ = _clopper_pearson(int(hit.sum()), TRIALS)
        assert low <= bound, (server, hit.mean(), bound)


@pytest.mark.parametrize("server", SERVERS)
def test_half_the_degree_fails_measurably(server):
    # The broken twin: k/2 (and t scaled with it) claimed to meet the same targets.
    p = sg.choose_parameters(N_SIM, sigma=SIGMA, eta=ETA, server=server)
    k = p.degree // 2 - (p.degree // 2) % 2
    t = max(2, round(p.threshold * k / p.degree))
    events = _simulate(k, t, server)
    security, _ = _clopper_pearson(int((events[:, 0] | events[:, 1]).sum()), TRIALS)
    correctness, _ = _clopper_pearson(int(events[:, 2].sum()), TRIALS)
    assert security > 2.0**-SIGMA or correctness > 2.0**-ETA
    assert security > p.bounds.security or correctness > p.bounds.correctness
    own = sg.failure_bounds(N_SIM, k, t, corrupt_fraction=0.1, dropout_fraction=0.1, server=server)
    assert own.security > 2.0**-SIGMA or own.correctness > 2.0**-ETA  # honest about it


def test_one_clients_bad_neighbours_are_hypergeometric():
    # The per-client law behind every bound: a client's k neighbours hold
    # Hypergeometric(K − 1, B, k) of the B corrupt-or-dropped others.
    n, k, removed, trials = 60, 10, 12, 4000
    rng = np.random.default_rng(5)
    counts = np.zeros(k + 1, int)
    for _ in range(trials):
        g = sg.harary_graph(range(n), k, rng.bytes(32))
        bad = set((1 + rng.permutation(n - 1)[:removed]).tolist())  # client 0 stays good
        counts[len(bad.intersection(sg.neighbours(g, 0)))] += 1

    def pvalue(draws: int) -> float:
        expected = trials * stats.hypergeom(n - 1, removed, draws).pmf(np.arange(k + 1))
        pooled = np.searchsorted(np.cumsum(expected) / trials, [0.05, 0.95])  # tails pooled
        lo, hi = int(pooled[0]), int(pooled[1])
        obs = [counts[: lo + 1].sum(), *counts[lo + 1 : hi], counts[hi:].sum()]
        exp = [expected[: lo + 1].sum(), *expected[lo + 1 : hi], expected[hi:].sum()]
        return float(stats.chisquare(obs, exp).pvalue)

    assert pvalue(k) > ALPHA
    assert pvalue(k - 2) < ALPHA  # power: two neighbours fewer is rejected
