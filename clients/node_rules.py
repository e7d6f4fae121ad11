"""A hospital node's own rules in the ClientApp: its ledger, the plan it admits, each query.

The node's ledger (:class:`~fedpriv.privacy.node_budget.NodeLedger`) under its
node-config policy (none set: no limit, but every query still held to the plan it
admitted) lives in its state directory, else in the run's node state. A declared
plan is admitted, or refused before any row is read, with the node's own
accountant (:mod:`fedpriv.privacy.node_plan`); the client halves it derives every
sensitivity from are this node's own (:func:`node_handler`).
"""

from __future__ import annotations

import json
import logging
import os
from functools import lru_cache

from fedpriv.clients.evaluation import EvaluationClient
from flwr.app import ConfigRecord, Context, Message

from fedpriv.data.node import run_schema
from fedpriv.federation.secagg_common import SecAggConfig, node_config_floor, node_config_targets
from fedpriv.federation.settings import RunSettings
from fedpriv.methods import get_method
from fedpriv.privacy.distributed import draw_share, share_streams
from fedpriv.privacy.node_budget import STATE_DIR, NodeLedger, NodePolicy, node_policy_config
from fedpriv.privacy.randomness import SecretKey

log = logging.getLogger(__name__)


#: Node-config key: the node's own copy of the consortium's public schema.
SCHEMA_PATH = "schema-path"


def node_settings(context: Context) -> RunSettings:
    """The run's settings as this node applies them: with its own copy of the public
    schema (node-config ``schema-path``), the node reads its rows with that copy and
    refuses a run whose ``schema-sha256`` is another (or unnamed): the coordinator's
    path means nothing on this machine, and a node does not read its rows with a
    schema it has not checked."""
    s = RunSettings.from_run_config(context.run_config)
    own = str(context.node_config.get(SCHEMA_PATH, "") or "")
    if not own:
        return s
    from dataclasses import replace

    from fedpriv.data import DataError

    digest = _digest(own)
    if s.schema_sha256.lower() != digest:
        raise DataError(
            f"the run's schema (sha256 {s.schema_sha256[:12] or 'not given'}) is not this "
            f"node's own copy (sha256 {digest[:12]}): refused before any row is read",
            code="schema_mismatch",
            source=own,
        )
    return replace(s, schema=own)


def _digest(path: str) -> str:
    import hashlib
    from pathlib import Path

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=8)
def handler(method: str):
    """The method's client half, from the registry (one per process)."""
    return get_method(method).client_handler()


def node_ledger(context: Context) -> NodeLedger:
    """This node's own ledger under its node-config policy (none set: no limit, but every
    query is still held to the plan it admitted); with units in its schema, every
    sensitivity it derives is one unit's (``max_records_per_unit``)."""
    config = node_policy_config(context.node_config, os.environ)
    policy = NodePolicy.from_node_config(config) or NodePolicy()
    state_dir = str(config.get(STATE_DIR, "") or "")
    saved = context.state.get("node-ledger")
    s = node_settings(context)
    m = run_schema(s.schema, s.dataset).unit_records  # the node's own copy of the schema
    return NodeLedger(
        policy, state_dir or None, data=str(saved["json"]) if saved else "", unit_records=m
    )


def keep(context: Context, ledger: NodeLedger) -> None:
    # With a state directory the file is the ledger; the run's copy serves the rest.
    context.state["node-ledger"] = ConfigRecord({"json": ledger.export()})


def admit_plan(msg: Message, context: Context) -> tuple[float, float] | None:
    """Admit the message's declared plan under this node's own policy, or raise (the run
    stops: :mod:`fedpriv.privacy.node_budget`); what the node has left (``None``: no
    plan in the message)."""
    config = msg.content["config"]
    if "plan" not in config:
        return None
    declared = json.loads(str(config["plan"]))
    context.state["node-stage"] = ConfigRecord({"stage": str(declared["stage"])})
    ledger = node_ledger(context)
    s = node_settings(context)
    schema = run_schema(s.schema, s.dataset)  # public: the columns the run would read
    columns = (*schema.column_names, schema.target.column)
    eps = ledger.admit_plan(str(context.run_id), declared, node_handler, columns=columns)
    keep(context, ledger)
    left = ledger.remaining()
    log.info("plan %r admitted: ε %.6g; lifetime left ε %.6g, δ %.3g",
             declared["stage"], eps, *left)  # fmt: skip
    return left


def node_handler(method: str):
    """The client half this node answers ``method`` with, from which it derives the
    sensitivity of every stage and query itself (:mod:`fedpriv.privacy.node_plan`)."""
    return EvaluationClient() if method == EvaluationClient.method else handler(method)


def admit_query(context: Context, s: RunSettings, cfg, query) -> None:
    """This node's ledger admits the query before any row is read (or refuses)."""
    ledger = node_ledger(context)
    share = None
    if s.distributed_noise is not None and "noise-share-std" in cfg:
        share = (float(cfg["noise-share-std"]), int(cfg["noise-min-survivors"]))
    stage = str(context.state["node-stage"]["stage"]) if "node-stage" in context.state else ""
    ledger.admit_query(str(context.run_id), stage, query, node_handler, share=share)
    keep(context, ledger)


def secagg_config(context: Context, s: RunSettings) -> SecAggConfig:
    """The run's secure-aggregation parameters with this node's own floors."""
    floor = node_config_floor(context.node_config)
    targets = node_config_targets(context.node_config)
    return SecAggConfig.of_run(s, min_threshold_fraction=floor, **targets)


def noise_share(s: RunSettings, cfg, query, participants: list[int], key: SecretKey):
    """This node's share of the round's noise (distributed runs), from its own stream.

    Fails closed: a distributed run's query without a share, or with shares sized
    for fewer survivors than this node's own rule (n − f), is refused, since the
    sum the server could unmask would then be exact or under-noised."""
    setting = s.distributed_noise
    if setting is None:
        if "noise-share-std" in cfg:
            raise ValueError("a noise share asked for in a central-noise run; refused")
        return None
    if "noise-share-std" not in cfg:
        raise ValueError("a distributed-noise run's query carries no noise share; refused")
    m = int(cfg["noise-min-survivors"])
    if m != setting.min_survivors(len(participants)):
        raise ValueError(
            f"noise-min-survivors {m} != {setting.min_survivors(len(participants))} "
            f"(participants {len(participants)} - tolerated-dropouts {setting.dropouts}); refused"
        )
    std = float(cfg["noise-share-std"])
    return draw_share(share_streams(key), query.round, query.reply_length, std)
