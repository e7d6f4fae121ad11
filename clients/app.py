"""The Flower ClientApp: one hospital answering queries through the shim's client side.

Each node loads its partition (``partition-id`` of ``num-partitions``) of the
run's dataset, keeps its handler state, its secure-aggregation key and its own
secret key in the node's ``context.state`` (Flower may serve a node from a
different process each round; that state never leaves the node), draws its
Poisson coins from its secret key, and replies with its masked vector only:
no timing, no seed. The secret key is fresh OS entropy, or derived from
``$FEDPRIV_SECRET_KEY`` exactly as the in-process runtime derives client
keys, so an injected key reproduces a run bit for bit.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients.boosting import BoostingClient
from clients.dpsgd import DPSGDClient
from clients.lumberjack import LumberjackClient
from clients.random_forest import RandomForestClient
from fedpriv.data import load_dataset
from fedpriv.federation.protocol import ClientData, poisson_sample
from fedpriv.federation.runtime import client_key
from fedpriv.federation.secagg import FixedPointCodec, SecAggClient
from fedpriv.federation.settings import RunSettings
from fedpriv.federation.wire import query_from_wire, state_from_wire, state_to_wire
from fedpriv.models import _forest_kernels, _kernels, _sgd_kernels
from fedpriv.privacy.randomness import KEY_ENV, SecretKey, key_from_environment

app = ClientApp()
HANDLERS = {
    "boosting": BoostingClient(),
    "dpsgd": DPSGDClient(),
    "lumberjack": LumberjackClient(),
    "random_forest": RandomForestClient(),
}


@lru_cache(maxsize=4)
def _dataset(dataset: str, split_seed: int):
    # Per process: the simulation engine serves any node from any worker, so a
    # worker that loaded the corpus for one node reuses it for the next.
    return load_dataset(dataset, split_seed=split_seed)


@lru_cache(maxsize=64)
def _client_data(dataset: str, split_seed: int, num_clients: int, pid: int) -> ClientData:
    ds = _dataset(dataset, split_seed)
    X, y = ds.xy("train")
    rows = ds.client_partition(num_clients)[pid]
    return ClientData(client_id=pid, X=X[rows], y=y[rows])


def _settings_and_pid(context: Context) -> tuple[RunSettings, int]:
    s = RunSettings.from_run_config(context.run_config)
    pid = int(context.node_config["partition-id"])
    if int(context.node_config["num-partitions"]) != s.num_clients:
        raise ValueError(
            f"num-partitions {context.node_config['num-partitions']} != num-clients {s.num_clients}"
        )
    return s, pid


def _secagg(context: Context, pid: int, public_keys: list[bytes], participants: list[int]):
    keys = context.state["secagg"]
    return SecAggClient.restore(
        client_id=pid,
        private_key_bytes=bytes(keys["sk"]),
        book=str(keys["book"]),
        public_keys=dict(zip(participants, public_keys, strict=True)),
    )


def _save_secagg(context: Context, client: SecAggClient) -> None:
    sk, book = client.export_state()
    context.state["secagg"] = ConfigRecord({"sk": sk, "book": book})


def _reply(msg: Message, pid: int, **records) -> Message:
    # No handler time: it tracks the client's size (0.3 / 3 / 51 ms at 5k / 20k /
    # 80k rows), a release that no mechanism accounts for.
    meta = ConfigRecord({"partition-id": pid})
    return Message(RecordDict({"meta": meta, **records}), reply_to=msg)


def _new_secret_key(pid: int) -> SecretKey:
    # Injected (reproduction): the in-process runtime's derivation; else OS entropy.
    if os.environ.get(KEY_ENV):
        return client_key(key_from_environment(), pid)
    return SecretKey.generate()


def _secret_key(context: Context) -> SecretKey:
    return SecretKey(bytes(context.state["private"]["key"]))


def answer_quietly(handler, query, data: ClientData, sample, state, key) -> np.ndarray:
    """``handler.answer``; a failure reaches the server without its message.

    A handler's message may quote this node's rows (a label, a size, a sample);
    the details stay in the node's own log and the server, which prints client
    errors, learns only which handler failed and the exception's type.
    """
    try:
        return handler.answer(query, data, sample, state, key)
    except Exception as exc:
        logging.getLogger(__name__).exception("fedpriv %s handler failed", query.method)
        raise RuntimeError(f"{query.method} handler failed ({type(exc).__name__})") from None


@app.query("keys")
def keys(msg: Message, context: Context) -> Message:
    s, pid = _settings_and_pid(context)
    # Load the rows and the compiled kernels now, not in round 1.
    _client_data(s.dataset, s.split_seed, s.num_clients, pid)
    kernels = {"boosting": _kernels, "random_forest": _kernels, "lumberjack": _forest_kernels}
    kernels.get(s.method, _sgd_kernels).warm_up()
    client = SecAggClient(client_id=pid)
    _save_secagg(context, client)
    key = _new_secret_key(pid)
    context.state["private"] = ConfigRecord({"key": key.bytes_for_local_store()})
    content = RecordDict(
        {"meta": ConfigRecord({"partition-id": pid, "public-key": client.public_key})}
    )
    return Message(content, reply_to=msg)


@app.query("ping")
def ping(msg: Message, context: Context) -> Message:
    """An empty round trip: the server times Flower's own per-round cost."""
    return _reply(msg, int(context.node_config["partition-id"]))


@app.query("fedpriv")
def answer(msg: Message, context: Context) -> Message:
    s, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    arrays = {k: msg.content["query"][k].numpy() for k in msg.content["query"].keys()}
    query = query_from_wire(arrays, dict(cfg))
    data = _client_data(s.dataset, s.split_seed, s.num_clients, pid)
    key = _secret_key(context)
    sample = poisson_sample(data.n, query.sampling_rate, key.streams("poisson").at(query.round))

    saved_arrays = context.state.get("handler-arrays")
    saved_scalars = context.state.get("handler-scalars")
    state = {}
    if saved_arrays is not None and saved_scalars is not None:
        state = state_from_wire(
            {k: saved_arrays[k].numpy() for k in saved_arrays.keys()}, dict(saved_scalars)
        )
    handler = HANDLERS[query.method]
    vec = answer_quietly(handler, query, data, sample, state, key)
    for key in getattr(handler, "cache_keys", ()):
        state.pop(key, None)
    st_arrays, st_scalars = state_to_wire(state)
    context.state["handler-arrays"] = ArrayRecord({k: Array(v) for k, v in st_arrays.items()})
    context.state["handler-scalars"] = ConfigRecord(st_scalars)

    participants = [int(p) for p in cfg["participants"]]
    codec = FixedPointCodec(
        scale=float(cfg["codec-scale"]),
        max_abs=float(cfg["codec-max-abs"]),
        max_summands=len(participants),
    )
    client = _secagg(context, pid, list(cfg["public-keys"]), participants)
    masked = client.mask(vec, round_id=query.round, participants=participants, codec=codec)
    _save_secagg(context, client)
    return _reply(msg, pid, reply=ArrayRecord({"masked": Array(masked)}))


@app.query("reveal")
def reveal(msg: Message, context: Context) -> Message:
    _, pid = _settings_and_pid(context)
    cfg = msg.content["config"]
    participants = [int(p) for p in cfg["participants"]]
    client = _secagg(context, pid, list(cfg["public-keys"]), participants)
    masks = client.reveal(
        round_id=int(cfg["round"]), missing=[int(m) for m in cfg["missing"]], n=int(cfg["n"])
    )
    _save_secagg(context, client)
    record = ArrayRecord({str(j): Array(np.asarray(m)) for j, m in masks.items()})
    return _reply(msg, pid, reveal=record)
