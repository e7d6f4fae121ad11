"""The node's own accountant: ε from the stages it enforces, and every query held to them.

The handler here is a stand-in whose reply sensitivity is its query's clip norm
(DP-SGD's shape); the real methods' are tested with their handlers
(``tests/privacy/test_node_stages_*.py``, ``tests/privacy/lying_coordinator/``).
"""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event, pld, rdp

from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import Query, ReplySensitivity
from fedpriv.privacy.node_budget import NodeLedger, NodePolicy, NodeRefusal
from fedpriv.privacy.node_plan import admit_stages, node_epsilon
from fedpriv.privacy.randomness import GRID, rounding_margin

D = 16


class Clipped:
    """A reply whose one-record influence is the query's clip norm C (L2) and √D·C (L1)."""

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        clip = float(query.config["clip_norm"])
        if not (math.isfinite(clip) and clip > 0):
            raise ValueError(f"clip_norm must be finite and > 0; got {clip!r}")
        return ReplySensitivity(stage=str(query.config.get("stage", "steps")), l1=clip * 4, l2=clip)


HANDLER_OF = {"toy": Clipped()}.__getitem__


def _stage(*, z=1.1, q=0.02, rounds=800, clip=3.0, name="steps", **kw) -> NodeStage:
    sigma = z * (clip + rounding_margin(D, "l2"))
    fields = dict(name=name, method="toy", mechanism="gaussian", rounds=rounds,
                  sampling_rate=q, reply_length=D, record_bound=clip,
                  config={"clip_norm": clip, "stage": name}, noise=sigma)  # fmt: skip
    return NodeStage(**{**fields, **kw})


def _plan(*stages: NodeStage, **extra) -> dict:
    return {"stage": "noise", "delta": 1e-5, "accounting_delta": 1e-5,
            "stages": [s.to_dict() for s in stages], **extra}  # fmt: skip


def _query(*, r=0, q=0.02, clip=3.0, d=D, stage="steps") -> Query:
    return Query(round=r, method="toy", sampling_rate=q, reply_length=d, record_bound=clip,
                 config={"clip_norm": clip, "stage": stage})  # fmt: skip


def test_the_nodes_epsilon_equals_an_independent_dp_accounting_computation():
    z, q, steps = 1.1, 0.02, 800
    admitted, eps = admit_stages(_plan(_stage(z=z, q=q, rounds=steps)), HANDLER_OF, run_id="r")
    # Independent: dp_accounting's own PLD and RDP accountants on the same mechanism.
    event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps
    )
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    reference = acc.get_epsilon(1e-5)
    r = rdp.RdpAccountant()
    r.compose(event)
    assert admitted[0].multiplier == pytest.approx(z, rel=1e-12)
    # fedpriv's ledger certifies the smaller of its PLD and RDP bounds.
    assert eps == pytest.approx(min(reference, r.get_epsilon(1e-5)), rel=1e-3)
    assert eps <= r.get_epsilon(1e-5) + 1e-9


def test_declared_events_are_only_a_cross_check_and_a_mismatch_refuses():
    """The review's attack: events say z = 20 (ε ≈ 0.56), the stage says z = 0.02."""
    honest = _stage(z=20.0, q=1.0, rounds=10)
    lying = _stage(z=0.02, q=1.0, rounds=10)
    from fedpriv.privacy.events import event_to_dict

    events = [[event_to_dict(dp_event.GaussianDpEvent(20.0)), 10]]
    _, eps_honest = admit_stages(_plan(honest, events=events), HANDLER_OF, run_id="a")
    assert eps_honest < 1.0
    with pytest.raises(NodeRefusal, match="own accountant"):
        admit_stages(_plan(lying, events=events), HANDLER_OF, run_id="b")
    # Without events the node still computes its own ε: the policy refuses it.
    node = NodeLedger(NodePolicy(max_epsilon=1.0))
    with pytest.raises(NodeRefusal, match="over this node's max-epsilon 1"):
        node.admit_plan("c", _plan(lying), HANDLER_OF)
    assert node_epsilon(admit_stages(_plan(lying), HANDLER_OF, run_id="d")[0], 1e-5) > 1e3


def test_a_query_is_held_to_its_stage_q_clip_length_and_rounds():
    node = NodeLedger(NodePolicy(max_epsilon=10.0))
    node.admit_plan("r", _plan(_stage(rounds=2)), HANDLER_OF)
    for bad, why in [
        (_query(q=1.0), "sampling rate 1.0"),
        (_query(clip=30.0), "over the admitted"),
        (_query(d=D + 1), "reply length"),
        (_query(stage="centre"), "outside every admitted stage"),
    ]:
        with pytest.raises(NodeRefusal, match=why):
            node.admit_query("r", "noise", bad, HANDLER_OF)
    node.admit_query("r", "noise", _query(r=0), HANDLER_OF)
    node.admit_query("r", "noise", _query(r=1, clip=1.0), HANDLER_OF)  # a smaller clip is fine
    with pytest.raises(NodeRefusal, match="data round 3 of a plan declaring 2"):
        node.admit_query("r", "noise", _query(r=2), HANDLER_OF)
    assert node.runs["r"]["stages"]["noise"]["used"] == [2]


def test_a_stage_without_a_mechanism_counts_its_rounds_and_reads_no_row():
    """The review's attack: a stage with no events declaring 100 more rounds."""
    extra = NodeStage(
        name="more", method="toy", mechanism="none", rounds=100, sampling_rate=1.0,
        reply_length=D, record_bound=3.0, config={"clip_norm": 3.0, "stage": "more"},
    )  # fmt: skip
    node = NodeLedger(NodePolicy(max_epsilon=10.0))
    eps = node.admit_plan("r", _plan(_stage(rounds=1), extra), HANDLER_OF)
    node.admit_query("r", "noise", _query(r=0), HANDLER_OF)
    with pytest.raises(NodeRefusal, match="no mechanism"):
        node.admit_query("r", "noise", _query(r=1, q=1.0, stage="more"), HANDLER_OF)
    assert node.runs["r"]["epsilon"] == eps  # nothing more charged, nothing answered


def test_distributed_shares_must_carry_the_stage_noise_for_the_query_length():
    node = NodeLedger(NodePolicy(max_epsilon=10.0))
    (admitted,), _ = admit_stages(_plan(_stage(rounds=3)), HANDLER_OF, run_id="x")
    node.admit_plan("r", _plan(_stage(rounds=3)), HANDLER_OF)
    need = admitted.required_std(D)

    def share(std, m=4):  # σ_c in ticks for m survivors giving ``std``
        return (std / GRID / math.sqrt(m), m)

    node.admit_query("r", "noise", _query(r=0), HANDLER_OF, share=share(need))
    with pytest.raises(NodeRefusal, match="noise shares give std"):
        node.admit_query("r", "noise", _query(r=1), HANDLER_OF, share=share(need / 10))
    # Shares sized for 4 survivors but declared for 2: the node's own m decides.
    with pytest.raises(NodeRefusal, match="noise shares give std"):
        node.admit_query("r", "noise", _query(r=1), HANDLER_OF, share=(share(need)[0], 2))


def test_a_malformed_or_underivable_plan_is_refused_not_crashed():
    for plan in [
        {"stage": "noise", "delta": 1e-5, "stages": []},
        _plan(_stage(config={"clip_norm": float("nan"), "stage": "steps"})),
        {**_plan(_stage()), "stages": [{"name": "steps", "bogus": 1}]},
        _plan(_stage(), rounds=5),
        _plan(_stage(), _stage()),
    ]:
        with pytest.raises(NodeRefusal):
            admit_stages(plan, HANDLER_OF, run_id="m")
    with pytest.raises(NodeRefusal, match="cannot derive"):
        admit_stages(_plan(_stage(method="nope")), HANDLER_OF, run_id="m")


# -- the gate in the ledger: scope, the operator's approval, the audit log -------------
def test_an_operator_approval_lets_one_run_through_and_is_then_spent(tmp_path):
    import threading

    from fedpriv.privacy.node_approval import approve, list_pending
    from fedpriv.privacy.node_audit import plan_hash, verify_audit_log

    policy = NodePolicy(max_epsilon=10.0, require_approval=True, approval_timeout=0.5)
    node = NodeLedger(policy, tmp_path)
    plan = _plan(_stage(rounds=2))
    with pytest.raises(NodeRefusal, match="not approved") as refused:
        node.admit_plan("r1", plan, HANDLER_OF)
    assert refused.value.code == "not_approved" and node.runs == {}
    (pending,) = list_pending(tmp_path)
    assert pending["plan_hash"] == plan_hash(plan) and pending["epsilon"] > 0

    slow = NodeLedger(
        NodePolicy(max_epsilon=10.0, require_approval=True, approval_timeout=30.0), tmp_path
    )
    approver = threading.Timer(0.3, approve, args=(tmp_path, plan_hash(plan)))
    approver.start()
    slow.admit_plan("r2", plan, HANDLER_OF)  # waits for the operator, then admitted
    approver.join()
    assert list(slow.runs) == ["r2"]
    # The approval was for that run: the same plan again waits, and expires.
    with pytest.raises(NodeRefusal, match="not approved"):
        NodeLedger(policy, tmp_path).admit_plan("r3", plan, HANDLER_OF)
    kinds = [e["kind"] for e in slow.audit.entries()]
    assert kinds == ["plan-refused", "approval", "plan-admitted", "plan-refused"]
    assert verify_audit_log(tmp_path).ok


def test_the_policy_scope_is_checked_before_the_plan_is_charged(tmp_path):
    node = NodeLedger(NodePolicy(max_epsilon=10.0, methods=("boosting",)), tmp_path)
    with pytest.raises(NodeRefusal, match="method 'toy' is not allowed") as refused:
        node.admit_plan("r", _plan(_stage()), HANDLER_OF, columns=("a",))
    assert refused.value.code == "out_of_scope" and node.runs == {}
    cols = NodeLedger(NodePolicy(max_epsilon=10.0, columns=("a", "y")), tmp_path / "c")
    with pytest.raises(NodeRefusal, match=r"columns \['b'\] are not allowed"):
        cols.admit_plan("r", _plan(_stage()), HANDLER_OF, columns=("a", "b", "y"))
    with pytest.raises(NodeRefusal, match="columns this plan reads are unknown"):
        cols.admit_plan("r", _plan(_stage()), HANDLER_OF)
    assert cols.admit_plan("r", _plan(_stage()), HANDLER_OF, columns=("a", "y")) > 0


def test_distributed_shares_claim_no_amplification_from_the_servers_coins():
    """A stage declaring ρ 0.1 under tight accounting: the node's ε would count on coins
    the server draws (and could ignore); a distributed query of it is refused."""
    stage = _stage(rounds=2, participation=0.1, accounting="tight")
    node = NodeLedger(NodePolicy(max_epsilon=10.0))
    node.admit_plan("r", _plan(stage), HANDLER_OF)
    (admitted,), _ = admit_stages(_plan(stage), HANDLER_OF, run_id="x")
    need = admitted.required_std(D)
    with pytest.raises(NodeRefusal, match="participation"):
        node.admit_query("r", "noise", _query(r=0), HANDLER_OF, share=(need / GRID / 2, 4))
    node.admit_query("r", "noise", _query(r=0), HANDLER_OF)  # central: the server's coins
