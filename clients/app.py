"""The Flower ClientApp: one hospital answering queries through the shim's client side.

Each node reads its own file (node-config ``data-path``) against the run's
public schema, or, simulating a hospital, its partition (``partition-id`` of
``num-partitions``) of a bundled corpus or of the run's ``csv``
(:mod:`fedpriv.data.node`); it loads and checks its rows, including the
declared ``max-records`` bound, in the key exchange, so a bad file fails the
run before round 1 with its error code. It keeps its handler state, its
secure-aggregation key and its own secret key in the node's ``context.state``
(Flower may serve a node from a different process each round; that state never
leaves the node), draws its
Poisson coins from its secret key, and replies with its masked vector only:
no timing, no seed. The secret key is fresh OS entropy, or derived from
``$FEDPRIV_SECRET_KEY`` exactly as the in-process runtime derives client
keys, so an injected key reproduces a run bit for bit. Its Shamir threshold floor
is its own (node-config ``secagg-min-threshold`` in [0.5, 1], default a strict
majority): the run's ``secagg-threshold`` may raise t, never lower it. So are its
floors on SecAgg+'s targets (``secagg-min-collusion`` γ, ``secagg-min-sigma`` σ;
default 0): it refuses a run whose ``secagg-collusion`` or ``secagg-sigma`` is lower.
It derives the run's communication graph itself from its Flower run id and the
pinned key book (:mod:`fedpriv.federation.secagg_topology`) and refuses a message
naming another neighbourhood or threshold.
The key-exchange reply
says which (``key-origin``: ``fresh`` or ``injected``, a public flag): the server
then reports a distributed-noise run on injected keys as uncertified, and the
node refuses such a run before reading a row unless its node-config sets
``allow-reproduction-key = true`` (:mod:`fedpriv.privacy.distributed`).

Errors. Flower 1.42 sends a ClientApp's exception to the server as the reply's
error reason, ``str(type(exc)) + ":<'" + str(exc) + "'>"``
(``flwr/supernode/runtime/run_clientapp.py``; in simulation
``flwr/server/superlink/fleet/vce/vce_api.py``, which also logs the traceback),
and the server prints it to its log. A :class:`~fedpriv.data.DataError`'s text
quotes the bad cell and its line, so every query here is wrapped by
:func:`sanitised`: the full error is logged locally (the node's own log) and
only :func:`fedpriv.errors.public_error` of it, a code and a schema column, is
raised to Flower.
"""

from __future__ import annotations

import functools
import logging
import os

import numpy as np
from fedpriv.clients.evaluation import EvaluationClient
from fedpriv.clients.node_data import (  # noqa: F401 (the tests reach them here)
    _node_data,
    _node_eval_data,
    _source_data,
    _source_eval_data,
)
from fedpriv.clients.node_rules import (
    admit_plan,
    admit_query,
    handler,
    node_ledger,
    node_settings,
    noise_share,
    secagg_config,
)
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedpriv.errors import public_error
from fedpriv.federation.protocol import client_sample
from fedpriv.federation.runtime import client_key
from fedpriv.federation.secagg import FixedPointCodec, SecAggClient
from fedpriv.federation.settings import RunSettings
from fedpriv.federation.wire import query_from_wire, state_from_wire, state_to_wire
from fedpriv.methods import get_method
from fedpriv.privacy.distributed import (
    FRESH,
    INJECTED,
    KEY_ORIGIN,
    allows_reproduction_key,
    check_key_origin,
)
from fedpriv.privacy.randomness import KEY_ENV, SecretKey, key_from_environment

log = logging.getLogger(__name__)
app = ClientApp()


def sanitised(fn):
    """Wrap a ClientApp query so that a failure reaches the server as a code and a column only.

    The exception's full text and traceback (cell values, line numbers, file
    paths) are logged on this node; what is raised to Flower, and so sent to
    the server, is :func:`fedpriv.errors.public_error` of it, raised outside
    the ``except`` block so that it does not even carry the original as its
    context.
    """

    @functools.wraps(fn)
    def query(msg: Message, context: Context) -> Message:
        try:
            return fn(msg, context)
        except Exception as exc:  # every failure: its text may quote private data
            failure = public_error(exc)
            pid = str(context.node_config.get("partition-id", ""))
            failure = failure.at_node(int(pid)) if pid.isdigit() else failure  # public
            log.error("fedpriv %s failed locally (%s): %s", fn.__name__, failure, exc, exc_info=exc)
        raise failure

    return query


def _settings_and_pid(context: Context) -> tuple[RunSettings, int]:
    s = node_settings(context)
    pid = int(context.node_config["partition-id"])
    if int(context.node_config["num-partitions"]) != s.num_clients:
        raise ValueError(
            f"num-partitions {context.node_config['num-partitions']} != num-clients {s.num_clients}"
        )
    return s, pid


def _secagg(
    context: Context, s: RunSettings, pid: int, cfg
) -> tuple[SecAggClient, dict[int, bytes]]:
    """This node's secure-aggregation client (with its pinned key book and its own
    threshold floor, node-config ``secagg-min-threshold``, which the run's
    ``secagg-threshold`` may raise but never lower) and the public keys ``cfg``
    names, which the client checks against the pinned ones (verify keys too, if named)."""
    keys = context.state["secagg"]
    client = SecAggClient.restore(
        client_id=pid,
        private_key_bytes=bytes(keys["sk"]),
        book=str(keys["book"]),
        config=secagg_config(context, s),
    )
    named = cfg["participants"]
    if "verify-keys" in cfg:
        client.check_keys([int(p) for p in named], verify_keys=_by_id(named, cfg["verify-keys"]))
    return client, _by_id(named, cfg["public-keys"])


def _save_secagg(context: Context, client: SecAggClient) -> None:
    sk, book = client.export_state()
    context.state["secagg"] = ConfigRecord({"sk": sk, "book": book})


def _reply(msg: Message, **records) -> Message:
    # No handler time: it tracks the client's size (0.3 / 3 / 51 ms at 5k / 20k /
    # 80k rows), a release that no mechanism accounts for. No partition id either:
    # the server knows the sender from the message's source node, not from content.
    return Message(RecordDict(records), reply_to=msg)


def _key_origin() -> str:
    """``injected`` when ``$FEDPRIV_SECRET_KEY`` is set (the key derives from it), else
    ``fresh``."""
    return INJECTED if os.environ.get(KEY_ENV) else FRESH


def _new_secret_key(pid: int, origin: str) -> SecretKey:
    # Injected (reproduction): the in-process runtime's derivation; else OS entropy.
    if origin == INJECTED:
        return client_key(key_from_environment(), pid)
    return SecretKey.generate()


def _secret_key(context: Context) -> SecretKey:
    return SecretKey(bytes(context.state["private"]["key"]))


@app.query("keys")
@sanitised
def keys(msg: Message, context: Context) -> Message:
    s, pid = _settings_and_pid(context)
    if "secagg" in context.state:
        # A second exchange would replace the pinned keys (and this node's coins).
        raise RuntimeError("the key exchange already ran in this run; refused")
    # Before anything else: an injected key in a distributed-noise run lets the server
    # recompute this node's shares; refused unless this node's own config allows it.
    origin = _key_origin()
    allowed = allows_reproduction_key(context.node_config, os.environ)
    check_key_origin(origin, distributed=s.distributed_noise is not None, allowed=allowed)
    secagg_config(context, s).check_node_targets()  # its own floors on γ and σ
    # The run's plan first: this node's own budget admits it before any row is read.
    left = admit_plan(msg, context)
    # Load and check the rows (schema, bound) and compile the kernels now, not in round 1.
    _node_data(context, s, pid)
    if s.eval_epsilon:
        _node_eval_data(context, s, pid)
    get_method(s.method).warm_up()
    client = SecAggClient(client_id=pid)
    _save_secagg(context, client)
    key = _new_secret_key(pid, origin)
    context.state["private"] = ConfigRecord({"key": key.bytes_for_local_store()})
    meta = {
        "partition-id": pid,
        "run-id": str(context.run_id),  # the graph's public seed, with the key book
        "public-key": client.public_key,
        "verify-key": client.verify_key,
        KEY_ORIGIN: origin,
    }
    if left is not None:
        meta.update({"remaining-epsilon": left[0], "remaining-delta": left[1]})
    return Message(RecordDict({"meta": ConfigRecord(meta)}), reply_to=msg)


@app.query("keybook")
@sanitised
def keybook(msg: Message, context: Context) -> Message:
    """Pin the run's key book {partition id: (public key, verify key)}; once per run."""
    s, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    client, book = _secagg(context, s, pid, {k: v for k, v in cfg.items() if k != "verify-keys"})
    if sorted(book) != list(range(s.num_clients)):
        raise ValueError(f"a key book must name partitions 0..{s.num_clients - 1}; refused")
    # Pins the book and derives the run's graph from it and this node's own run id.
    verify = _by_id(cfg["participants"], cfg["verify-keys"])
    client.setup(book, verify_keys=verify, run_id=str(context.run_id))
    _save_secagg(context, client)
    return _reply(msg)


@app.query("plan")
@sanitised
def plan(msg: Message, context: Context) -> Message:
    """A later strategy's plan (the DP evaluation): admitted or refused, as in ``keys``."""
    left = admit_plan(msg, context)
    if left is None:
        raise ValueError("a plan message without a plan; refused")
    meta = ConfigRecord({"remaining-epsilon": left[0], "remaining-delta": left[1]})
    return _reply(msg, meta=meta)


@app.query("ping")
@sanitised
def ping(msg: Message, context: Context) -> Message:
    """An empty round trip: the server times Flower's own per-round cost."""
    return _reply(msg)


@app.query("fedpriv")
@sanitised
def answer(msg: Message, context: Context) -> Message:
    s, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    participants = [int(p) for p in cfg["participants"]]
    client, named = _secagg(context, s, pid, cfg)
    client.check_keys(participants, named)  # refuse substituted keys before any work
    # SecAgg+: the announced neighbours must be the derived ones, the round everyone.
    near = cfg.get("neighbours")
    near = None if near is None else [int(v) for v in near]
    if client.check_neighbourhood(near) is not None:
        participants = list(client.graph.ids)
        if int(cfg["num-participants"]) != len(participants):
            raise ValueError(f"a sparse-graph round asks all {len(participants)} clients; refused")
    client.check_threshold(len(participants), int(cfg["secagg-threshold"]))  # its own floor
    arrays = {k: msg.content["query"][k].numpy() for k in msg.content["query"].keys()}
    query = query_from_wire(arrays, dict(cfg))
    key = _secret_key(context)
    admit_query(context, s, cfg, query)
    share = noise_share(s, cfg, query, participants, key)  # refused before any row is read
    if query.method == EvaluationClient.method:
        vec = _evaluation_answer(query, context, s, pid, key)
    else:
        vec = _training_answer(query, context, s, pid, key)

    codec = FixedPointCodec(
        scale=float(cfg["codec-scale"]),
        max_abs=float(cfg["codec-max-abs"]),
        max_summands=len(participants),
    )
    up = client.mask(
        vec,
        round_id=query.round,
        participants=participants,
        codec=codec,
        threshold=int(cfg["secagg-threshold"]),
        public_keys=named,
        noise=share,
        # m = n − f, which _noise_share checked against this node's own rule.
        min_survivors=None if share is None else int(cfg["noise-min-survivors"]),
        neighbours=near,
        resend=bool(cfg.get("secagg-resend", True)),  # the server lacks its sealed shares
        rounds_left=cfg.get("secagg-rounds-left"),  # a hint, checked by the node
    )
    _save_secagg(context, client)
    shares = ConfigRecord({"to": list(up.shares), "ct": list(up.shares.values())})
    reply = ArrayRecord({"masked": Array(up.vector)})
    meta = ConfigRecord({"round": query.round})  # checked against the server's round
    return _reply(msg, meta=meta, reply=reply, shares=shares)


def _training_answer(query, context: Context, s: RunSettings, pid: int, key: SecretKey):
    """The run's method's answer on this node's sample, its handler state kept on the node."""
    if query.method != s.method:
        raise ValueError(f"query for method {query.method!r} in a {s.method!r} run; refused")
    data = _node_data(context, s, pid)
    sample = client_sample(data, query.sampling_rate, key.streams("poisson").at(query.round))
    saved_arrays = context.state.get("handler-arrays")
    saved_scalars = context.state.get("handler-scalars")
    state = {}
    if saved_arrays is not None and saved_scalars is not None:
        state = state_from_wire(
            {k: saved_arrays[k].numpy() for k in saved_arrays.keys()}, dict(saved_scalars)
        )
    half = handler(query.method)
    vec = half.answer(query, data, sample, state, key)
    for name in getattr(half, "cache_keys", ()):
        state.pop(name, None)
    st_arrays, st_scalars = state_to_wire(state)
    context.state["handler-arrays"] = ArrayRecord({k: Array(v) for k, v in st_arrays.items()})
    context.state["handler-scalars"] = ConfigRecord(st_scalars)
    return vec


def _evaluation_answer(query, context: Context, s: RunSettings, pid: int, key: SecretKey):
    """The score histogram of this node's held-out rows (every row: no sample), only in
    a run that budgets a DP evaluation (``eval-epsilon`` > 0) and only for its model."""
    if not s.eval_epsilon:
        raise ValueError("an evaluation query in a run without eval-epsilon; refused")
    if query.config.get("model_method") != s.method:
        raise ValueError(f"evaluation of a {query.config.get('model_method')!r} model in a "
                         f"{s.method!r} run; refused")  # fmt: skip
    data = _node_eval_data(context, s, pid)
    sample = client_sample(data, query.sampling_rate, key.streams("poisson").at(query.round))
    return EvaluationClient().answer(query, data, sample, {}, key)


def _by_id(ids, values) -> dict[int, bytes]:
    return dict(zip([int(j) for j in ids], [bytes(v) for v in values], strict=True))


@app.query("consistency")
@sanitised
def consistency(msg: Message, context: Context) -> Message:
    """The round's consistency answer: this node's signature on the survivor list it is
    shown (one list per round; :mod:`fedpriv.federation.secagg_consistency`)."""
    s, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    client, named = _secagg(context, s, pid, cfg)
    r = int(cfg["round"])
    client.check_keys(sorted(named), named)
    signature = client.sign_survivors(
        round_id=r,
        survivors=[int(u) for u in cfg["survivors"]],
        dropped=[int(v) for v in cfg["dropped"]],
    )
    _save_secagg(context, client)  # before replying: the round's list is now signed
    return _reply(msg, meta=ConfigRecord({"round": r, "signature": signature}))


@app.query("unmask")
@sanitised
def unmask(msg: Message, context: Context) -> Message:
    """The round's one unmask answer: shares for the survivors, pair masks for the dropped,
    only with t survivors' signatures on the very survivor list."""
    s, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    client, named = _secagg(context, s, pid, cfg)
    r, survivors, dropped = (
        int(cfg["round"]),
        [int(u) for u in cfg["survivors"]],
        [int(v) for v in cfg["dropped"]],
    )
    ledger = node_ledger(context)
    try:
        answer = client.unmask(
            round_id=r,
            survivors=survivors,
            dropped=dropped,
            n=int(cfg["n"]),
            inbox=dict(zip([int(w) for w in cfg["from"]], cfg["ct"], strict=True)),
            signatures=_by_id(cfg.get("signers", []), cfg.get("signatures", [])),
            public_keys=named,
        )
    except ValueError as err:  # the node's rules: its audit log records the refusal
        ledger.note("unmask-refused", run=str(context.run_id), round=r, reason=str(err))
        raise
    _save_secagg(context, client)  # before replying: the round is now answered
    ledger.note("unmask", run=str(context.run_id), round=r, survivors=len(survivors),
                dropped=len(dropped))  # fmt: skip
    shares = ConfigRecord({"of": list(answer.shares), "share": list(answer.shares.values()),
                           "lost": list(answer.lost)})  # fmt: skip
    mask = {} if answer.mask is None else {"sum": Array(np.asarray(answer.mask))}
    return _reply(msg, unmask=shares, masks=ArrayRecord(mask))
