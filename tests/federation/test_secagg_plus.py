"""SecAgg+ wired into secure aggregation: neighbourhoods, their threshold, their checks.

Protocol: ``fedpriv/federation/secagg.py`` (its "Sparse graph" paragraph) and
``fedpriv/federation/secagg_topology.py``; the graph itself: ``secagg_graph.py`` (Bell,
Bonawitz, Gascón, Lepoint, Raykova, CCS 2020). K = 20 at the defaults (γ = δ = 0.1,
σ = 40, η = 20) gives degree k = 12 and threshold t = 8.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.federation import shamir
from fedpriv.federation.secagg import (
    SecAggAbort,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    sum_plain,
)
from fedpriv.federation.secagg_graph import NeighbourhoodMismatch
from fedpriv.federation.secagg_server import seed_groups
from fedpriv.federation.secagg_topology import Sparse
from tests.federation.secagg_plus_rounds import (
    CODEC,
    K,
    N,
    _answers,
    _clients,
    _mask,
    _round,
    _vectors,
)


# --- when the sparse graph is used ----------------------------------------------------
def test_the_sparse_graph_starts_where_its_analysis_covers_a_colluder_and_a_dropout():
    cfg = SecAggConfig()
    assert [cfg.graph_parameters(k) for k in (3, 5, 9)] == [None] * 3  # ⌊0.1·K⌋ = 0
    assert (cfg.graph_parameters(10).degree, cfg.graph_parameters(10).threshold) == (6, 4)
    p = cfg.graph_parameters(K)
    assert (p.degree, p.threshold, p.corrupt, p.dropouts) == (12, 8, 2, 2)
    assert SecAggConfig(sparse=False).graph_parameters(K) is None  # participation < 1
    clients = _clients()
    g = clients[0].graph
    assert g.degree == 12 and g.threshold == 8
    for i, c in clients.items():
        assert c.graph.neighbours(i) == g.neighbours(i)  # every client derives the same graph
        assert sorted(c._keys) == list(g.neighbours(i))  # key agreement with k peers only
    # Another run id (or key book) draws another labelling.
    other = _clients(run_id="another-run")[0].graph
    assert any(other.neighbours(i) != g.neighbours(i) for i in range(K))
    # Without a run id (a transport that has none), the complete graph: every peer.
    plain = _clients(run_id=None)
    assert plain[0].graph is None and sorted(plain[0]._keys) == list(range(1, K))


def test_a_node_refuses_targets_weaker_than_its_own_floors():
    with pytest.raises(ValueError, match=r"secagg-collusion γ = 0\.1 is below this node's"):
        _clients(config=SecAggConfig(min_collusion=0.2))
    with pytest.raises(ValueError, match=r"secagg-sigma σ = 40 is below this node's"):
        _clients(config=SecAggConfig(min_sigma=64.0))
    _clients(config=SecAggConfig(collusion=0.2, min_collusion=0.2))  # met: accepted
    strict = _clients(config=SecAggConfig(collusion=0.2, sigma=64.0))
    assert strict[0].graph.degree > 12  # stronger targets, a denser graph


# --- exact sums, dropouts, stragglers ---------------------------------------------------
def test_a_sparse_round_sums_exactly_and_each_answer_is_neighbourhood_sized():
    clients = _clients()
    g = clients[0].graph
    lost = {3, 11}
    xs = _vectors([i for i in clients if i not in lost], seed=1)
    total, ups, answers, _ = _round(clients, xs)
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
    for i, up in ups.items():
        assert sorted(up.shares) == list(g.neighbours(i))  # k sealed shares, not K − 1
        assert up.nbytes == 8 * N + 12 * 66  # one round's batch: 10 + 40 + 16 bytes each
    for i, got in answers.items():
        assert set(got.shares) == set(g.closed(i)) - lost  # its surviving neighbours and itself
        assert set(got.lost) == set(g.neighbours(i)) & lost  # its dropped neighbours only
        assert (got.mask is None) == (not got.lost)  # one sum of their pair masks, if any


def test_a_straggler_stays_masked_by_its_self_mask():
    clients = _clients()
    xs = _vectors(range(K), seed=2)
    ups = _mask(clients, xs, 0)
    late = 7  # uploaded, but after the deadline: dropped for the server
    on_time = {i: u for i, u in ups.items() if i != late}
    g = clients[0].graph
    server = SecAggServer(codec=CODEC, graph=g)
    live, gone = server.unmask_plan(round_id=0, participants=list(range(K)), masked=on_time)
    assert gone == [late]
    answers = _answers(server, clients, on_time, live, gone)
    assert all(late not in a.shares for a in answers.values())  # no share of its seed
    # Every pair mask of the straggler is now known: its y is x + PRG(b) alone.
    y = ups[late].vector.copy()
    for i in g.neighbours(late):
        assert answers[i].lost == (late,)  # the only one dropped: the sum is that one mask
        y += answers[i].mask  # answers carry −(its sign): adding removes the mask
    assert np.abs(CODEC.decode(y) - xs[late]).min() > 1.0  # still covered by PRG(b)


def test_seeds_group_by_the_points_of_their_holders():
    clients = _clients()
    g = clients[0].graph
    everyone = tuple(range(K))
    assert list(seed_groups(g, everyone, everyone)) == [tuple(range(1, 14))]  # one group
    groups = seed_groups(g, tuple(i for i in everyone if i != 5), everyone)
    full = groups.pop(tuple(range(1, 14)))  # whose holders all answered: still one group
    assert sorted(u for u, _ in full) == [u for u in everyone if u not in g.closed(5)]
    # 5's neighbours and 5 itself miss 5's point in their own seed's holders (one group
    # per missing rank): 12 points left, still ≥ t = 8.
    assert all(len(pts) == 12 for pts in groups)
    assert sorted(u for m in groups.values() for u, _ in m) == list(g.closed(5))
    xs = _vectors(range(K), seed=3)
    total = _round(clients, xs, silent={5})[0]  # its shares come from t of the others
    np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))


# --- (a) outside a neighbourhood nothing arrives ----------------------------------------------
def _deterministic_seeds(monkeypatch, bump: int | None):
    """Fixed CSPRNG draws (each client's seed and share coefficients from its id), with
    client ``bump``'s seed changed: what each client receives can then be compared."""
    real_draw, real_split = shamir.draw_seeds, shamir.split
    who = {"id": None}

    def draw_seeds(count):
        rng = np.random.default_rng([who["id"], 7 if who["id"] == bump else 0])
        return rng.integers(0, shamir.PRIME, (count, shamir.LIMBS), dtype=np.uint64)

    def split(secrets, *, xs, threshold):
        coefficients = np.random.default_rng(who["id"]).integers(
            0, shamir.PRIME, (threshold - 1, *secrets.shape), dtype=np.uint64
        )
        return shamir.evaluate(secrets, coefficients, xs)

    monkeypatch.setattr(shamir, "draw_seeds", draw_seeds)
    monkeypatch.setattr(shamir, "split", split)
    return who, (real_draw, real_split)


def _tagging(real_mask, who):
    """``SecAggClient.mask`` telling :func:`_deterministic_seeds` whose draws follow."""

    def mask(self, *a, **kw):
        who["id"] = self.client_id
        return real_mask(self, *a, **kw)

    return mask


def test_a_client_outside_a_neighbourhood_receives_nothing_of_it(monkeypatch):
    # By construction: u's uploads are addressed to its neighbours only, its pair masks
    # involve them only, and a client counts and receives its neighbours' signatures only.
    # So what a non-neighbour w receives is the same whatever u's input and seed are;
    # what u's neighbour v receives (u's sealed share of b_u) changes with u's seed.
    u = 0
    views = []
    real_mask = SecAggClient.mask
    for bump, x_u in ((None, 1.0), (u, -2.0)):
        who, _ = _deterministic_seeds(monkeypatch, bump)
        clients = _clients()
        xs = _vectors(range(K), seed=4)
        xs[u] = np.full(N, x_u)
        monkeypatch.setattr(SecAggClient, "mask", _tagging(real_mask, who))
        total, _, _, received = _round(clients, xs)
        np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
        views.append(received)
        monkeypatch.undo()
    g = _clients()[0].graph
    outside = [w for w in range(K) if w not in g.closed(u)]
    assert len(outside) == K - 13
    for w in outside:
        got = views[0][w]
        assert u not in got["inbox"] and u not in got["signatures"]  # nothing from u
        assert views[0][w] == views[1][w]  # byte for byte, whatever u's input and seed
    v = g.neighbours(u)[0]
    assert u in views[0][v]["inbox"]
    assert views[0][v]["inbox"][u] != views[1][v]["inbox"][u]  # a neighbour's does change


# --- (b) the announced neighbourhood and threshold are the derived ones -----------------------
def test_a_client_refuses_a_neighbourhood_or_threshold_other_than_its_own():
    clients = _clients()
    g, c = clients[0].graph, clients[4]
    near = list(g.neighbours(4))
    outsider = next(w for w in range(K) if w not in g.closed(4))
    args = {"round_id": 0, "participants": list(range(K)), "codec": CODEC}
    wrong = [*near[:-1], outsider]
    why = rf"missing \[{near[-1]}\], extra \[{outsider}\]"
    with pytest.raises(NeighbourhoodMismatch, match=why):
        c.mask(np.zeros(N), **args, threshold=g.threshold, neighbours=wrong)
    with pytest.raises(NeighbourhoodMismatch):
        c.mask(np.zeros(N), **args, threshold=g.threshold, neighbours=near[:-1])
    with pytest.raises(ValueError, match=r"no neighbourhood announced to client 4"):
        c.mask(np.zeros(N), **args, threshold=g.threshold)
    with pytest.raises(ValueError, match=r"threshold 7 announced .* t = 8"):
        c.mask(np.zeros(N), **args, threshold=7, neighbours=near)
    with pytest.raises(ValueError, match="a sparse-graph round asks every client"):
        c.mask(np.zeros(N), **{**args, "participants": list(range(K - 1))},
               threshold=g.threshold, neighbours=near)  # fmt: skip
    # The twin: the derived neighbourhood and threshold are accepted (refusals masked nothing).
    up = c.mask(np.zeros(N), **args, threshold=g.threshold, neighbours=list(reversed(near)))
    assert sorted(up.shares) == near
    # A client on the complete graph refuses a neighbourhood announcement.
    plain = _clients(run_id=None)
    with pytest.raises(ValueError, match="uses the complete graph"):
        plain[4].mask(np.zeros(N), **args, neighbours=near)


# --- (c) survivors not connected, or a neighbourhood below t ---------------------------------
def _arc_cut(g: Sparse, width: int) -> list[int]:
    """Clients at two separated windows of ``width`` ring positions (claimed dropped)."""
    ring = g.graph.ring
    pos = [*range(0, width), *range(K // 2, K // 2 + width)]
    return sorted(int(g.graph.ids[ring[p]]) for p in pos)


def test_survivors_not_connected_in_the_graph_abort_the_round():
    clients = _clients()
    g = clients[0].graph
    gone = _arc_cut(g, g.degree // 2)  # k/2 on each side of two arcs: the arcs are cut off
    live = [i for i in range(K) if i not in gone]
    ups = _mask(clients, _vectors(live, seed=5), 0)
    server = SecAggServer(codec=CODEC, graph=g)
    with pytest.raises(SecAggAbort, match="survivors are not connected in the communication"):
        server.unmask_plan(round_id=0, participants=list(range(K)), masked=ups)
    for i in live:  # and no survivor signs it, whatever the server does
        with pytest.raises(ValueError, match="not connected in the communication graph"):
            clients[i].sign_survivors(round_id=0, survivors=live, dropped=gone)
    # The connectivity rule on its own (a threshold low enough not to decide first), with
    # its twin: the same number of clients claimed dropped in one block leaves one arc.
    low = Sparse(graph=g.graph, params=g.params, threshold=2)
    assert "not connected" in low.problem(live)
    ring = [int(g.graph.ids[p]) for p in g.graph.ring]
    one_block = ring[len(gone) :]
    assert low.problem(one_block) is None


def test_a_neighbourhood_with_fewer_than_t_survivors_aborts():
    clients = _clients()
    g = clients[0].graph
    u = 9
    for drop, recovers in ((4, True), (5, False)):  # k − t = 4 of u's 12 may go
        gone = list(g.neighbours(u)[:drop])
        live = [i for i in range(K) if i not in gone]
        xs = _vectors(live, seed=6)
        c = _clients()  # fresh clients: one signed list per round
        if recovers:
            total = _round(c, xs)[0]
            np.testing.assert_array_equal(total, sum_plain(xs.values(), CODEC))
            continue
        ups = _mask(c, xs, 0)
        with pytest.raises(SecAggAbort, match=rf"survivor {u} keeps 7 surviving neighbours"):
            SecAggServer(codec=CODEC, graph=g).unmask_plan(
                round_id=0, participants=list(range(K)), masked=ups
            )
        with pytest.raises(ValueError, match=rf"7 of client {u}'s neighbours survive"):
            c[u].sign_survivors(round_id=0, survivors=live, dropped=gone)
