"""The launchers' side of reproduction keys: node processes get none unless asked.

A reproduction key (``$FEDPRIV_SECRET_KEY``, :mod:`fedpriv.privacy.randomness`)
reaches the ServerApp to replay the server's private randomness. Every node's key
derives from it when a node sees it too, and under distributed noise the server
could then recompute every node's noise share (:mod:`fedpriv.privacy.distributed`).
So the launchers keep it out of the nodes' (SuperNodes', ClientApps') environment
unless ``--share-secret-key`` asks for a bit-for-bit reproduction; that option also
sets each node's ``allow-reproduction-key`` (node-config, or
``$FEDPRIV_ALLOW_REPRODUCTION_KEY`` for a simulation's virtual nodes), without which
a node refuses a distributed-noise run on an injected key. The run's privacy report
then says ``certified: false`` under distributed noise.

A simulation runs the ServerApp and the virtual nodes' ClientApps in one process
tree with one environment: without the option the key reaches neither (the run
draws fresh keys, and the launcher says so).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from fedpriv import logs
from fedpriv.privacy.distributed import ALLOW_REPRODUCTION_KEY, ALLOW_REPRODUCTION_KEY_ENV
from fedpriv.privacy.randomness import KEY_ENV

log = logs.get_logger(__name__)

#: The launchers' option.
OPTION = "--share-secret-key"
HELP = (
    f"copy ${KEY_ENV} (the reproduction key) to the nodes too, and set their "
    f"{ALLOW_REPRODUCTION_KEY}: a bit-for-bit reproduction; under distributed noise the "
    "run is then not certified (the server could recompute every noise share)"
)


def add_argument(ap: argparse.ArgumentParser) -> None:
    """The ``--share-secret-key`` flag."""
    ap.add_argument(OPTION, action="store_true", help=HELP)


def node_environment(env: Mapping[str, str], *, share: bool) -> dict[str, str]:
    """``env`` for a node process: without ``share``, no reproduction key; with it, the
    key and :data:`~fedpriv.privacy.distributed.ALLOW_REPRODUCTION_KEY_ENV`."""
    out = dict(env)
    if share:
        if out.get(KEY_ENV):
            out[ALLOW_REPRODUCTION_KEY_ENV] = "true"
        return out
    out.pop(KEY_ENV, None)
    out.pop(ALLOW_REPRODUCTION_KEY_ENV, None)
    return out


def node_config(share: bool) -> dict[str, object]:
    """A SuperNode's extra node-config: ``allow-reproduction-key`` when ``share``."""
    return {ALLOW_REPRODUCTION_KEY: True} if share else {}


def simulation_environment(env: Mapping[str, str], *, share: bool) -> dict[str, str]:
    """A simulation's one environment (server and virtual nodes alike): the key only
    with ``share`` (:func:`node_environment`); a key left out is said once."""
    if env.get(KEY_ENV) and not share:
        log.warning(
            "$%s is not passed to the simulation: its virtual nodes share the server's "
            "environment, and their keys would derive from it (%s to reproduce a run)",
            KEY_ENV,
            OPTION,
        )
    return node_environment(env, share=share)
