"""Node-enforced budgets: each hospital keeps its own ledger and refuses, failing closed.

The server's ledger (:mod:`fedpriv.privacy.ledger`) guards the run's budget, but a
hospital that trusts it trusts the server. Here each node keeps a ledger of its
own, persisted in its state directory across runs, and answers nothing its own
policy does not allow:

1. **The plan.** After a strategy reserves its whole plan, the server declares it
   to every node (:func:`declared_plan`): the reserved DpEvents, the run's δ, the
   ε the server's ledger computes for them, the number of data rounds, and, per
   Gaussian stage, its noise multiplier and L2 sensitivity. The node recomputes ε
   with its own accountant (:func:`fedpriv.privacy.accounting.account`, the same
   PLD and RDP) and refuses the plan if the two ledgers disagree, if ε or δ exceed
   its per-run policy, or if its lifetime spend plus this run's would exceed its
   lifetime policy. An admitted plan is charged in full, at once, to the node's
   persistent ledger: a run that stops early has still spent what it could have.
   A later stage of the same run (the DP evaluation, on its own scoped ledger)
   declares its own plan; a run is charged the sum of its stages' (ε, δ).
2. **Each query.** A node refuses a query of a run or stage it never admitted, a
   round it already answered, and any round beyond the declared count, *before*
   reading a row. Under distributed noise it also checks the share it is asked to
   add: with m survivors, √m·σ_c must reach z·(Δ₂ + γ√d) of a declared Gaussian
   stage that still has rounds left, and the round counts against the most
   demanding such stage. A server that under-declares the noise is refused
   without being trusted at all (the node draws that share itself), and one that
   asks every round at its weakest stage's noise is refused once that stage's
   rounds are used. What stays trusted is each stage's Δ₂, the method's public
   constant.

Across runs the node composes by basic composition (Σε, Σδ): valid whatever the
runs' mechanisms, and what a privacy officer can audit from the file alone.

Policy (node-config): ``max-epsilon`` / ``max-delta`` per run,
``max-lifetime-epsilon`` / ``max-lifetime-delta`` over every run in the state
directory ``state-dir``. A lifetime limit without a state directory is refused
(nothing could enforce it). ``policy-file`` names a TOML file holding these limits
and the node's scope and approval rule (:mod:`fedpriv.privacy.node_policy`,
:mod:`fedpriv.privacy.node_approval`); what the node was asked and did is kept in
its audit log (:mod:`fedpriv.privacy.node_audit`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedpriv.atomic import write_text_atomic
from fedpriv.privacy.node_audit import is_hash
from fedpriv.privacy.randomness import GRID

#: Node-config keys of the policy, and where the ledger lives.
POLICY_KEYS = ("max-epsilon", "max-delta", "max-lifetime-epsilon", "max-lifetime-delta")
STATE_DIR = "state-dir"
#: Node-config key naming the node's TOML policy file (:mod:`fedpriv.privacy.node_policy`).
POLICY_FILE = "policy-file"
#: The node ledger's file inside the state directory.
LEDGER_FILE = "fedpriv-node-ledger.json"
#: Environment variable a simulation passes every virtual node's policy in (JSON of the
#: node-config keys; its ``state-dir`` gets ``node-<partition id>`` appended per node).
POLICY_ENV = "FEDPRIV_NODE_POLICY"
#: Relative disagreement tolerated between the server's ε and the node's (the same code).
AGREEMENT = 1e-9


class NodeRefusal(PermissionError):
    """A node's own policy refuses a plan or a query; nothing was read or answered."""


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
        from fedpriv.privacy.node_policy import load_policy_file

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


def declared_plan(
    ledger: Any, *, stage: str, rounds: int | None, stages: list[dict]
) -> dict[str, Any]:
    """What the server declares to the nodes for one strategy: its reserved plan.

    ``ledger`` ``None`` is the non-private reference: ε = ∞, which any policy refuses.
    ``stages``: each Gaussian stage's ``{"noise_multiplier": z, "l2_sensitivity": Δ₂,
    "rounds": T}``.
    """
    if ledger is None:
        return {"stage": stage, "epsilon": math.inf, "delta": 1.0, "rounds": rounds,
                "events": [], "stages": []}  # fmt: skip
    from fedpriv.privacy.events import event_to_dict

    reserved = ledger.planned_items()  # the stage's ledger: fresh (or scoped) at its begin
    return {
        "stage": stage,
        "epsilon": float(ledger.planned_epsilon()),
        "delta": float(ledger.budget.delta),
        "accounting_delta": float(ledger.accounting_delta),
        "rounds": None if rounds is None else int(rounds),
        "events": [[event_to_dict(ev), int(n)] for ev, n in reserved],
        "stages": stages,
    }


def strategy_plan(strategy: Any, ledger: Any, *, stage: str) -> dict[str, Any]:
    """The plan a begun ``strategy`` declares (:func:`declared_plan`): its ledger's
    reservations, its rounds (its own ``rounds``, else its configuration's), and each
    Gaussian stage's (z, Δ₂) for the nodes' checks of distributed shares."""
    from fedpriv.privacy.noise_stage import gaussian_stages  # server side: the accountant

    rounds = getattr(strategy, "rounds", None)
    if rounds is None:
        rounds = getattr(getattr(strategy, "config", None), "rounds", None)
    stages = [
        {
            "noise_multiplier": g.noise_multiplier,
            "l2_sensitivity": g.mechanism.l2_sensitivity,
            "rounds": g.rounds,
        }
        for g in gaussian_stages(strategy)
    ]
    return declared_plan(ledger, stage=stage, rounds=rounds, stages=stages)


def plan_epsilon(plan: Mapping[str, Any]) -> float:
    """ε of a declared plan by the node's own accountant, at the plan's accounting δ."""
    if not plan["events"]:
        return 0.0 if math.isfinite(plan["epsilon"]) else math.inf
    from fedpriv.privacy import accounting
    from fedpriv.privacy.events import event_from_dict

    items = [(event_from_dict(ev), int(n)) for ev, n in plan["events"]]
    return float(accounting.account(items, float(plan["accounting_delta"])).epsilon)


class NodeLedger:
    """One node's ledger: the runs it admitted, persisted as JSON in its state directory."""

    def __init__(
        self, policy: NodePolicy, state_dir: str | Path | None = None, *, data: str = ""
    ) -> None:
        if policy.lifetime and not state_dir:
            raise ValueError(
                f"a lifetime budget needs node-config {STATE_DIR!r} (where the node keeps its "
                "ledger across runs); got none"
            )
        self.policy = policy
        self.path = Path(state_dir) / LEDGER_FILE if state_dir else None
        self._data: dict[str, Any] = {"runs": {}}
        if self.path is not None and self.path.exists():
            self._data = json.loads(self.path.read_text())
        elif data:  # no state directory: the run's own copy (e.g. a Flower node's state)
            self._data = json.loads(data)

    def export(self) -> str:
        """The ledger as JSON (what a stateless runtime keeps between messages)."""
        return json.dumps(self._data, sort_keys=True)

    # -- what it holds ------------------------------------------------------------
    @property
    def runs(self) -> dict[str, Any]:
        return self._data["runs"]

    def lifetime_spend(self) -> tuple[float, float]:
        """(Σε, Σδ) over every run's admitted plans (basic composition across runs)."""
        runs = self.runs.values()
        return sum(r["epsilon"] for r in runs), sum(r["delta"] for r in runs)

    def remaining(self) -> tuple[float, float]:
        """What the lifetime policy still allows: (ε, δ)."""
        eps, delta = self.lifetime_spend()
        return (max(self.policy.max_lifetime_epsilon - eps, 0.0),
                max(self.policy.max_lifetime_delta - delta, 0.0))  # fmt: skip

    def _save(self) -> None:
        # The policy in force with the spend, so the file alone says what is left.
        self._data["policy"] = {
            k: (None if math.isinf(v) else v)
            for k, v in ((k, getattr(self.policy, k.replace("-", "_"))) for k in POLICY_KEYS)
        }
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps(self._data, indent=1, sort_keys=True))

    # -- checks -------------------------------------------------------------------
    def admit_plan(self, run_id: str, plan: Mapping[str, Any]) -> float:
        """Check and charge a declared plan; returns the node's own ε. Raises
        :class:`NodeRefusal` (nothing charged) if it breaks the policy."""
        stage = str(plan["stage"])
        run = self.runs.get(str(run_id), {"stages": {}, "epsilon": 0.0, "delta": 0.0})
        if stage in run["stages"]:
            raise NodeRefusal(f"run {run_id}: stage {stage!r} was already declared; refused")
        if plan.get("rounds") is None:
            raise NodeRefusal(f"run {run_id}: the plan declares no number of rounds; refused")
        if float(plan.get("accounting_delta", 0.0)) > float(plan["delta"]):
            raise NodeRefusal(f"run {run_id}: accounting δ above the plan's δ; refused")
        eps = plan_epsilon(plan)
        claimed = float(plan["epsilon"])
        if not math.isfinite(eps) or abs(eps - claimed) > AGREEMENT * max(1.0, eps):
            raise NodeRefusal(
                f"run {run_id}: the server's ledger says ε = {claimed!r} for its plan, this "
                f"node's says {eps!r}; refused"
            )
        delta, p = float(plan["delta"]), self.policy
        if eps > p.max_epsilon or delta > p.max_delta:
            raise NodeRefusal(
                f"run {run_id}: the plan spends (ε, δ) = ({eps:.6g}, {delta:g}) over this node's "
                f"max-epsilon {p.max_epsilon:g} / max-delta {p.max_delta:g}; refused"
            )
        # The run so far plus this stage (basic composition across stages and runs).
        run_eps, run_delta = run["epsilon"] + eps, run["delta"] + delta
        if run_eps > p.max_epsilon or run_delta > p.max_delta:
            raise NodeRefusal(
                f"run {run_id}: with stage {stage!r} the run spends (ε, δ) = ({run_eps:.6g}, "
                f"{run_delta:g}) over this node's max-epsilon {p.max_epsilon:g} / max-delta "
                f"{p.max_delta:g}; refused"
            )
        spent_eps, spent_delta = self.lifetime_spend()
        if spent_eps + eps > p.max_lifetime_epsilon or spent_delta + delta > p.max_lifetime_delta:
            raise NodeRefusal(
                f"run {run_id}: lifetime spend ({spent_eps:.6g}, {spent_delta:g}) plus this plan's "
                f"({eps:.6g}, {delta:g}) exceeds max-lifetime-epsilon "
                f"{p.max_lifetime_epsilon:g} / max-lifetime-delta {p.max_lifetime_delta:g}; refused"
            )
        run["epsilon"], run["delta"] = run_eps, run_delta
        run["stages"][stage] = {
            "epsilon": eps, "rounds": int(plan["rounds"]), "answered": [],
            # Per Gaussian stage: z, Δ₂, its rounds, and the shares it has covered.
            "noise": [[float(s["noise_multiplier"]), float(s["l2_sensitivity"]),
                       int(s.get("rounds", 0)), 0] for s in plan.get("stages", [])],
        }  # fmt: skip
        self.runs[str(run_id)] = run
        self._save()
        return eps

    def admit_query(
        self,
        run_id: str,
        stage: str,
        round_id: int,
        *,
        share: tuple[float, int, int] | None = None,
    ) -> None:
        """Check one query before any row is read; record it. ``share``: under
        distributed noise, (σ_c in ticks, m survivors, d coordinates) asked of this node."""
        entry = self.runs.get(str(run_id), {"stages": {}})["stages"].get(stage)
        if entry is None:
            raise NodeRefusal(f"run {run_id}: no admitted plan for stage {stage!r}; refused")
        if round_id in entry["answered"]:
            raise NodeRefusal(f"run {run_id}: round {round_id} was already answered; refused")
        if len(entry["answered"]) >= entry["rounds"]:
            raise NodeRefusal(
                f"run {run_id}: round {round_id} would be data round {len(entry['answered']) + 1}"
                f" of a plan declaring {entry['rounds']}; refused"
            )
        if share is not None:
            sigma_c, m, d = share
            have = math.sqrt(m) * sigma_c * GRID
            # The stages whose noise this share meets and whose rounds are not used up;
            # the round counts against the most demanding of them. A server can then
            # not ask every round at its weakest stage's noise: each stage's quota holds.
            met = [
                (z * (l2 + GRID * math.sqrt(d)), i)
                for i, (z, l2, rounds, used) in enumerate(entry["noise"])
                if used < rounds and have >= z * (l2 + GRID * math.sqrt(d)) * (1.0 - 1e-9)
            ]
            if not met:
                raise NodeRefusal(
                    f"run {run_id}: round {round_id} asks for shares giving noise std {have:.6g} "
                    f"with {m} survivors, below every declared stage with rounds left; refused"
                )
            entry["noise"][max(met)[1]][3] += 1
        entry["answered"].append(int(round_id))
        self._save()

    def summary(self) -> dict[str, Any]:
        """What ``fedpriv inspect`` shows: policy, lifetime spend, what remains, per run."""
        eps, delta = self.lifetime_spend()
        rem_eps, rem_delta = self.remaining()
        p = self.policy
        return {
            "policy": {k: getattr(p, k.replace("-", "_")) for k in POLICY_KEYS},
            "lifetime_epsilon": eps,
            "lifetime_delta": delta,
            "remaining_epsilon": rem_eps,
            "remaining_delta": rem_delta,
            "runs": {
                rid: {
                    "epsilon": r["epsilon"],
                    "delta": r["delta"],
                    "rounds_answered": sum(len(s["answered"]) for s in r["stages"].values()),
                }
                for rid, r in self.runs.items()
            },
        }


def node_summary(state_dir: str | Path) -> dict[str, Any]:
    """A node's ledger as ``fedpriv inspect`` shows it, under the policy last saved with it."""
    data = read_ledger(state_dir)
    policy = NodePolicy.from_node_config(data.get("policy", {})) or NodePolicy()
    ledger = NodeLedger(policy, state_dir)
    return {"state_dir": str(state_dir), **ledger.summary()}


def summary_text(summary: Mapping[str, Any]) -> str:
    """The summary as a few lines of text."""

    def num(x: Any) -> str:
        return "none" if x is None or (isinstance(x, float) and math.isinf(x)) else f"{x:.6g}"

    p = summary["policy"]
    lines = [
        f"node ledger in {summary['state_dir']}",
        f"policy: per run ε ≤ {num(p['max-epsilon'])}, δ ≤ {num(p['max-delta'])}; lifetime "
        f"ε ≤ {num(p['max-lifetime-epsilon'])}, δ ≤ {num(p['max-lifetime-delta'])}",
        f"lifetime spend: ε {num(summary['lifetime_epsilon'])}, δ "
        f"{num(summary['lifetime_delta'])} over {len(summary['runs'])} run(s)",
        f"remaining: ε {num(summary['remaining_epsilon'])}, δ {num(summary['remaining_delta'])}",
    ]
    for rid, r in summary["runs"].items():
        lines.append(f"  run {rid}: ε {num(r['epsilon'])}, δ {num(r['delta'])}, "
                     f"{r['rounds_answered']} rounds answered")  # fmt: skip
    return "\n".join(lines)


def read_ledger(state_dir: str | Path) -> dict[str, Any]:
    """The raw node ledger in ``state_dir`` (for ``fedpriv inspect``), or no runs."""
    path = Path(state_dir) / LEDGER_FILE
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}
