"""A node's policy file: its budget, its scope and its approval rule, in TOML.

A hospital gives its node ``policy-file`` (node-config) naming a TOML file with one
``[policy]`` table::

    [policy]
    max-epsilon = 2.0                 # per run, (ε, δ); absent: no limit
    max-delta = 1e-5
    max-lifetime-epsilon = 10.0       # over every run in the node's state-dir
    max-lifetime-delta = 1e-4
    methods = ["dp_gam", "boosting"]  # methods a plan may use; absent: any
    columns = ["age", "admission"]    # schema columns a plan may read; absent: any
    require-approval = true           # a plan waits for the data owner (default false)
    approved = ["<64-hex plan hash>"] # plans approved in advance
    approval-timeout = 300            # seconds a plan may wait, in (0, 86400]

The file is checked at the boundary: an unknown key, a wrong type (a string where
a list belongs is not split into characters, a boolean is not a number) or a value
out of range is one :class:`PolicyFileError` naming the file, the key, the value
and what is allowed. :func:`check_plan_scope` refuses a plan outside ``methods`` /
``columns`` with :class:`~fedpriv.privacy.node_budget.NodeRefusal`, before any row
is read.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedpriv.privacy.node_audit import is_hash
from fedpriv.privacy.node_plan import NodeRefusal

__all__ = [
    "POLICY_FILE",
    "NodePolicy",
    "PolicyFileError",
    "check_plan_scope",
    "load_policy_file",
    "node_policy_config",
]

#: Node-config keys of the policy, and where the ledger lives.
POLICY_KEYS = ("max-epsilon", "max-delta", "max-lifetime-epsilon", "max-lifetime-delta")
STATE_DIR = "state-dir"
#: Node-config key naming the node's TOML policy file (:mod:`fedpriv.privacy.node_policy`).
POLICY_FILE = "policy-file"
#: Environment variable a simulation passes every virtual node's policy in (JSON of the
#: node-config keys; its ``state-dir`` gets ``node-<partition id>`` appended per node).
POLICY_ENV = "FEDPRIV_NODE_POLICY"

#: The ``[policy]`` keys: NodePolicy's field, and what the value must be.
NUMBER_KEYS = POLICY_KEYS
KEYS = (*NUMBER_KEYS, "methods", "columns", "require-approval", "approved", "approval-timeout")
#: The longest a plan may wait for its approval (a day), in seconds.
MAX_TIMEOUT = 86400.0


@dataclass(frozen=True, kw_only=True)
class NodePolicy:
    """A node's limits (ε, δ) per run and over its lifetime; ∞ = no limit.

    From a policy file (:mod:`fedpriv.privacy.node_policy`) also its scope and its
    approval rule: ``methods`` / ``columns`` a plan may use (``None``: any),
    ``require_approval`` (a plan waits for the data owner's approval, at most
    ``approval_timeout`` seconds, :mod:`fedpriv.privacy.node_approval`) and the
    pre-approved plan hashes ``approved``.
    """

    max_epsilon: float = math.inf
    max_delta: float = math.inf
    max_lifetime_epsilon: float = math.inf
    max_lifetime_delta: float = math.inf
    methods: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    require_approval: bool = False
    approved: tuple[str, ...] = ()
    approval_timeout: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_epsilon", "max_delta", "max_lifetime_epsilon", "max_lifetime_delta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
                raise ValueError(f"{name.replace('_', '-')} must lie in [0, inf]; got {v!r}")
        for name in ("methods", "columns", "approved"):
            v = getattr(self, name)
            # A string is a sequence too: it must not become its characters.
            if (v is not None or name == "approved") and (
                isinstance(v, str)
                or not isinstance(v, list | tuple)
                or not all(isinstance(x, str) and x for x in v)
            ):
                raise ValueError(f"{name} must be a list of non-empty strings; got {v!r}")
            object.__setattr__(self, name, None if v is None else tuple(v))
        if not all(is_hash(h) for h in self.approved):
            raise ValueError(
                f"approved must hold plan hashes (64 lowercase hex); got {self.approved!r}"
            )
        if not isinstance(self.require_approval, bool):
            raise ValueError(
                f"require-approval must be true or false; got {self.require_approval!r}"
            )
        t = self.approval_timeout
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= 86400:
            raise ValueError(f"approval-timeout must lie in (0, 86400] seconds; got {t!r}")

    @property
    def lifetime(self) -> bool:
        return math.isfinite(self.max_lifetime_epsilon) or math.isfinite(self.max_lifetime_delta)

    @classmethod
    def from_node_config(cls, config: Mapping[str, Any]) -> NodePolicy | None:
        """The policy a node-config (or any mapping of its kebab-case keys) sets, or
        ``None`` if it sets none; ``None`` values are unset (no limit).

        ``policy-file`` names a TOML policy file (:meth:`from_toml`); a limit set both
        there and in the node-config must agree (else ``ValueError`` naming both).
        """
        given = {k: config[k] for k in POLICY_KEYS if config.get(k, "") not in ("", None)}
        policy_file = config.get(POLICY_FILE, "")
        if not given and policy_file in ("", None):
            return None
        values = {}
        for key, value in given.items():
            try:
                values[key.replace("-", "_")] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{key} must be a number in [0, inf]; got {value!r}") from None
        if policy_file in ("", None):
            return cls(**values)
        base = cls.from_toml(policy_file)
        for name, value in values.items():
            own = getattr(base, name)
            if math.isfinite(own) and own != value:
                key = name.replace("_", "-")
                raise ValueError(
                    f"{key} is {value!r} in the node-config but {own!r} in {POLICY_FILE} "
                    f"{policy_file}; set it in one place"
                )
        return replace(base, **values)

    @classmethod
    def from_toml(cls, path: str | Path) -> NodePolicy:
        """The policy of a TOML file (:func:`fedpriv.privacy.node_policy.load_policy_file`)."""
        return load_policy_file(path)


def node_policy_config(node_config: Mapping[str, Any], environ: Mapping[str, str]) -> dict:
    """The node's budget keys: its node-config's, else (a simulation's virtual nodes,
    which share one node-config shape) :data:`POLICY_ENV`'s, with its own state-dir."""
    own = {k: node_config[k] for k in (*POLICY_KEYS, POLICY_FILE, STATE_DIR) if k in node_config}
    if own or not environ.get(POLICY_ENV):
        return own
    shared = json.loads(environ[POLICY_ENV])
    if shared.get(STATE_DIR):
        pid = node_config.get("partition-id", "")
        shared[STATE_DIR] = str(Path(shared[STATE_DIR]) / f"node-{pid}")
    return shared


class PolicyFileError(ValueError):
    """A policy file that cannot be read or breaks the format; names file, key, value."""


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _strings(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(s, str) and s.strip() for s in x)


def _method_names() -> list[str]:
    from fedpriv.methods import method_names

    return method_names()


def _check(key: str, value: Any) -> str | None:
    """What is wrong with ``[policy] key = value`` (``None``: nothing)."""
    if key in NUMBER_KEYS:
        if not _number(value) or not value >= 0:
            return "must be a number in [0, inf]"
    elif key in ("methods", "columns"):
        if not _strings(value):
            what = "method names" if key == "methods" else "column names"
            return f'must be a list of {what}, e.g. ["{"dp_gam" if key == "methods" else "age"}"]'
        if key == "methods":
            known = _method_names()
            if unknown := sorted(set(value) - set(known)):
                return f"names unknown method(s) {unknown} (registered: {known})"
    elif key == "require-approval":
        if not isinstance(value, bool):
            return "must be true or false"
    elif key == "approved":
        if not _strings(value):
            return 'must be a list of plan hashes, e.g. ["<64 hex digits>"]'
        bad = [h for h in value if len(h) != 64 or set(h.lower()) - set("0123456789abcdef")]
        if bad:
            return f"must hold plan hashes of 64 hex digits; {bad[0]!r} is not one"
    elif key == "approval-timeout":
        if not _number(value) or not 0 < value <= MAX_TIMEOUT:
            return f"must be a number of seconds in (0, {MAX_TIMEOUT:g}]"
    return None


def load_policy_file(path: str | Path) -> NodePolicy:
    """The :class:`NodePolicy` of the TOML policy file at ``path``.

    Raises :class:`PolicyFileError` (one message: file, key, value, what is allowed).
    """
    path = Path(path)
    where = f"{POLICY_FILE} {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyFileError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"{where}: cannot be read ({exc})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyFileError(f"{where}: not valid TOML ({exc})") from None
    extra = sorted(set(doc) - {"policy"})
    if extra:
        raise PolicyFileError(
            f"{where}: unknown table or key {extra[0]!r} (the file holds one [policy] table)"
        )
    table = doc.get("policy")
    if not isinstance(table, dict):
        raise PolicyFileError(f"{where}: needs a [policy] table; got {table!r}")
    for key, value in table.items():
        if key not in KEYS:
            raise PolicyFileError(
                f"{where}: unknown key [policy] {key!r} = {value!r} (allowed: {list(KEYS)})"
            )
        if (wrong := _check(key, value)) is not None:
            raise PolicyFileError(f"{where}: [policy] {key} {wrong}; got {value!r}")
    fields: dict[str, Any] = {k.replace("-", "_"): v for k, v in table.items()}
    for key in ("methods", "columns"):
        if key in fields:
            fields[key] = tuple(fields[key])
    if "approved" in fields:
        fields["approved"] = tuple(h.lower() for h in fields["approved"])
    for key in ("approval_timeout", *(k.replace("-", "_") for k in NUMBER_KEYS)):
        if key in fields:
            fields[key] = float(fields[key])
    return NodePolicy(**fields)


def check_plan_scope(policy: NodePolicy, *, method: str, columns: Sequence[str]) -> None:
    """Refuse (:class:`NodeRefusal`) a plan whose method or columns the policy does
    not allow; call it before the node reads a row."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a method name; got {method!r}")
    if isinstance(columns, str | bytes) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a sequence of column names; got {columns!r}")
    if policy.methods is not None and method not in policy.methods:
        raise NodeRefusal(
            f"method {method!r} is not allowed by this node's policy "
            f"(allowed: {sorted(policy.methods)})",
            code="out_of_scope",
        )
    if policy.columns is not None:
        bad = [c for c in columns if c not in policy.columns]
        if bad:
            raise NodeRefusal(
                f"columns {bad} are not allowed by this node's policy "
                f"(allowed: {sorted(policy.columns)})",
                code="out_of_scope",
            )
