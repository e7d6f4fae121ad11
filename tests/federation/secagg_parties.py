"""Secure-aggregation test parties (complete graph): clients with fixed test keys, their
vectors, signatures and one honest round, shared by the secure-aggregation tests."""

import numpy as np

from fedpriv.federation.secagg import (
    FixedPointCodec,
    SecAggClient,
    SecAggServer,
)

ALPHA = 1e-3  # false-alarm rate of the chi-square uniformity tests (fixed keys: deterministic)
# Self-mask seeds come from the OS CSPRNG, so tests on them vary run to run: a smaller
# false-alarm rate keeps them from flaking, with power to spare (the twins give p ≈ 0).
ALPHA_FRESH = 1e-6
EPS = np.finfo(np.float64).eps
CODEC = FixedPointCodec(scale=2.0**20, max_abs=3.0, max_summands=8)


def _clients(k, seed=0, *, ids=None, cls=None):
    """K set-up clients (pinned key book) with fixed (test-only) keys."""
    rng = np.random.default_rng(seed)
    ids = list(range(1, k + 1)) if ids is None else ids
    cls = cls or {}
    clients = {
        i: cls.get(i, SecAggClient)(client_id=i, private_key_bytes=rng.bytes(32)) for i in ids
    }
    keys = {i: c.public_key for i, c in clients.items()}
    verify = {i: c.verify_key for i, c in clients.items()}
    for c in clients.values():
        c.setup(keys, verify_keys=verify)
    return clients


def _sigs(clients, r, live, gone, signers=None):
    """The consistency round, honest: each survivor (or each of ``signers``) signs (S, D)."""
    return {
        j: clients[j].sign_survivors(round_id=r, survivors=live, dropped=gone)
        for j in (live if signers is None else signers)
    }


def _vectors(ids, n, seed, max_abs=CODEC.max_abs):
    rng = np.random.default_rng(seed)
    return {i: rng.uniform(-max_abs, max_abs, size=n) for i in ids}


def _round(clients, xs, r, *, participants=None, late=(), codec=CODEC, server=None,
           aggregate=True, **hint):  # fmt: skip
    """One honest round. Every client in ``xs`` masks (``hint``: further keywords of its
    ``mask``); those in ``late`` reply after the deadline (the server holds their reply but
    treats them as dropped), participants not in ``xs`` never reply. Returns (sum, every
    masked upload, unmask answers); the sum ``None`` and the round left open if not
    ``aggregate``."""
    participants = sorted(clients) if participants is None else participants
    server = server or SecAggServer(codec=codec)
    ups = {
        i: clients[i].mask(xs[i], round_id=r, participants=participants, codec=codec, **hint)
        for i in xs
    }
    on_time = {i: u for i, u in ups.items() if i not in late}
    live, gone = server.unmask_plan(round_id=r, participants=participants, masked=on_time)
    inboxes = server.inboxes(live, {i: u.shares for i, u in on_time.items()})
    n = len(next(iter(xs.values())))
    sigs = _sigs(clients, r, live, gone)
    answers = {
        i: clients[i].unmask(
            round_id=r, survivors=live, dropped=gone, n=n, inbox=inboxes[i], signatures=sigs
        )
        for i in live
    }
    if not aggregate:
        return None, ups, answers
    masked = {i: u.vector for i, u in on_time.items()}
    total = server.aggregate(round_id=r, participants=participants, masked=masked, answers=answers)
    return total, ups, answers


def _tolerance(k, codec=CODEC):
    # K rounding errors of 0.5/scale each, plus float error in x·scale, the sum and decoding.
    return k * 0.5 / codec.scale + 8 * k * codec.max_abs * EPS
