"""SecAgg+ test parties: K = 20 set-up clients with pinned keys, their vectors, masked
uploads and one honest sparse round, shared by the SecAgg+ tests."""

from __future__ import annotations

import numpy as np

from fedpriv.federation.secagg import FixedPointCodec, SecAggClient, SecAggServer

K, RUN = 20, "run-secagg-plus"
CODEC = FixedPointCodec(scale=2.0**20, max_abs=3.0, max_summands=128)
N = 16  # reply length


def _clients(k=K, seed=0, run_id=RUN, config=None):
    """K set-up clients (pinned key book, fixed test keys) that derived the run's graph."""
    rng = np.random.default_rng(seed)
    clients = {
        i: SecAggClient(
            client_id=i,
            private_key_bytes=rng.bytes(32),
            signing_key_bytes=rng.bytes(32),
            config=config,
        )
        for i in range(k)
    }
    keys = {i: c.public_key for i, c in clients.items()}
    verify = {i: c.verify_key for i, c in clients.items()}
    for c in clients.values():
        c.setup(keys, verify_keys=verify, run_id=run_id)
    return clients


def _book(clients):
    return (
        {i: c.public_key for i, c in clients.items()},
        {i: c.verify_key for i, c in clients.items()},
    )


def _vectors(ids, seed):
    rng = np.random.default_rng(seed)
    return {i: rng.uniform(-CODEC.max_abs, CODEC.max_abs, size=N) for i in ids}


def _mask(clients, xs, r):
    g = clients[0].graph
    return {
        i: clients[i].mask(
            xs[i],
            round_id=r,
            participants=sorted(clients),
            codec=CODEC,
            threshold=g.threshold,
            neighbours=g.neighbours(i),
        )
        for i in xs
    }


def _answers(server, clients, uploads, live, gone, r=0):
    """Every survivor's unmask answer, each given every survivor's signature."""
    inboxes = server.inboxes(live, {i: u.shares for i, u in uploads.items()})
    sigs = {i: clients[i].sign_survivors(round_id=r, survivors=live, dropped=gone) for i in live}
    return {i: clients[i].unmask(round_id=r, survivors=live, dropped=gone, n=N, inbox=inboxes[i],
                                 signatures=sigs) for i in live}  # fmt: skip


def _round(clients, xs, r=0, *, silent=()):
    """One honest sparse round: those in ``xs`` upload, those in ``silent`` say nothing at
    the unmask. Returns (sum, uploads, answers, what each survivor received)."""
    ups = _mask(clients, xs, r)
    server = SecAggServer(codec=CODEC, graph=clients[0].graph)
    total, answers, received = _finish_round(clients, server, ups, r, silent=silent)
    return total, ups, answers, received


def _finish_round(clients, server, ups, r=0, *, silent=(), aggregate=True):
    """An honest round after its uploads ``ups``: the plan, the survivors' signatures
    checked and forwarded, the unmask answers (none from ``silent``) and the sum.
    Returns (sum, answers, what each survivor received); ``aggregate=False``: the round
    left open, its sum ``None``."""
    everyone = sorted(clients)
    live, gone = server.unmask_plan(round_id=r, participants=everyone, masked=ups)
    inboxes = server.inboxes(live, {i: u.shares for i, u in ups.items()})
    sigs = {i: clients[i].sign_survivors(round_id=r, survivors=live, dropped=gone) for i in live}
    ok = server.check_signatures(round_id=r, participants=everyone, survivors=live, dropped=gone,
                                 signatures=sigs, key_book=_book(clients))  # fmt: skip
    received = {
        i: {"inbox": inboxes[i], "signatures": {j: ok[j] for j in server.forward(i, ok)},
            "survivors": live, "dropped": gone}
        for i in live
    }  # fmt: skip
    answers = {
        i: clients[i].unmask(round_id=r, survivors=live, dropped=gone, n=N,
                             inbox=received[i]["inbox"], signatures=received[i]["signatures"])
        for i in live
        if i not in silent
    }  # fmt: skip
    if not aggregate:
        return None, answers, received
    masked = {i: u.vector for i, u in ups.items()}
    total = server.aggregate(round_id=r, participants=everyone, masked=masked, answers=answers)
    return total, answers, received
