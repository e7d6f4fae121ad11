"""The launchers' side of node-enforced budgets: options, node-configs, the closing lines.

Both launchers take every node's policy (:mod:`fedpriv.privacy.node_budget`) as
``--node-max-epsilon``, ``--node-max-delta``, ``--node-max-lifetime-epsilon``,
``--node-max-lifetime-delta`` and ``--node-state DIR`` (node i keeps its ledger in
``DIR/node-i``). The deployment passes them as each SuperNode's node-config; the
simulation, whose virtual nodes all get Flower's own node-config, passes them in
``$FEDPRIV_NODE_POLICY``. After the run each launcher prints every node's remaining
budget, read from the node's own ledger.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

from fedpriv.federation.settings import SettingError
from fedpriv.privacy.node_budget import (
    POLICY_ENV,
    POLICY_KEYS,
    STATE_DIR,
    NodeLedger,
    NodePolicy,
)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--node-*`` options."""
    for key in POLICY_KEYS:
        ap.add_argument(
            f"--node-{key}", type=float, default=None, metavar="X",
            help=f"every node's own budget policy: node-config {key}",
        )  # fmt: skip
    ap.add_argument(
        "--node-state", default=None, metavar="DIR",
        help="where node i keeps its budget ledger across runs (DIR/node-i; node-config "
        "state-dir); needed for the lifetime limits",
    )  # fmt: skip


def policy_of(args: argparse.Namespace) -> dict[str, float]:
    """The policy the options set (checked; :class:`SettingError` names the option)."""
    policy = {k: getattr(args, "node_" + k.replace("-", "_")) for k in POLICY_KEYS}
    policy = {k: v for k, v in policy.items() if v is not None}
    try:
        NodePolicy.from_node_config(policy)
    except ValueError as exc:
        raise SettingError(f"--node-{exc}") from None
    if not args.node_state and any("lifetime" in k for k in policy):
        raise SettingError("--node-max-lifetime-*: needs --node-state DIR (got none)")
    return policy


def node_configs(
    k: int, policy: Mapping[str, float] | None, state: str | Path | None
) -> dict[int, dict[str, object]]:
    """Each node's budget node-config: the policy, and its own ``state-dir`` under ``state``."""
    out: dict[int, dict[str, object]] = {i: dict(policy or {}) for i in range(k)}
    if state is not None:
        for i in range(k):
            out[i][STATE_DIR] = str((Path(state) / f"node-{i}").resolve())
    return out


def policy_environment(policy: Mapping[str, float], state: str | Path | None) -> dict[str, str]:
    """The simulation's ``$FEDPRIV_NODE_POLICY`` (empty: no policy)."""
    if not policy and state is None:
        return {}
    shared: dict[str, object] = dict(policy)
    if state is not None:
        shared[STATE_DIR] = str(Path(state).resolve())
    return {POLICY_ENV: json.dumps(shared)}


def budget_lines(k: int, policy: Mapping[str, float] | None, state: str | Path) -> list[str]:
    """One line per node: its lifetime spend and what its policy leaves (its own ledger)."""
    lines = []
    rules = NodePolicy.from_node_config(policy or {}) or NodePolicy()
    for i in range(k):
        ledger = NodeLedger(rules, Path(state) / f"node-{i}")
        eps, delta = ledger.lifetime_spend()
        rem_eps, rem_delta = ledger.remaining()
        lines.append(
            f"node {i}: {len(ledger.runs)} run(s), lifetime ε {eps:.4g}, δ {delta:.3g}; "
            f"remaining ε {rem_eps:.4g}, δ {rem_delta:.3g}"
        )
    return lines
