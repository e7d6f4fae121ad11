"""Node-enforced budgets: each hospital keeps its own ledger and refuses, failing closed.

The server's ledger (:mod:`fedpriv.privacy.ledger`) guards the run's budget, but a
hospital that trusts it trusts the server. Here each node keeps a ledger of its
own, persisted in its state directory across runs, and answers nothing its own
policy does not allow:

1. **The plan.** After a strategy reserves its whole plan, the server declares it
   to every node as stages (:func:`~fedpriv.privacy.node_declaration.strategy_plan`,
   :class:`~fedpriv.federation.node_stage.NodeStage`): per stage the method, the
   kind of query, the sampling rate, the settings that fix one record's
   influence, the mechanism and its absolute noise, the rounds. The node derives
   each stage's sensitivity and event itself and computes ε with its own
   accountant (:mod:`fedpriv.privacy.node_plan`); the server's declared events
   and ε are only a cross-check, and a disagreement refuses the plan. It refuses
   a plan whose ε or δ exceed its per-run policy, or whose lifetime spend plus
   this run's would exceed its lifetime policy. An admitted plan is charged in
   full, at once, to the node's persistent ledger: a run that stops early has
   still spent what it could have. A later stage of the same run (the DP
   evaluation, on its own scoped ledger) declares its own plan; a run is
   charged the sum of its stages' (ε, δ).
2. **Each query**, *before* a row is read: a run or stage it never admitted, a
   round it already answered and any round beyond the declared count are
   refused; the query must belong to an admitted stage with rounds left, at that
   stage's sampling rate, within its reply length and sensitivity, and under
   distributed noise the share the node adds must carry the stage's noise
   (:func:`fedpriv.privacy.node_plan.match_query`).

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.atomic import write_text_atomic
from fedpriv.privacy.node_approval import (
    await_approval,
    consume,
    plan_summary,
    record_pending,
)
from fedpriv.privacy.node_audit import AuditLog, plan_hash
from fedpriv.privacy.node_declaration import declared_plan, strategy_plan  # re-exported
from fedpriv.privacy.node_plan import (
    AdmittedStage,
    HandlerOf,
    NodeRefusal,
    admit_stages,
    match_query,
    per_unit,
)
from fedpriv.privacy.node_policy import (
    POLICY_ENV,
    POLICY_FILE,
    POLICY_KEYS,
    STATE_DIR,
    NodePolicy,
    check_plan_scope,
    node_policy_config,
)
from fedpriv.privacy.randomness import GRID

#: The node ledger's file inside the state directory.
LEDGER_FILE = "fedpriv-node-ledger.json"
#: The method name of the DP federated evaluation's queries (``fedpriv.clients.evaluation``).
EVALUATION = "evaluation"

__all__ = [
    "LEDGER_FILE",
    "POLICY_ENV",
    "POLICY_FILE",
    "POLICY_KEYS",
    "STATE_DIR",
    "NodeLedger",
    "NodePolicy",
    "NodeRefusal",
    "declared_plan",
    "node_policy_config",
    "strategy_plan",
]


class NodeLedger:
    """One node's ledger: the runs it admitted, persisted as JSON in its state directory."""

    def __init__(
        self,
        policy: NodePolicy,
        state_dir: str | Path | None = None,
        *,
        data: str = "",
        unit_records: int = 1,
    ) -> None:
        if policy.lifetime and not state_dir:
            raise ValueError(
                f"a lifetime budget needs node-config {STATE_DIR!r} (where the node keeps its "
                "ledger across runs); got none"
            )
        self.policy, self.unit_records = policy, int(unit_records)  # m: Δ is then a unit's
        self.path = Path(state_dir) / LEDGER_FILE if state_dir else None
        self.audit = AuditLog(state_dir) if state_dir else None
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

    # -- the audit log ------------------------------------------------------------
    def note(self, kind: str, **fields: Any) -> None:
        """Append one entry to the node's audit log (none without a state directory)."""
        if self.audit is not None:
            self.audit.append(kind, **fields)

    # -- checks -------------------------------------------------------------------
    def admit_plan(
        self,
        run_id: str,
        plan: Mapping[str, Any],
        handler_of: HandlerOf,
        *,
        columns: Sequence[str] | None = None,
    ) -> float:
        """Check and charge a declared plan; returns the node's own ε. Raises
        :class:`NodeRefusal` (nothing charged) if it breaks the policy; either way the
        audit log records it with the plan's hash.

        ``handler_of(method)``: this node's client half of a method, from which it
        derives every stage's sensitivity (:mod:`fedpriv.privacy.node_plan`).
        ``columns``: the schema columns the run would have this node read (checked
        against the policy's ``columns``; ``None``: unknown, refused by such a policy).
        With ``require-approval`` the plan waits, bounded, for the operator's approval
        of its hash (:mod:`fedpriv.privacy.node_approval`) before it is charged.
        """
        digest = plan_hash(plan)
        handler_of = per_unit(handler_of, self.unit_records)
        try:
            eps, admitted = self._admit(str(run_id), plan, handler_of, columns, digest)
        except NodeRefusal as err:
            self.note("plan-refused", plan_hash=digest, run=str(run_id), reason=str(err))
            raise
        # Logged after the ledger is saved: an admission in the log and not in the ledger
        # is what a rolled-back ledger looks like (fedpriv inspect).
        self.note(
            "plan-admitted", plan_hash=digest, run=str(run_id), stage=str(plan.get("stage", "")),
            method=sorted({a.stage.method for a in admitted}),
            stages=[a.stage.name for a in admitted], epsilon=eps, delta=float(plan["delta"]),
        )  # fmt: skip
        return eps

    def _scope_and_approval(
        self,
        run_id: str,
        plan: Mapping[str, Any],
        admitted: Sequence[AdmittedStage],
        eps: float,
        columns: Sequence[str] | None,
        digest: str,
    ) -> None:
        """The policy's scope (methods, columns), then the data owner's approval."""
        p = self.policy
        for method in sorted({a.stage.method for a in admitted} - {EVALUATION}):
            check_plan_scope(p, method=method, columns=list(columns or ()))
        if p.columns is not None and columns is None:
            raise NodeRefusal(f"run {run_id}: the columns this plan reads are unknown; refused")
        if not p.require_approval:
            return
        if self.audit is None or self.path is None:
            raise NodeRefusal(f"run {run_id}: approval needs node-config {STATE_DIR!r}; refused")
        state = self.path.parent
        record_pending(state, digest, plan_summary(run_id, plan, epsilon=eps))
        who = await_approval(state, p, digest)
        if who == "policy":
            self.note("approval", plan_hash=digest, by="policy")
        else:  # the operator approved this run: the same plan again needs a new approval
            consume(state, digest)

    def _admit(
        self,
        run_id: str,
        plan: Mapping[str, Any],
        handler_of: HandlerOf,
        columns: Sequence[str] | None,
        digest: str,
    ) -> tuple[float, list[AdmittedStage]]:
        stage = str(plan.get("stage", ""))
        run = self.runs.get(str(run_id), {"stages": {}, "epsilon": 0.0, "delta": 0.0})
        if stage in run["stages"]:
            raise NodeRefusal(f"run {run_id}: stage {stage!r} was already declared; refused")
        try:
            delta = float(plan["delta"])
        except (KeyError, TypeError, ValueError):
            raise NodeRefusal(f"run {run_id}: the plan declares no δ; refused") from None
        if not math.isfinite(float(plan.get("epsilon", 0.0))) or not plan.get("stages"):
            # A non-private run: only a node whose operator set no limit at all answers it.
            if self.policy != NodePolicy():
                raise NodeRefusal(f"run {run_id}: a non-private plan (no noise stages); refused")
            run["epsilon"], run["delta"] = math.inf, 1.0
            run["stages"][stage] = {"epsilon": math.inf, "rounds": None, "answered": [],
                                    "admitted": [], "used": []}  # fmt: skip
            self.runs[str(run_id)] = run
            self._save()
            return math.inf, []
        if float(plan.get("accounting_delta", 0.0)) > delta:
            raise NodeRefusal(f"run {run_id}: accounting δ above the plan's δ; refused")
        admitted, eps = admit_stages(plan, handler_of, run_id=str(run_id))
        p = self.policy
        if eps > p.max_epsilon or delta > p.max_delta:
            raise NodeRefusal(
                f"run {run_id}: the plan spends (ε, δ) = ({eps:.6g}, {delta:g}) over this node's "
                f"max-epsilon {p.max_epsilon:g} / max-delta {p.max_delta:g}; refused",
                code="over_budget",
            )
        # The run so far plus this stage (basic composition across stages and runs).
        run_eps, run_delta = run["epsilon"] + eps, run["delta"] + delta
        if run_eps > p.max_epsilon or run_delta > p.max_delta:
            raise NodeRefusal(
                f"run {run_id}: with stage {stage!r} the run spends (ε, δ) = ({run_eps:.6g}, "
                f"{run_delta:g}) over this node's max-epsilon {p.max_epsilon:g} / max-delta "
                f"{p.max_delta:g}; refused",
                code="over_budget",
            )
        spent_eps, spent_delta = self.lifetime_spend()
        if spent_eps + eps > p.max_lifetime_epsilon or spent_delta + delta > p.max_lifetime_delta:
            raise NodeRefusal(
                f"run {run_id}: lifetime spend ({spent_eps:.6g}, {spent_delta:g}) plus this plan's "
                f"({eps:.6g}, {delta:g}) exceeds max-lifetime-epsilon "
                f"{p.max_lifetime_epsilon:g} / max-lifetime-delta {p.max_lifetime_delta:g}; "
                "refused",
                code="over_budget",
            )
        self._scope_and_approval(run_id, plan, admitted, eps, columns, digest)
        run["epsilon"], run["delta"] = run_eps, run_delta
        run["stages"][stage] = {
            "epsilon": eps,
            "rounds": sum(a.stage.rounds for a in admitted),
            "answered": [],
            # What the node derived itself, and each stage's rounds used so far.
            "admitted": [a.to_dict() for a in admitted],
            "used": [0] * len(admitted),
        }
        self.runs[str(run_id)] = run
        self._save()
        return eps, admitted

    def admit_query(
        self,
        run_id: str,
        stage: str,
        query: Any,
        handler_of: HandlerOf,
        *,
        share: tuple[float, int] | None = None,
    ) -> AdmittedStage | None:
        """Check one query before any row is read; record it (ledger and audit log).
        ``share``: under distributed noise, (σ_c in grid ticks, m survivors) this node is
        asked to add. Returns the admitted stage it belongs to (``None``: an admitted
        non-private run)."""
        where = {"run": str(run_id), "stage": stage, "round": int(query.round)}
        handler_of = per_unit(handler_of, self.unit_records)  # a unit's sensitivities
        try:
            found = self._admit_query(str(run_id), stage, query, handler_of, share)
        except NodeRefusal as err:
            self.note("query-refused", **where, reason=str(err))
            raise
        self.note("query-answered", **where, q=float(query.sampling_rate),
                  share_std=None if share is None else float(share[0]) * GRID)  # fmt: skip
        return found

    def _admit_query(
        self,
        run_id: str,
        stage: str,
        query: Any,
        handler_of: HandlerOf,
        share: tuple[float, int] | None,
    ) -> AdmittedStage | None:
        entry = self.runs.get(str(run_id), {"stages": {}})["stages"].get(stage)
        if entry is None:
            raise NodeRefusal(f"run {run_id}: no admitted plan for stage {stage!r}; refused")
        round_id = int(query.round)
        if round_id in entry["answered"]:
            raise NodeRefusal(
                f"run {run_id}: round {round_id} was already answered; refused", code="outside_plan"
            )
        if entry["rounds"] is None:  # an admitted non-private run: no stage to hold it to
            entry["answered"].append(round_id)
            self._save()
            return None
        if len(entry["answered"]) >= entry["rounds"]:
            raise NodeRefusal(
                f"run {run_id}: round {round_id} would be data round {len(entry['answered']) + 1}"
                f" of a plan declaring {entry['rounds']}; refused",
                code="outside_plan",
            )
        admitted = [AdmittedStage.from_dict(a) for a in entry["admitted"]]
        try:
            i = match_query(admitted, entry["used"], query, handler_of, share=share)
        except NodeRefusal as err:
            raise NodeRefusal(f"run {run_id}: {err}; refused", code="outside_plan") from None
        entry["used"][i] += 1
        entry["answered"].append(round_id)
        self._save()
        return admitted[i]

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


def read_ledger(state_dir: str | Path) -> dict[str, Any]:
    """The raw node ledger in ``state_dir`` (for ``fedpriv inspect``), or no runs."""
    path = Path(state_dir) / LEDGER_FILE
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}
