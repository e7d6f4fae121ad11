"""A node's own ε against an independent dp-accounting computation, method by method.

For every built-in method at its registry defaults (the random forest in each of its
leaf mechanisms) and for the main job (``dp_gam`` at the preset ``main-job`` of
:mod:`fedpriv.federation.presets`, on Diabetes 130-US, K = 5, ε = 2, δ = 1e-5, the
launcher's declared ``max-records``),
the strategy is begun on public inputs only and its declared plan is admitted as a
node admits it (:func:`fedpriv.privacy.node_plan.admit_stages` with the method's real
client half). That ε must equal

* a reference that reads only the declared stages and the handler's
  ``reply_sensitivity`` from fedpriv, and rebuilds everything else from the documented
  rules (:mod:`fedpriv.privacy.accounting`'s docstring) on dp-accounting's public API:
  the multiplier z = σ/(Δ₂ + γ√d) (Laplace: b/(Δ₁ + γd)); a PLD from
  ``from_gaussian_mechanism`` / ``from_laplace_mechanism`` / ``from_privacy_parameters``
  composed by the PLD's own ``compose`` / ``self_compose`` (pessimistic, at fedpriv's
  value discretisation); an RDP figure from ``RdpAccountant`` with bounded-range ε as
  ε²/8-zCDP, pure ε as ε²/2-zCDP and Poisson(q) amplification ε' = log(1+q(e^ε−1))
  written out here; approximate-DP pairs by basic composition (their δ taken off the
  accounting δ first, their ε added); the certified figure is the minimum of the two;
* the server ledger's planned ε, to the node's cross-check tolerance.

Both to a relative 1e-6. A synthetic plan (a stub client half) reaches the rules no
built-in default plan does: bounded-range and pure stages at q < 1 (charged their
declared per-use ε), a Laplace extra release, two scaled releases of one sample (not
amplified apart: its own test, with the twin that restores the old rule), a
Poisson-sampled Laplace (which RDP cannot account); the accountant's own amplified
pure / bounded-range rule is checked on its events. The last test is the twin of the
main ones: the busiest stage's release made 1e-3 weaker moves the reference past the
tolerance, so the equalities have power.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
from dp_accounting import dp_event

from fedpriv.federation.node_stage import NodeStage, StageRelease
from fedpriv.federation.planning import begin_strategy
from fedpriv.federation.protocol import ReplySensitivity
from fedpriv.methods import StrategyContext, get_method
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.node_budget import strategy_plan
from fedpriv.privacy.node_plan import CROSS_CHECK, admit_stages
from tests.keys import key_for

#: The agreement asked of every figure (the node's cross-check tolerance).
from tests.privacy.node_reference import (
    GAMMA,
    Release,
    pure_release,
    reference,
    releases,
)

RELATIVE = 1e-6
#: The federation every case runs in: the main job's (Diabetes 130-US, K = 5).
DATASET, CLIENTS, EPSILON, DELTA = "diabetes130", 5, 2.0, 1e-5

CASES = {
    "boosting": ("boosting", {}),
    "dp_gam": ("dp_gam", {}),
    "logistic": ("logistic", {}),
    "mlp": ("mlp", {}),
    "random_forest": ("random_forest", {}),  # Gaussian leaves: the default
    "random_forest-exponential": ("random_forest", {"leaf_mechanism": "exponential"}),
    "random_forest-laplace": ("random_forest", {"leaf_mechanism": "laplace"}),
    "lumberjack": ("lumberjack", {}),
    "bdpe": ("bdpe", {}),
}
MAIN_JOB = "main-job"


@dataclass(frozen=True)
class Case:
    name: str
    stages: list[NodeStage]
    handler: object
    accounting_delta: float
    node: float
    server: float


# -- building and beginning the strategies (public inputs only) ---------------------------
def _main_job_settings():
    from fedpriv.server.simulate import resolve_simulation

    overrides = {"method": "dp_gam", "dataset": DATASET, "num-clients": CLIENTS,
                 "epsilon": EPSILON, "delta": DELTA}  # fmt: skip
    return resolve_simulation(overrides).settings


def _admitted(name: str, method: str, strategy, ledger: PrivacyLedger, n_features: int) -> Case:
    begin_strategy(strategy, n_features=n_features, ledger=ledger, seed=0, secret_key=key_for(0))
    plan = strategy_plan(strategy, ledger, stage="noise")
    handler = get_method(method).client_handler()
    _, node = admit_stages(plan, lambda _m: handler, run_id=name)
    return Case(
        name=name,
        stages=[NodeStage.from_dict(s) for s in plan["stages"]],
        handler=handler,
        accounting_delta=float(plan["accounting_delta"]),
        node=float(node),
        server=float(ledger.planned_epsilon()),
    )


def build_cases() -> dict[str, Case]:
    """Every case begun and admitted (module docstring)."""
    from fedpriv.server.app import build_strategy
    from fedpriv.server.dp_evaluation import scoped_ledgers

    from fedpriv.data.node import DataSource, record_bound, run_schema

    settings = _main_job_settings()
    assert dict(
        column_order=settings.config.column_order, learning_rate=settings.config.learning_rate,
        lam=settings.config.lam, bins=settings.config.bins,
    ) == {"column_order": "gain", "learning_rate": 0.5, "lam": 10.0, "bins": 8}  # fmt: skip
    schema = run_schema(settings.schema, settings.dataset)
    max_records = record_bound(DataSource.of(settings))  # the launcher's declared bound
    n_records = CLIENTS * max_records
    out: dict[str, Case] = {}
    for name, (method, values) in CASES.items():
        record = get_method(method)
        context = StrategyContext(
            schema=schema,
            n_features=schema.n_features,
            n_records=n_records,
            n_classes=len(schema.target.classes),
        )
        strategy = record.build_strategy(record.make_config(**values), context)
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=EPSILON, delta=DELTA))
        out[name] = _admitted(name, method, strategy, ledger, schema.n_features)
    # The main job exactly as the ServerApp builds it (fedpriv.server.app.train).
    strategy = build_strategy(settings, schema, n_records=n_records, n_features=schema.n_features)
    run_ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=settings.epsilon, delta=settings.delta))
    train_ledger, _ = scoped_ledgers(run_ledger, settings)
    out[MAIN_JOB] = _admitted(MAIN_JOB, "dp_gam", strategy, train_ledger, schema.n_features)
    return out


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return build_cases()


def reference_of(case: Case) -> tuple[float, float, float]:
    items = [r for s in case.stages for r in releases(s, case.handler)]
    return reference(items, case.accounting_delta)


# -- the tests -----------------------------------------------------------------------------
ALL = [*CASES, MAIN_JOB]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("name", ALL)
def test_node_epsilon_equals_the_independent_reference(cases, name):
    case = cases[name]
    assert case.stages and math.isfinite(case.node) and case.node > 0
    ref, eps_pld, eps_rdp = reference_of(case)
    assert case.node == pytest.approx(ref, rel=RELATIVE, abs=0.0), (name, eps_pld, eps_rdp)


@pytest.mark.parametrize("name", ALL)
def test_node_epsilon_equals_the_server_ledger(cases, name):
    case = cases[name]
    assert case.node == pytest.approx(case.server, rel=CROSS_CHECK, abs=0.0)
    assert case.server <= EPSILON * (1 + 1e-12)  # the plan fits the run's budget


def test_the_main_job_is_the_launchers(cases):
    main, default = cases[MAIN_JOB], cases["dp_gam"]
    assert main.accounting_delta == DELTA
    assert [(s.name, s.rounds) for s in main.stages] == [("intercept", 1), ("term", 70)]
    # The main job changes no stage: its 8 bins leave the longest term reply (the widest
    # categorical column's) and the plan's noise as at the learner's defaults.
    assert main.stages == default.stages
    assert main.node == default.node


class _Stub:
    """A client half whose query kind is ``config["kind"]`` and whose Δ₁ = 2·bound,
    Δ₂ = bound: enough for a node to derive any stage."""

    method = "stub"

    def reply_sensitivity(self, query):
        b = float(query.record_bound)
        return ReplySensitivity(stage=str(query.config["kind"]), l1=2 * b, l2=b)


def _stub_stage(kind: str, mechanism: str, rounds: int, q: float, noise: float, **kw):
    return NodeStage(name=kind, method="stub", mechanism=mechanism, rounds=rounds,
                     sampling_rate=q, reply_length=kw.pop("d", 10), record_bound=1.5,
                     config={"kind": kind}, noise=noise, **kw)  # fmt: skip


SYNTHETIC = [
    _stub_stage("sgd", "gaussian", 100, 0.05, 2.4, d=300),
    _stub_stage("br", "bounded_range", 5, 0.1, 0.3, unit=3.0),
    _stub_stage(
        "pure",
        "pure",
        3,
        1.0,
        0.05,
        unit=3.0,
        extra=(StageRelease(mechanism="laplace", noise=60.0),),
    ),
    _stub_stage("approx", "approx", 4, 1.0, 0.1, delta=1e-7, unit=3.0, uses=2),
]
POISSON_LAPLACE = _stub_stage("lap", "laplace", 10, 0.2, 30.0)


TWO_GAUSSIANS = _stub_stage(
    "pair", "gaussian", 2, 0.3, 4.5, extra=(StageRelease(mechanism="gaussian", noise=4.5),)
)


def _node(stages) -> float:
    stub = _Stub()
    plan = {"stage": "noise", "accounting_delta": DELTA,
            "stages": [s.to_dict() for s in stages]}  # fmt: skip
    return admit_stages(plan, lambda _m: stub, run_id="synthetic")[1]


def test_two_scaled_releases_of_one_sample_are_not_amplified_apart(monkeypatch):
    # Both Gaussians of a round read one Poisson sample: the joint release is one
    # subsampled Gaussian at z/√2 (two Gaussians of multiplier z on the same shift).
    from fedpriv.privacy import node_plan

    z = TWO_GAUSSIANS.noise / (1.5 + GAMMA * math.sqrt(TWO_GAUSSIANS.reply_length))
    joint = reference([Release("gaussian", 2, q=0.3, z=z / math.sqrt(2))], DELTA)[0]
    node = _node([TWO_GAUSSIANS])
    assert node >= joint * (1 - RELATIVE)
    unamplified = reference([Release("gaussian", 2, z=z), Release("gaussian", 2, z=z)], DELTA)
    assert node == pytest.approx(unamplified[0], rel=RELATIVE, abs=0.0)
    # Twin: amplifying each release apart (the old rule) understates the joint release.
    release_events = node_plan._release_events
    monkeypatch.setattr(
        node_plan,
        "_release_events",
        lambda st, r, m, amplify=True: release_events(st, r, m, amplify=True),
    )
    assert _node([TWO_GAUSSIANS]) < 0.9 * joint  # 0.91 against 1.12


@pytest.mark.parametrize(("kind", "q"), [("bounded_range", 0.1), ("pure", 0.2), ("pure", 1.0)])
def test_the_accountants_pure_and_bounded_range_rules(kind, q):
    # accounting.py's table on its own events (no node stage declares them sampled):
    # ε-BR ⇒ ε-DP pair and ε²/8-zCDP; ε-DP ⇒ ε²/2-zCDP; Poisson(q): ε' = log(1+q(e^ε−1)).
    from fedpriv.privacy import BoundedRangeDpEvent, PureDpEvent, account

    eps, n = 0.3, 40
    leaf = BoundedRangeDpEvent(eps) if kind == "bounded_range" else PureDpEvent(eps)
    event = dp_event.PoissonSampledDpEvent(q, leaf) if q < 1.0 else leaf
    ours = account([(event, n)], DELTA)
    ref, eps_pld, eps_rdp = reference([pure_release(kind, eps, q, n)], DELTA)
    assert ours.epsilon_pld == pytest.approx(eps_pld, rel=RELATIVE, abs=0.0)
    assert ours.epsilon_rdp == pytest.approx(eps_rdp, rel=RELATIVE, abs=0.0)
    assert ours.epsilon == pytest.approx(ref, rel=RELATIVE, abs=0.0)


@pytest.mark.parametrize("with_laplace", [False, True], ids=["rdp-finite", "poisson-laplace"])
def test_rules_no_default_plan_reaches(with_laplace):
    stages = [*SYNTHETIC, POISSON_LAPLACE] if with_laplace else SYNTHETIC
    node = _node(stages)
    case = Case("synthetic", stages, _Stub(), DELTA, node, math.nan)
    ref, eps_pld, eps_rdp = reference_of(case)
    assert math.isinf(eps_rdp) == with_laplace  # RDP has no Poisson-sampled Laplace rule
    assert node == pytest.approx(ref, rel=RELATIVE, abs=0.0), (eps_pld, eps_rdp)


@pytest.mark.parametrize("name", ["logistic", "bdpe", "random_forest-exponential", "lumberjack"])
def test_the_reference_has_power(cases, name):
    # Twin: the busiest stage's release made 1e-3 weaker (less noise; a larger ε per use)
    # moves the reference well past the tolerance, so the equalities above would catch a
    # node (or a server) that accounted it so.
    case = cases[name]
    i = max(
        (i for i, s in enumerate(case.stages) if s.mechanism != "approx"),
        key=lambda i: case.stages[i].rounds,
    )
    stage = case.stages[i]
    weaker = 1 - 1e-3 if stage.mechanism in ("gaussian", "laplace") else 1 + 1e-3
    tampered = list(case.stages)
    tampered[i] = dataclasses.replace(stage, noise=stage.noise * weaker)
    ref, _, _ = reference_of(dataclasses.replace(case, stages=tampered))
    assert ref > case.node * (1 + 10 * RELATIVE), (name, stage.name, ref, case.node)
