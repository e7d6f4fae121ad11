"""The seed-replay attacks of ARCHITECTURE.md §1, as the old code invited them.

The attacker knows every output and log, every message any client receives
and the public seed. Before commit 5a50443 every private draw came from that
seed, so the attacker could replay the server's noise and subtract it. These
functions are the attacks; the regression tests show they now recover the
exact statistics only in debug mode (``SecretKey.from_public_seed``), whose
privacy report says ``certified: False``.

* :func:`replay_server_noise` re-runs a strategy's server half under the key
  derived from the public seed, feeding it zero sums: each release is then
  the replayed noise itself.
* :func:`dpsgd_released_sums` reads each step's released noisy sum off the
  parameter trajectory (θ_t is in the step-t query, θ_T in the model).
* :func:`peer_estimates` is client 0 of a two-client DP-SGD run estimating
  client 1's clipped-gradient sums from the queries it receives and its own
  replies.
* :func:`brute_force_seed` recovers the public seed from a boosting model's
  released random trees.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from fedpriv.experiments.audit.runs import RecordingLedger, Run

from fedpriv.federation.protocol import ClientData
from fedpriv.federation.runtime import begin_strategy
from fedpriv.models.trees import TreeEnsemble, sample_tree
from fedpriv.privacy import PrivacyBudget
from fedpriv.privacy.randomness import SecretKey
from fedpriv.seeding import derive_generator


def replay_server_noise(
    strategy: Any, *, n_features: int, seed: int, epsilon: float, delta: float
) -> list[np.ndarray]:
    """The noise of every release of ``strategy`` if its key came from the public ``seed``.

    ``strategy`` is a fresh instance built from the run's public configuration.
    Noise draws of DP-SGD and boosting do not depend on the sums, so replaying
    with zero sums draws exactly the noise a debug-mode run released.
    """
    ledger = RecordingLedger(budget=PrivacyBudget(epsilon=epsilon, delta=delta))
    begin_strategy(
        strategy,
        n_features=n_features,
        ledger=ledger,
        seed=seed,
        secret_key=SecretKey.from_public_seed(seed),
    )
    while (query := strategy.next_query()) is not None:
        strategy.update(query, np.zeros(query.reply_length))
    return [out for _, out in ledger.releases]


def dpsgd_released_sums(run: Run) -> list[np.ndarray]:
    """Each step's released noisy clipped-gradient sum, from public information only.

    θ_{t+1} = θ_t − (η/(ρ·q·n))·(S_t + N_t), with θ_t in the step-t query,
    θ_T in the released model and η, ρ·q·n public.
    """
    s = run.strategy
    scale = s.expected_batch / s.config.learning_rate
    thetas = [q.arrays["params"] for q in run.queries] + [run.model.params]
    return [(thetas[t] - thetas[t + 1]) * scale for t in range(len(thetas) - 1)]


def peer_estimates(
    run: Run,
    *,
    handler: Any,
    own: ClientData,
    replayed_noise: list[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Client 0's estimate of client 1's sum at every step of a two-client full-batch run.

    The released sum minus client 0's own reply (it recomputes it from its
    rows and the query it received); in debug mode also minus the replayed
    server noise.
    """
    estimates = []
    for t, (query, released) in enumerate(zip(run.queries, dpsgd_released_sums(run), strict=True)):
        mine = handler.answer(query, own, np.arange(own.n), {})
        guess = released - mine
        if replayed_noise is not None:
            guess = guess - replayed_noise[t]
        estimates.append(guess)
    return estimates


def brute_force_seed(
    model: TreeEnsemble,
    *,
    depth: int,
    n_features: int,
    candidates: Iterable[int],
    feature_weights: np.ndarray | None = None,
) -> int | None:
    """The first candidate seed whose server generator draws the model's trees, or None.

    Boosting's trees come from ``derive_generator(seed, "server")`` (public
    randomness), so the released features and thresholds pin the seed down.
    """
    for seed in candidates:
        rng = derive_generator(seed, "server")
        for tree in model.trees:
            guess = sample_tree(
                depth=depth, n_features=n_features, rng=rng, feature_weights=feature_weights
            )
            if not (
                np.array_equal(guess.feature, tree.feature)
                and np.array_equal(guess.threshold, tree.threshold)
            ):
                break
        else:
            return seed
    return None
