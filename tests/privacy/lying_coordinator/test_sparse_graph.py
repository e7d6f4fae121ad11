"""A lying coordinator against SecAgg+'s sparse graph: every lie refused, with its twin.

The graph (``fedpriv/federation/secagg_topology.py``) is each node's own derivation
from the run id and the pinned key book; the coordinator announces it, and a node
refuses any other neighbourhood or threshold before it reads a row. Per
neighbourhood, a node answers an unmask only for a survivor list that t of its own
neighbours signed, that is connected in the graph and that leaves it t surviving
neighbours: a server that shows different lists to a victim's neighbours (to collect
its seed's shares from some and its pair masks from others) gets nothing; the twin
without those checks unmasks the victim's input exactly.

Over Flower (the ServerApp and the real ClientApp handlers on the loopback grid,
``tests/server/loopback.py``): K = 10 synthetic clients, degree k = 6, t = 4.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedpriv.artefact import load_model
from fedpriv.federation import secagg_consistency, shamir
from fedpriv.federation.secagg import SecAggServer, sum_plain
from fedpriv.federation.secagg_common import self_mask
from fedpriv.federation.secagg_topology import Sparse
from tests.federation.test_secagg_plus import CODEC, N, _clients, _mask, _vectors
from tests.privacy.lying_coordinator.test_plan_and_queries import Coordinator
from tests.server.test_flower_loopback import run_app

JOB = {
    "dataset": "synthetic", "num-clients": 10, "method": "boosting", "rounds": 3,
    "intercept": False, "depth": 2, "epsilon": 2.0, "seed": 5, "round-timeout": 1.0,
    "max-aborted-share": 1.0,
}  # fmt: skip


# --- equivocation within a victim's neighbourhood (in process) ------------------------------
def _views(g: Sparse, victim: int):
    """The lying server's lists (Bonawitz's attack on one input, per neighbourhood): the
    victim is told ``ys`` dropped (it reveals its pair masks with them and its own share);
    ``ys`` are told the victim survived (they reveal t − 1 shares of its seed); ``xs``
    are told the victim dropped (they reveal their pair masks with it)."""
    near = g.neighbours(victim)
    ys, xs = near[: g.threshold - 1], near[g.threshold - 1 :]
    everyone = set(range(g.graph.size))

    def view(gone):
        return sorted(everyone - set(gone)), sorted(gone)

    out = {victim: view(ys)}
    out.update({y: view(xs) for y in ys})
    out.update({x: view([victim]) for x in xs})
    out.update({w: view(xs) for w in everyone - set(out)})
    return out, ys, xs


def _equivocate(clients, ups, views):
    server = SecAggServer(codec=CODEC, graph=clients[0].graph)
    sigs = {}
    for i, (live, gone) in views.items():
        try:  # a client signs the list it is shown, unless its own rules refuse it
            sigs[i] = clients[i].sign_survivors(round_id=0, survivors=live, dropped=gone)
        except ValueError:
            continue
    answers, refusals = {}, {}
    for i, (live, gone) in views.items():
        try:
            answers[i] = clients[i].unmask(
                round_id=0, survivors=live, dropped=gone, n=N,
                inbox=server.inboxes(live, {j: u.shares for j, u in ups.items()})[i],
                signatures=sigs,
            )  # fmt: skip
        except ValueError as err:
            refusals[i] = str(err)
    return answers, refusals


def _unmask_victim(g, victim, y, answers, ys, xs):
    holders = [victim, *ys]
    rows = np.stack([shamir.from_bytes(answers[h].shares[victim]) for h in holders])
    points = [g.point(victim, h) for h in holders]
    out = y - self_mask(shamir.reconstruct(points, rows, threshold=g.threshold), 0, y.size)
    assert answers[victim].lost == tuple(sorted(ys))
    out -= answers[victim].mask  # the victim's own answer: its (signed) pair masks with ys
    for x in xs:  # xs' answers: their pair masks with the victim, signed from their side
        assert answers[x].lost == (victim,)
        out += answers[x].mask
    return out


@pytest.mark.parametrize("twin", [False, True], ids=["nodes-check", "twin-no-checks"])
def test_a_server_equivocating_in_a_neighbourhood_unmasks_nothing(monkeypatch, twin):
    if twin:  # the old trust: no signature check, no neighbourhood rules on the list
        monkeypatch.setattr(secagg_consistency, "check_signatures", lambda **kw: [])
        monkeypatch.setattr(Sparse, "own_problem", lambda self, u, live: None)
    clients = _clients()
    g = clients[0].graph
    victim = 0
    xs_in = _vectors(range(len(clients)), seed=11)
    ups = _mask(clients, xs_in, 0)
    views, ys, xs = _views(g, victim)
    answers, refusals = _equivocate(clients, ups, views)
    if twin:
        assert not refusals
        got = _unmask_victim(g, victim, ups[victim].vector, answers, ys, xs)
        np.testing.assert_array_equal(CODEC.decode(got), sum_plain([xs_in[victim]], CODEC))
        return
    assert victim in refusals  # its own answer (its share, its masks with ys) never leaves
    shares = [a.shares[victim] for a in answers.values() if victim in a.shares]
    assert len(shares) < g.threshold  # fewer than t shares of its seed: it stays hidden
    assert "neighbours survive" in refusals[victim]


# --- over Flower ------------------------------------------------------------------------------
class Recorder:
    """``forge`` that forwards every message unchanged and keeps the round queries."""

    def __init__(self) -> None:
        self.queries: dict[int, dict] = {}

    def __call__(self, pid, kind, msg):
        if kind == "query.fedpriv":
            self.queries[pid] = dict(msg.content["config"])
        return msg


def _comm(out) -> dict:
    return json.loads((out / "communication.json").read_text())


def test_a_flower_run_on_the_sparse_graph_is_neighbourhood_sized_and_exact(monkeypatch, tmp_path):
    seen = Recorder()
    out = run_app(monkeypatch, tmp_path / "sparse", JOB, forge=seen)
    assert _comm(out)["rounds_released"] == 3 and _comm(out)["client_errors"] == 0
    for pid, cfg in seen.queries.items():
        near = [int(v) for v in cfg["neighbours"]]
        assert len(near) == 6 and pid not in near  # k = 6 of K − 1 = 9
        assert sorted(int(v) for v in cfg["participants"]) == sorted([*near, pid])
        assert len(cfg["public-keys"]) == 7 and int(cfg["secagg-threshold"]) == 4
    # The complete graph (secagg-collusion 0: no colluder to size a graph for) releases
    # the very same model: secure aggregation reveals the sum, whichever graph.
    plain = Recorder()
    full = run_app(monkeypatch, tmp_path / "full", {**JOB, "secagg-collusion": 0.0}, forge=plain)
    assert all("neighbours" not in cfg for cfg in plain.queries.values())
    assert all(len(cfg["public-keys"]) == 10 for cfg in plain.queries.values())
    a = load_model(out / "model.fedpriv.npz").model.to_arrays()
    b = load_model(full / "model.fedpriv.npz").model.to_arrays()
    for key, value in a.items():
        np.testing.assert_array_equal(b[key], value, err_msg=key)


def _swap_neighbour(config):
    """Announce a neighbourhood with one neighbour replaced by a non-neighbour."""
    near = [int(v) for v in config["neighbours"]]
    named = {int(v) for v in config["participants"]}
    outsider = next(v for v in range(10) if v not in named)
    return {**config, "neighbours": [*near[:-1], outsider]}


@pytest.mark.parametrize(
    ("lie", "rewrite"),
    [
        ("neighbourhood", _swap_neighbour),
        ("threshold", lambda c: {**c, "secagg-threshold": int(c["secagg-threshold"]) - 1}),
        ("no-graph", lambda c: {k: v for k, v in c.items() if k != "neighbours"}),
    ],
)
def test_nodes_refuse_a_forged_neighbourhood_or_threshold_over_flower(
    monkeypatch, tmp_path, lie, rewrite
):
    liar = Coordinator("fedpriv", rewrite)
    out = run_app(monkeypatch, tmp_path, JOB, forge=liar)
    comm = _comm(out)
    assert liar.forged == 3 * 10  # every query of every round was forged
    assert comm["rounds_released"] == 0 and comm["client_errors"] == 3 * 10  # all refused


def test_a_node_refuses_a_run_below_its_own_collusion_or_sigma_floor(monkeypatch, tmp_path):
    floors = {0: {"secagg-min-collusion": 0.2}, 3: {"secagg-min-sigma": 64}}
    with pytest.raises(RuntimeError, match=r"key exchange: 8 of 10 nodes answered"):
        run_app(monkeypatch, tmp_path / "weak", JOB, node_config=floors)
    # The twin: a run meeting both floors is admitted by the same nodes.
    strong = {**JOB, "secagg-collusion": 0.2, "secagg-sigma": 64.0}
    out = run_app(monkeypatch, tmp_path / "strong", strong, node_config=floors)
    assert _comm(out)["rounds_released"] == 3


def _hint(h):
    """A coordinator telling every node that ``h`` rounds are left."""
    return Coordinator("fedpriv", lambda c: {**c, "secagg-rounds-left": h})


def test_a_forged_rounds_left_hint_costs_bytes_never_results_over_flower(monkeypatch, tmp_path):
    # The server's hint (the rounds its strategy still plans) only caps a node's next batch
    # of seeds: told 1, each node seals a batch every round; told 10^9, the run's 16. Each
    # run releases the honest run's very model; only the uploaded bytes differ.
    seen = Recorder()
    runs = {"honest": run_app(monkeypatch, tmp_path / "honest", JOB, forge=seen)}
    assert sorted(int(c["secagg-rounds-left"]) for c in seen.queries.values()) == [1] * 10
    for h in (1, 10**9):
        runs[h] = run_app(monkeypatch, tmp_path / f"told-{h}", JOB, forge=_hint(h))
    sent, model = {}, {}
    for name, out in runs.items():
        comm = _comm(out)
        assert comm["rounds_released"] == 3 and comm["client_errors"] == 0, name
        sent[name] = sum(comm["bytes_uploaded_per_client"])
        model[name] = load_model(out / "model.fedpriv.npz").model.to_arrays()
    assert sent["honest"] < sent[1] < sent[10**9]
    for name in (1, 10**9):
        for key, value in model["honest"].items():
            np.testing.assert_array_equal(model[name][key], value, err_msg=f"{name}: {key}")
