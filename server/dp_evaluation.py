"""DP federated evaluation in a Flower run: its share of the budget and its one round.

Without public rows to score (no ``eval-path``, not a bundled corpus), the
model can only be evaluated on the nodes' own held-out rows, and anything
computed from those is a release. With ``eval-epsilon`` > 0 the run does it
as one more round after training (:mod:`fedpriv.strategies.evaluation`,
:mod:`fedpriv.clients.evaluation`): every node scores its held-out rows with the
released model and uploads a per-class histogram over public bins through
the secure-aggregation shim; the server adds Gaussian noise to the sum
through the run's ledger and reports AUC, Brier score and accuracy with
their stated errors (:mod:`fedpriv.evaluation.dp`).

**Budget.** The run's (ε, δ) is split before anything is calibrated: the
evaluation gets (ε_e, δ_e) with ε_e = ``eval-epsilon`` and δ_e = δ·ε_e/ε,
training the rest, (ε − ε_e, δ − δ_e). Each part is a scope of the run's
ledger (:meth:`~fedpriv.privacy.PrivacyLedger.scope`), so each reservation
is checked against its part and against the whole, and the privacy report
accounts both; by basic composition (Dwork & Roth 2014, Thm. 3.16) the two
parts fit (ε, δ), and the PLD figure of the whole is tighter still.
"""

from __future__ import annotations

import logging
from typing import Any

from fedpriv.server.grid_runtime import GridRuntime
from fedpriv.strategies.evaluation import EvaluationConfig, EvaluationStrategy

from fedpriv.data.node import run_schema
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.randomness import SecretKey

log = logging.getLogger(__name__)

#: The server's private noise stream of the evaluation (training's is "noise").
NOISE_STREAM = "evaluation-noise"


def budget_split(s: RunSettings) -> tuple[PrivacyBudget, PrivacyBudget | None]:
    """(training's budget, the evaluation's or ``None``) from the run's (ε, δ)."""
    if not s.private or not s.eval_epsilon:
        return PrivacyBudget(epsilon=s.epsilon, delta=s.delta), None
    eps, dlt = s.training_budget  # the one split (RunSettings.training_budget)
    evaluation = PrivacyBudget(epsilon=s.eval_epsilon, delta=s.delta * s.eval_epsilon / s.epsilon)
    return PrivacyBudget(epsilon=eps, delta=dlt), evaluation


def scoped_ledgers(
    ledger: PrivacyLedger | None, s: RunSettings
) -> tuple[PrivacyLedger | None, PrivacyLedger | None]:
    """The ledgers training and the evaluation charge: scopes of the run's ``ledger``
    when the evaluation takes a share, else the run's ledger and ``None``."""
    training, evaluation = budget_split(s)
    if ledger is None or evaluation is None:
        return ledger, None
    return ledger.scope(training), ledger.scope(evaluation)


def not_run(reason: str) -> dict[str, Any]:
    return {"evaluated": False, "reason": reason}


def run_dp_evaluation(
    runtime: GridRuntime,
    model: Any,
    s: RunSettings,
    ledger: PrivacyLedger,
    *,
    n_features: int,
    n_records: int,
    secret_key: SecretKey,
) -> dict[str, Any]:
    """The evaluation's round on the training run's connected ``runtime``.

    Round index ``s.rounds`` (training used 0..T−1, so its secure-aggregation
    masks and participation coins are fresh); ``n_records`` is the public bound
    on all held-out rows, for the range check. Returns the metrics.json section.
    """
    if model is None:
        return not_run("no model was released")
    strategy = EvaluationStrategy(
        EvaluationConfig(),
        model_method=s.method,
        model_arrays=model.to_arrays(),
        n_records=n_records,
        round_index=s.rounds,
        # A unit's held-out rows are bounded as its training rows: m counts at most.
        unit_records=run_schema(s.schema, s.dataset).unit_records,
    )
    runtime.begin(
        strategy, n_features=n_features, ledger=ledger, secret_key=secret_key,
        noise_stream=NOISE_STREAM,
    )  # fmt: skip
    query = strategy.next_query()
    planned, messages = runtime.plan_round(query)
    replies = runtime.grid.send_and_receive(messages, timeout=s.round_timeout) if messages else []
    aggregate = runtime.finish_round(planned, replies)
    released = runtime.engine.deliver(strategy, query, aggregate)
    result = strategy.result()
    if not released or result is None:
        return not_run("the evaluation round released nothing (too few replies or discarded)")
    mech = strategy.mechanism
    return {
        "evaluated": True,
        "epsilon": s.eval_epsilon,
        "delta": ledger.budget.delta,
        "noise_std": mech.std,
        "replies": planned.replies,
        "asked": len(planned.asked),
        "alpha": strategy.config.alpha,
        **result.as_dict(),
        # The release itself: the estimates and their errors are functions of it.
        "bins": result.bins,
        "histogram": [float(v) for v in result.histogram],
    }
