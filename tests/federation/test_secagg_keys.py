"""Secure aggregation's pinned keys, threshold and the Flower ClientApp's handlers.

Protocol and threat model: ``fedpriv/federation/secagg.py`` (Bonawitz et al., CCS 2017,
§4).
"""

import time

import numpy as np
import pytest
from fedpriv.server.grid_transport import unmask_answer_of

from fedpriv.errors import ClientFailure
from fedpriv.federation import secagg
from tests.federation.secagg_parties import (
    CODEC,
    _clients,
    _round,
    _sigs,
    _vectors,
)


# --- pinned keys ---------------------------------------------------------------
def test_key_substitution_is_refused_by_the_client():
    clients = _clients(4)
    pinned = {i: c.public_key for i, c in clients.items()}
    evil = secagg.SecAggClient(client_id=3).public_key
    c = clients[1]
    assert c.pinned_keys == pinned
    with pytest.raises(
        secagg.SecAggKeyError, match=r"public keys of clients \[3\] differ from those"
    ):
        c.mask(
            np.zeros(4),
            round_id=0,
            participants=[1, 2, 3],
            codec=CODEC,
            public_keys={**pinned, 3: evil},
        )
    with pytest.raises(secagg.SecAggKeyError, match=r"participants \[7\] have no key pinned"):
        c.mask(np.zeros(4), round_id=0, participants=[1, 2, 7], codec=CODEC)
    with pytest.raises(RuntimeError, match="pinned once per run"):
        c.setup({**pinned, 3: evil}, verify_keys={})  # no re-keying after the key exchange
    assert issubclass(secagg.SecAggKeyError, ValueError)
    # Nothing was masked by the refused calls; the pinned keys are accepted.
    xs = _vectors([1, 2, 3], 4, seed=0)
    ups = {
        i: clients[i].mask(
            xs[i], round_id=0, participants=[1, 2, 3], codec=CODEC, public_keys=pinned
        )
        for i in xs
    }
    inbox = secagg.SecAggServer(codec=CODEC).inboxes(
        [1, 2, 3], {i: u.shares for i, u in ups.items()}
    )
    sigs = _sigs(clients, 0, [1, 2, 3], [])
    with pytest.raises(secagg.SecAggKeyError, match=r"clients \[2\] differ"):
        c.unmask(
            round_id=0, survivors=[1, 2, 3], dropped=[], n=4, inbox=inbox[1], public_keys={2: evil},
            signatures=sigs,
        )  # fmt: skip
    c.unmask(
        round_id=0, survivors=[1, 2, 3], dropped=[], n=4, inbox=inbox[1], public_keys=pinned,
        signatures=sigs,
    )  # fmt: skip


def test_a_restored_client_keeps_its_pins_pair_keys_and_round_bookkeeping():
    clients = _clients(3)
    xs = _vectors(clients, 6, seed=9)
    sk, book = clients[1].export_state()
    twin = secagg.SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    assert twin.pinned_keys == clients[1].pinned_keys
    with pytest.raises(secagg.SecAggKeyError, match="differ"):  # the old restore re-derived here
        twin.mask(
            xs[1],
            round_id=4,
            participants=[1, 2, 3],
            codec=CODEC,
            public_keys={3: secagg.SecAggClient(client_id=3).public_key},
        )
    total = _round({**clients, 1: twin}, xs, 4)[0]  # same pair keys: the masks cancel
    np.testing.assert_array_equal(total, secagg.sum_plain(xs.values(), CODEC))
    sk, book = twin.export_state()
    again = secagg.SecAggClient.restore(client_id=1, private_key_bytes=sk, book=book)
    with pytest.raises(ValueError, match="already masked for round 4"):
        again.mask(xs[1], round_id=4, participants=[1, 2, 3], codec=CODEC)
    fresh = secagg.SecAggClient.restore(client_id=1, private_key_bytes=sk, book="")
    with pytest.raises(secagg.SecAggKeyError, match="no pinned key book"):
        fresh.mask(xs[1], round_id=5, participants=[1, 2, 3], codec=CODEC)


def test_client_setup_and_mask_preconditions():
    c = secagg.SecAggClient(client_id=1, private_key_bytes=bytes(range(32)))
    with pytest.raises(secagg.SecAggKeyError, match="setup"):
        c.mask([0.0], round_id=0, participants=[1, 2], codec=CODEC)
    other = secagg.SecAggClient(client_id=2)
    with pytest.raises(ValueError, match="not this client's"):
        c.setup({1: other.public_key, 2: other.public_key}, verify_keys={})
    with pytest.raises(ValueError, match="verify key listed for client 1 is not this client's"):
        c.setup({1: c.public_key, 2: other.public_key}, verify_keys={1: other.verify_key})
    with pytest.raises(ValueError, match=r"verify keys must name the key book's clients \[1, 2\]"):
        c.setup({1: c.public_key, 2: other.public_key}, verify_keys={1: c.verify_key})
    c.setup(
        {1: c.public_key, 2: other.public_key}, verify_keys={1: c.verify_key, 2: other.verify_key}
    )
    with pytest.raises(ValueError, match="must include client 1"):
        c.mask([0.0], round_id=0, participants=[2], codec=CODEC)
    with pytest.raises(ValueError, match="number in"):
        c.mask([0.0], round_id=0, participants=[1], codec=CODEC)  # alone = plaintext
    with pytest.raises(ValueError, match="distinct"):
        c.mask([0.0], round_id=0, participants=[1, 2, 2], codec=CODEC)
    with pytest.raises(ValueError, match=r"threshold 1 announced for 2 participants.*t = 2"):
        c.mask([0.0], round_id=0, participants=[1, 2], codec=CODEC, threshold=1)


def test_an_empty_vector_encodes_to_the_empty_sum():
    codec = secagg.FixedPointCodec(max_abs=1.0, max_summands=4, scale=2.0**20)
    enc = codec.encode(np.zeros(0))
    assert enc.dtype == np.uint64 and enc.shape == (0,)
    assert codec.decode(enc).shape == (0,)
    total = _round(_clients(3), {i: np.zeros(0) for i in (1, 2, 3)}, 0, codec=codec)[0]
    assert total.shape == (0,)


# --- threshold -----------------------------------------------------------------
def test_threshold_default_is_a_strict_majority_of_at_least_two():
    t = secagg.SecAggConfig().threshold
    assert [t(n) for n in (2, 3, 4, 5, 6, 10, 101)] == [2, 2, 3, 3, 4, 6, 51]
    assert [secagg.SecAggConfig(threshold_fraction=0.0).threshold(n) for n in (2, 9)] == [2, 2]
    assert [secagg.SecAggConfig(threshold_fraction=0.99).threshold(n) for n in (2, 9)] == [2, 9]
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"threshold_fraction must lie in \[0, 1\)"):
            secagg.SecAggConfig(threshold_fraction=bad)
    with pytest.raises(ValueError, match=r"n \(participants\) must be an integer in \[2, inf\)"):
        secagg.SecAggConfig().threshold(1)


def test_a_stricter_threshold_aborts_where_the_default_recovers():
    xs = _vectors([1, 2, 3, 4], 8, seed=3)  # 5 of 5 asked, 4 reply
    strict = secagg.SecAggConfig(threshold_fraction=0.8)  # t = 5
    clients = _clients(5)
    assert _round(clients, xs, 0)[0].shape == (8,)
    for c in clients.values():
        c.config = strict
    with pytest.raises(secagg.SecAggAbort, match="below threshold t = 5"):
        _round(clients, xs, 1, server=secagg.SecAggServer(codec=CODEC, config=strict))


# --- the Flower ClientApp handlers ----------------------------------------------
def test_flower_handlers_pin_the_key_book_and_refuse_substitution_and_second_unmasks():
    from fedpriv.clients import app as client_app
    from flwr.app import ConfigRecord, Context, Message, Metadata, RecordDict

    def message(kind, cfg):
        meta = Metadata(
            run_id=1,
            message_id=f"{kind}-{time.monotonic_ns()}",
            src_node_id=0,
            dst_node_id=1,
            reply_to_message_id="",
            group_id="",
            created_at=time.time(),
            ttl=600.0,
            message_type=f"query.{kind}",
        )
        return Message(RecordDict({"config": ConfigRecord(cfg)}), metadata=meta)

    rng = np.random.default_rng(0)
    contexts, book, vbook = {}, {}, {}
    for pid in range(3):  # what the `keys` handler leaves in each node's state
        ctx = Context(
            run_id=1,
            node_id=10 + pid,
            node_config={"partition-id": pid, "num-partitions": 3},
            state=RecordDict(),
            run_config={"num-clients": 3},
        )
        client = secagg.SecAggClient(client_id=pid, private_key_bytes=rng.bytes(32))
        client_app._save_secagg(ctx, client)
        contexts[pid], book[pid], vbook[pid] = ctx, client.public_key, client.verify_key
    cfg = {"participants": [0, 1, 2], "public-keys": [book[p] for p in range(3)]}
    keybook = {**cfg, "verify-keys": [vbook[p] for p in range(3)]}
    for ctx in contexts.values():
        client_app.keybook(message("keybook", keybook), ctx)
    # The handlers are sanitised (only a code reaches the server): check the
    # node-local reasons on the unwrapped handlers, and the code on one wrapped call.
    with pytest.raises(RuntimeError, match="pinned once per run"):
        client_app.keybook.__wrapped__(message("keybook", keybook), contexts[0])
    with pytest.raises(ClientFailure, match="client_error"):
        client_app.keybook(message("keybook", keybook), contexts[0])
    evil = {**cfg, "public-keys": [book[0], secagg.SecAggClient(client_id=1).public_key, book[2]]}
    with pytest.raises(secagg.SecAggKeyError, match=r"clients \[1\] differ"):  # before any work
        client_app.answer.__wrapped__(message("fedpriv", evil), contexts[0])
    with pytest.raises(secagg.SecAggKeyError, match=r"participants \[3\] have no key pinned"):
        unknown = {"participants": [0, 1, 3], "public-keys": [book[0], book[1], book[2]]}
        client_app.answer.__wrapped__(message("fedpriv", unknown), contexts[0])
    # Step 1 as the `answer` handler does it, from and back to the node state.
    xs, ups = _vectors(range(3), 5, seed=1), {}
    for pid, ctx in contexts.items():
        state = ctx.state["secagg"]
        c = secagg.SecAggClient.restore(
            client_id=pid, private_key_bytes=bytes(state["sk"]), book=str(state["book"])
        )
        ups[pid] = c.mask(xs[pid], round_id=0, participants=[0, 1, 2], codec=CODEC)
        client_app._save_secagg(ctx, c)
    server = secagg.SecAggServer(codec=CODEC)
    inboxes = server.inboxes([0, 1, 2], {i: u.shares for i, u in ups.items()})
    view = {"round": 0, "survivors": [0, 1, 2], "dropped": [], **cfg}
    sigs = {
        pid: bytes(
            client_app.consistency(message("consistency", view), ctx).content["meta"]["signature"]
        )
        for pid, ctx in contexts.items()
    }
    with pytest.raises(ValueError, match="already signed another survivor list for round 0"):
        client_app.consistency.__wrapped__(
            message("consistency", {**view, "survivors": [0, 1], "dropped": [2]}), contexts[0]
        )
    forged = {
        **cfg,
        "verify-keys": [vbook[0], secagg.SecAggClient(client_id=1).verify_key, vbook[2]],
    }
    with pytest.raises(secagg.SecAggKeyError, match=r"verify keys of clients \[1\] differ"):
        client_app.consistency.__wrapped__(message("consistency", {**view, **forged}), contexts[0])

    def unmask(pid, wrapped=False, **over):
        base = {
            "round": 0,
            "survivors": [0, 1, 2],
            "dropped": [],
            "n": 5,
            **cfg,
            "signers": list(sigs),
            "signatures": list(sigs.values()),
            "from": list(inboxes[pid]),
            "ct": list(inboxes[pid].values()),
        }
        handler = client_app.unmask if wrapped else client_app.unmask.__wrapped__
        return handler(message("unmask", {**base, **over}), contexts[pid])

    with pytest.raises(secagg.SecAggKeyError, match="differ"):
        unmask(0, **{"public-keys": evil["public-keys"]})
    with pytest.raises(ValueError, match="listed both as survivors and as dropped"):
        unmask(0, dropped=[2])
    with pytest.raises(ValueError, match=r"1 valid signatures by survivors.*below threshold t = 2"):
        unmask(0, signers=[0], signatures=[sigs[0]])
    answers = {}
    for pid in range(3):
        answers[pid] = unmask_answer_of(unmask(pid, wrapped=True))  # as the server reads it
    with pytest.raises(ValueError, match="already answered the unmask of round 0"):
        unmask(1)  # the node state remembers the first answer
    masked = {i: u.vector for i, u in ups.items()}
    total = server.aggregate(round_id=0, participants=[0, 1, 2], masked=masked, answers=answers)
    np.testing.assert_array_equal(total, secagg.sum_plain(xs.values(), CODEC))


def test_the_clientapp_reads_its_floor_from_node_config_before_any_row():
    import time

    from fedpriv.clients import app as client_app
    from flwr.app import ConfigRecord, Context, Message, Metadata, RecordDict

    def message(kind, cfg):
        meta = Metadata(
            run_id=1, message_id=f"{kind}-{time.monotonic_ns()}", src_node_id=0, dst_node_id=1,
            reply_to_message_id="", group_id="", created_at=time.time(), ttl=600.0,
            message_type=f"query.{kind}",
        )  # fmt: skip
        return Message(RecordDict({"config": ConfigRecord(cfg)}), metadata=meta)

    rng = np.random.default_rng(0)
    contexts, book, vbook = {}, {}, {}
    for pid, floor in enumerate([1.0, 0.5, 0.5]):
        ctx = Context(
            run_id=1, node_id=10 + pid, state=RecordDict(), run_config={"num-clients": 3},
            node_config={"partition-id": pid, "num-partitions": 3, "secagg-min-threshold": floor},
        )  # fmt: skip
        client = secagg.SecAggClient(client_id=pid, private_key_bytes=rng.bytes(32))
        client_app._save_secagg(ctx, client)
        contexts[pid], book[pid], vbook[pid] = ctx, client.public_key, client.verify_key
    cfg = {"participants": [0, 1, 2], "public-keys": [book[p] for p in range(3)]}
    for ctx in contexts.values():
        client_app.keybook(message("keybook", {**cfg, "verify-keys": list(vbook.values())}), ctx)
    ask = message("fedpriv", {**cfg, "secagg-threshold": 2})  # the run's majority of 3
    with pytest.raises(ValueError, match=r"threshold 2 announced for 3 participants.*t = 3"):
        client_app.answer.__wrapped__(ask, contexts[0])  # its floor 1.0: t = 3
    with pytest.raises(KeyError, match="query"):  # past the check: it reads the query next
        client_app.answer.__wrapped__(ask, contexts[1])
    contexts[2].node_config["secagg-min-threshold"] = 0.3
    with pytest.raises(ValueError, match=r"secagg-min-threshold must lie in \[0.5, 1\]"):
        client_app.answer.__wrapped__(ask, contexts[2])
