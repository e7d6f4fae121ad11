"""Held-out scoring, private folds and the per-fold budget of ``fedpriv cv``.

Scoring. :func:`held_out_scores` scores a fitted estimator on held-out rows: the
test file of ``fedpriv run --train/--test``, the test split of ``run --csv``, a fold
of ``cv``. These are the data owner's own rows, scored where they are, and the
figures go to the owner's terminal and ``--out`` folder: a public evaluation of
the user's data by the user, not a release to anyone else. The base-rate Brier
score is the Brier score of the constant predictor of the *held-out rows' own*
class rates (:func:`fedpriv.evaluation.metrics.base_rate_brier` on them alone): it
reads nothing of the training rows.

Folds. :func:`assign_folds` gives each row a fold drawn uniformly from
{0, …, k−1} with a private CSPRNG key, independently of every other row: no
count decides where a row goes (a permutation cut into k equal parts would let
the row count set every fold's boundary), and a row's fold is hidden from anyone
without the key. Fold sizes are never printed nor written.

Budget. The user's (ε, δ) is the budget of the *whole* cross-validation. Each
record is in k − 1 of the k training sets, so by sequential composition the spend
is that of the k − 1 fits holding it; ``cv`` charges all k fits to one
:class:`~fedpriv.privacy.PrivacyLedger` (an upper bound: every record as if in
every fit, and what one ledger can state without tracking which fit holds
whom). Each fold's fit is calibrated to (ε_f, δ/k): a fit's approximate-DP parts
(Lumberjack's structure, (ε₁, δ₁)) compose by adding their δ, so k of them at
δ/k fit in δ; ε_f is the largest per-fold ε (:func:`fold_epsilon`) at which the
PLD composition of the k fits' planned events, with whatever the one ledger
already holds (the record count), lies in [(1 − rtol)·ε, ε], rtol = 1 %.

A fit's planned events come from the method's own code (:func:`fit_plan`): its
strategy is built with the fit's public context (schema, features, classes, the
public record bound) and started against a throwaway ledger of budget (ε_f,
δ/k); what the strategy reserves there is what its fit reserves, the noise being
calibrated to the budget alone. No row is read. The fits then spend what was
planned, and the one ledger's ε is the planned one (less where a fit spends less
than it reserved: distributed noise with no dropout). ε_f lies above ε/k (PLD
composition beats basic) and may pass ε when the per-fold δ/k is what binds;
ε_f = ε for each fold would, as a rule, spend well over ε: the one ledger refuses
the fold that would pass it, before its noise.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from fedpriv.server.fit_size import PublicSize

from fedpriv.federation.settings import SettingError
from fedpriv.privacy.scale_search import OutOfReach, largest_within

#: The composed ε lands in [(1 − RTOL)·ε, ε].
RTOL = 0.01
#: Smallest per-fold share ε_f/ε the search tries before calling the plan infeasible.
MIN_SHARE = 1e-4
#: Largest: past it a plan's ε is taken as saturated (the search stops there).
MAX_SHARE = 64.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class FoldBudget:
    """Each fold's (``epsilon``, ``delta``) and the one ledger's planned ε at them
    (``planned``, ≤ ``target``); ``steps`` plans were evaluated to find it."""

    epsilon: float
    delta: float
    planned: float
    target: float
    steps: int


# -- scoring ---------------------------------------------------------------------
def held_out_scores(est: Any, X: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """AUC (macro one-vs-rest beyond two classes), Brier score and base-rate Brier score
    of ``est`` on held-out rows (module docstring); ``None`` where undefined (no rows;
    AUC of one class)."""
    from sklearn.metrics import roc_auc_score

    from fedpriv.evaluation.metrics import base_rate_brier

    if y.size == 0:
        return {"auc": None, "brier": None, "brier_base": None}
    proba = est.predict_proba(X)
    c = proba.shape[1]
    score = proba[:, 1] if c == 2 else proba
    auc: float | None = None  # undefined on held-out rows of one class
    if np.unique(y).size > 1:
        try:
            auc = float(roc_auc_score(y, score, multi_class="ovr"))
        except ValueError:  # a class of the model's absent from the rows (beyond two)
            auc = None
    if c == 2:  # the positive class's, as binary_metrics
        brier = float(np.mean((proba[:, 1] - y) ** 2))
    else:  # Brier's original form, as multiclass_metrics
        brier = float(np.mean(np.sum((proba - np.eye(c)[y]) ** 2, axis=1)))
    return {"auc": auc, "brier": brier, "brier_base": base_rate_brier(y, y, c)}


def fmt_score(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def brier_text(scores: dict[str, float | None]) -> str:
    """``Brier b (base rate c)`` of :func:`held_out_scores`."""
    return f"Brier {fmt_score(scores['brier'])} (base rate {fmt_score(scores['brier_base'])})"


# -- folds -------------------------------------------------------------------------
def assign_folds(n_rows: int, folds: int, key: Any) -> np.ndarray:
    """Each row's fold in [0, ``folds``): the i-th draw of ``key``'s private stream, so a
    row's fold depends on the key and its index only, never on the other rows."""
    return key.generator("cv-folds").integers(0, folds, size=n_rows)


def fold_data(data: Any, fold_of: np.ndarray, j: int) -> Any:
    """``data`` with fold ``j`` as its test part and every other row as its training part."""
    from fedpriv.data.split import Split

    rows = data.rows("train")
    split = Split(
        train=rows[fold_of != j],
        val=np.zeros(0, dtype=np.int64),
        test=rows[fold_of == j],
        seed=data.split.seed,
        rule=f"cross-validation fold {j + 1}",
    )
    return dataclasses.replace(data, split=split)


# -- the budget --------------------------------------------------------------------
def fit_plan(
    est: Any, data: Any, size: PublicSize, n_clients: int
) -> Callable[[float, float], tuple[list[tuple[Any, int]], float]]:
    """(ε, δ) ↦ what a fit of ``est`` at that budget reserves, and its distributed-noise
    slack: its strategy built from the public context and started against a throwaway
    ledger (module docstring); no row is read."""
    from sklearn.base import clone

    from fedpriv.federation.planning import begin_strategy
    from fedpriv.methods import StrategyContext
    from fedpriv.privacy import PrivacyBudget, PrivacyLedger
    from fedpriv.privacy.randomness import SecretKey

    def plan(epsilon: float, delta: float) -> tuple[list[tuple[Any, int]], float]:
        probe = clone(est).set_params(epsilon=epsilon, delta=delta, ledger=None)
        config = probe._config()
        probe._check_run_params()
        n_features = int(data.X.shape[1])
        context = StrategyContext(
            schema=data.schema,
            n_features=n_features,
            n_records=size.n_records,
            n_classes=int(probe._label_set(data).size),
            participation=probe.participation,
            extra=probe._context_extra(),
        )
        strategy = probe.method_record.build_strategy(config, context)
        ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=delta))
        if (noise := probe._distributed_noise(n_clients)) is not None:
            ledger.use_distributed_noise(noise)
        begin_strategy(
            strategy, n_features=n_features, ledger=ledger, seed=probe.seed,
            secret_key=SecretKey.generate(),  # a throwaway: nothing it draws is released
        )  # fmt: skip
        return ledger.planned_items(), ledger.report().slack

    return plan


def composed_epsilon(
    items: list[tuple[Any, int]], *, folds: int, fixed: list[tuple[Any, int]],
    slack: float, epsilon: float, delta: float,
) -> float:  # fmt: skip
    """The one ledger's ε at ``delta`` of ``fixed`` plus ``folds`` copies of one fit's
    ``items``, as :class:`~fedpriv.privacy.PrivacyLedger` accounts them (flattened groups,
    PLD with the RDP cross-check; each fit's slack charged against δ at the total ε)."""
    from fedpriv.privacy import accounting
    from fedpriv.privacy.pld import flatten

    counts: Counter = Counter()
    for event, n in [*fixed, *((e, n * folds) for e, n in items)]:
        for leaf, m in flatten(event, n):
            counts[leaf] += m
    # (1 + e^ε)·H per unit of total variation H (fedpriv.privacy.distributed).
    delta_acc = delta - (1.0 + math.exp(min(epsilon, 700.0))) * folds * slack
    if delta_acc <= 0.0:
        return math.inf
    return accounting.account(list(counts.items()), delta_acc).epsilon


def fold_epsilon(
    composed: Callable[[float], float], *, epsilon: float, folds: int, rtol: float = RTOL
) -> tuple[float, float, int]:
    """The largest per-fold ε_f (to ``rtol``) whose ``composed(ε_f)`` ≤ ``epsilon``:
    (ε_f, its composed ε, evaluations), by the package's one "largest x within ε"
    search (:func:`fedpriv.privacy.scale_search.largest_within`): from ε/k, down by
    quarters, or up past ε if need be (at (ε_f, δ/k) a fit's ε_f may exceed ε while k
    of them compose within (ε, δ), when the per-fold δ is what binds) up to
    MAX_SHARE·ε, where the plan's ε is taken as saturated. Never returns an overshoot.

    Raises
    ------
    SettingError
        Even ε_f = MIN_SHARE·ε overshoots (the fixed part alone, e.g. δ spent).
    """
    try:
        found = largest_within(
            lambda x: (composed(x), None), target=epsilon, start=epsilon / folds, rtol=rtol,
            min_x=MIN_SHARE * epsilon, max_x=MAX_SHARE * epsilon, down=0.25, closed=rtol / 100,
        )  # fmt: skip
    except OutOfReach:
        raise SettingError(
            f"epsilon={epsilon:g}: no per-fold epsilon in [{MIN_SHARE * epsilon:g}, "
            f"{epsilon:g}] fits {folds} folds in it; raise epsilon or use fewer folds"
        ) from None
    return found.x, found.value, found.evaluations


def fold_budget(
    plan: Callable[[float, float], tuple[list[tuple[Any, int]], float]],
    *, epsilon: float, delta: float, folds: int, fixed: list[tuple[Any, int]],
) -> FoldBudget:  # fmt: skip
    """Each fold's (ε_f, δ/k) so that ``fixed`` and the k fits' plans compose within
    (ε, δ) in one ledger, at least (1 − :data:`RTOL`)·ε (module docstring)."""
    delta_f = delta / folds

    def composed(eps_f: float) -> float:
        items, slack = plan(eps_f, delta_f)
        return composed_epsilon(
            items, folds=folds, fixed=fixed, slack=slack, epsilon=epsilon, delta=delta
        )

    eps_f, planned, steps = fold_epsilon(composed, epsilon=epsilon, folds=folds)
    return FoldBudget(epsilon=eps_f, delta=delta_f, planned=planned, target=epsilon, steps=steps)
