"""The round engine: abort rules, recovery and communication counts, whichever transport.

A scripted transport (real ``SecAggClient`` objects, uploads lost or unmask
answers withheld on cue) drives :class:`~fedpriv.federation.engine.RoundEngine`;
the in-process runtime's transport must give the same counts and sums under
the same plan.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.federation.engine import Replies, RoundEngine, RoundPlan, round_plan
from fedpriv.federation.protocol import ClientData, Query
from fedpriv.federation.runtime import InProcessRuntime, participation_streams
from fedpriv.federation.secagg import SecAggClient
from tests.keys import key_for

N = 3  # reply length
MAX_RECORDS = 10


def vector(client: int, round_id: int) -> np.ndarray:
    # Dyadic values: their float sums are exact, so sums compare bit for bit.
    return (client + 1) * 0.5 + round_id * 0.25 + np.arange(N) * 0.125


class ListStrategy:
    """``rounds`` fixed queries; keeps every aggregate it is handed."""

    def __init__(self, rounds: int) -> None:
        self.rounds, self.got = rounds, []

    def begin(self, *, n_features, ledger, rng, secret_rng) -> None:
        pass

    def next_query(self) -> Query | None:
        r = len(self.got)
        if r == self.rounds:
            return None
        return Query(round=r, method="test", sampling_rate=1.0, reply_length=N, record_bound=1.0)

    def update(self, query: Query, aggregate) -> None:
        self.got.append(aggregate)


class ScriptedTransport:
    """Masks :func:`vector` per client; loses uploads (``plan.lost`` and ``lose[r]``) and
    withholds unmask answers (``silent[r]``) on cue; records what it was asked."""

    def __init__(self, k: int, *, lose=None, silent=None) -> None:
        self.parties = [SecAggClient(client_id=i) for i in range(k)]
        self.lose, self.silent = lose or {}, silent or {}
        self.asked: list[int] = []
        self.unmasked: list[int] = []

    def setup_keys(self) -> None:
        book = {p.client_id: p.public_key for p in self.parties}
        verify = {p.client_id: p.verify_key for p in self.parties}
        for p in self.parties:
            p.setup(book, verify_keys=verify)
        self.key_book = (book, verify)

    def ask(self, plan: RoundPlan) -> Replies:
        r = plan.query.round
        self.asked.append(r)
        gone = plan.lost | self.lose.get(r, set())
        masked = {
            u: self.parties[u].mask(
                vector(u, r), round_id=r, participants=plan.asked, codec=plan.codec
            )
            for u in plan.asked
            if u not in gone
        }
        return Replies(senders=tuple(masked), masked=masked)

    def consistency(self, plan, survivors, dropped):
        r = plan.query.round
        return {
            u: self.parties[u].sign_survivors(round_id=r, survivors=survivors, dropped=dropped)
            for u in survivors
        }

    def unmask(self, req):
        r = req.plan.query.round
        self.unmasked.append(r)
        return {
            u: self.parties[u].unmask(
                round_id=r,
                survivors=req.survivors,
                dropped=req.dropped,
                n=N,
                inbox=req.inboxes[u],
                signatures=req.signatures,
            )
            for u in req.survivors
            if u not in self.silent.get(r, set())
        }


def _engine(transport, k: int, **kw) -> RoundEngine:
    return RoundEngine(transport, n_clients=k, max_records=MAX_RECORDS, **kw)


def _run(engine: RoundEngine, rounds: int, key=None) -> list:
    strategy = ListStrategy(rounds)
    engine.begin(strategy, n_features=1, ledger=None, seed=0, secret_key=key or key_for(0))
    if engine.secure:
        engine.setup_keys()
    engine.run(strategy)
    return strategy.got


def test_dropouts_are_recovered_unrecoverable_rounds_abort_and_everything_is_counted():
    # K = 5, t = 3. Round 1 loses client 1 (recovered); round 2 loses three (2 < t
    # survivors: abort before any unmask); round 3 hears every upload but client 4 is
    # silent at the unmask (4 ≥ t answers, no pair mask needed: recovered); round 4
    # loses client 0 and client 3 is silent (a dropped client's pair masks would stay
    # in the sum: abort).
    lose = {1: {1}, 2: {0, 1, 2}, 4: {0}}
    fake = ScriptedTransport(5, lose=lose, silent={3: {4}, 4: {3}})
    engine = _engine(fake, 5)
    got = _run(engine, 5)
    everyone = sum(vector(u, 0) for u in range(5))
    np.testing.assert_array_equal(got[0], everyone)
    np.testing.assert_array_equal(got[1], sum(vector(u, 1) for u in (0, 2, 3, 4)))
    assert got[2] is None and got[4] is None
    np.testing.assert_array_equal(got[3], sum(vector(u, 3) for u in range(5)))
    assert fake.asked == [0, 1, 2, 3, 4] and fake.unmasked == [0, 1, 3, 4]
    comm = engine.communication.to_dict()
    assert comm["rounds"] == 5 and comm["rounds_aborted"] == 2
    assert comm["dropout_recoveries"] == 2  # rounds 1 and 4 revealed pair masks
    # Key exchange, five asks, four consistency rounds and four unmasks.
    assert comm["round_trips"] == 2 + 5 + 4 + 4
    assert comm["floats_uploaded_per_client"] == [9, 9, 12, 15, 15]
    # Upload: 8·N + 4 sealed shares of 66 B (10 B header, 40 B share, 16 B tag) = 288; a 64
    # B signature on the survivor list; unmask answer: 40 B per survivor, one 8·N sum of
    # the pair masks with the dropped and 8 B per dropped id. Once: the public and the
    # verify key.
    assert comm["bytes_uploaded_per_client"][0] == 64 + 3 * 288 + 3 * 64 + 208 + 184 + 200
    assert comm["bytes_uploaded_per_client"][4] == 64 + 5 * 288 + 4 * 64 + 208 + 184 + 192


def test_fewer_than_two_asked_aborts_before_anything_is_sent():
    key, k, rounds = key_for(3), 3, 24
    fake = ScriptedTransport(k)
    got = _run(_engine(fake, k, participation=0.4), rounds, key)
    fates = participation_streams(key)
    few = [r for r in range(rounds) if len(round_plan(fates, r, k, 0.4)[0]) < 2]
    assert 0 < len(few) < rounds  # the test has both kinds of rounds
    assert fake.asked == [r for r in range(rounds) if r not in few]  # nothing sent
    assert [r for r, a in enumerate(got) if a is None] == few


def test_a_transport_returning_uploads_never_asked_for_is_refused():
    class Stray(ScriptedTransport):
        def ask(self, plan):
            replies = super().ask(plan)
            return Replies(senders=(*replies.senders, 9), masked=replies.masked)

    with pytest.raises(ValueError, match=r"never asked: \[9\]"):
        _run(_engine(Stray(3), 3), 1)


class VectorHandler:
    """The in-process client half that answers :func:`vector` (no ``answer_many``)."""

    def answer(self, query, data, sample, state, key=None):
        return vector(data.client_id, query.round)


class PlainScript(ScriptedTransport):
    """Plain sums: the senders' vectors, unmasked (in-process benchmarks only)."""

    def ask(self, plan: RoundPlan) -> Replies:
        self.asked.append(r := plan.query.round)
        senders = tuple(u for u in plan.asked if u not in plan.lost)
        return Replies(senders=senders, plain=[vector(u, r) for u in senders])


@pytest.mark.parametrize("secure", [True, False])
def test_in_process_and_scripted_transports_count_and_sum_alike(secure):
    # One key: the same participation coins and simulated losses in both runs.
    k, rounds, kw = 5, 16, {"participation": 0.8, "dropout_rate": 0.3}
    rows = np.zeros((MAX_RECORDS, 1))
    clients = [ClientData(client_id=i, X=rows, y=np.zeros(MAX_RECORDS)) for i in range(k)]
    runtime = InProcessRuntime(
        clients=clients,
        handler=VectorHandler(),
        seed=0,
        secret_key=key_for(5),
        secure_aggregation=secure,
        **kw,
    )
    want = runtime.run(ListStrategy(rounds), ledger=None).got
    engine = _engine(
        ScriptedTransport(k) if secure else PlainScript(k), k, secure_aggregation=secure, **kw
    )
    got = _run(engine, rounds, key_for(5))
    assert runtime.communication.to_dict() == engine.communication.to_dict()
    for a, b in zip(want, got, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)
    comm = engine.communication
    if secure:  # both the recovery and the abort were exercised
        assert comm.recoveries > 0 and comm.rounds_aborted > 0
    else:  # plain sums never abort, never unmask
        assert comm.rounds_aborted == 0 and comm.round_trips == rounds
