"""The threat model of docs/explanation/architecture.md §1 against seed replay:
regression tests.

The attacker knows every output and log, every message any client receives
and the public seed. Before commit 5a50443 all private randomness came from
that seed; the debug mode ``SecretKey.from_public_seed(seed)`` keeps that
behaviour (and its privacy report says ``certified: False``), so each test
runs the attack against both: with a secret key the attacker is left with an
error of the order of the noise, in debug mode it recovers the exact sums.

Noise on the grid (``fedpriv.privacy.randomness``): each coordinate's noise
has standard deviation σ = z·(Δ + γ√P); two independent draws differ by
N(0, 2σ²).
"""

import numpy as np
import pytest
from fedpriv.clients.dpsgd import DPSGDClient
from fedpriv.experiments.audit.auditing import audit_learner
from fedpriv.experiments.audit.learners import boosting_audit, dpsgd_audit, forest_audit
from fedpriv.experiments.audit.replay import (
    brute_force_seed,
    dpsgd_released_sums,
    peer_estimates,
    replay_server_noise,
)
from fedpriv.strategies.boosting import L2_SENSITIVITY
from scipy import stats

from fedpriv.privacy.audit import ks_noise_test
from fedpriv.privacy.randomness import SecretKey, rounding_margin
from tests.keys import key_for

SEED = 37
STEPS = 20  # 20 steps × 3 parameters: 60 noise coordinates per run


def _sgd_run(debug: bool):
    audit = dpsgd_audit("logistic", rounds=STEPS)
    key = SecretKey.from_public_seed(SEED) if debug else key_for(201)
    run = audit.fit(canary=True, seed=SEED, key=key)
    n_params = run.queries[0].reply_length
    cfg = run.strategy.config
    sigma = run.strategy.noise_multiplier_ * (cfg.clip_norm + rounding_margin(n_params, "l2"))
    return audit, run, sigma


def _replayed(audit, run):
    # The attacker rebuilds the server half from the public config and the public seed.
    return replay_server_noise(
        audit.make_strategy(False),
        n_features=2,
        seed=run.seed,
        epsilon=audit.epsilon,
        delta=audit.delta,
    )


@pytest.mark.parametrize("debug", [False, True])
def test_seed_replay_recovers_the_noise_free_dpsgd_update_only_in_debug_mode(debug):
    audit, run, sigma = _sgd_run(debug)
    noise = _replayed(audit, run)
    recovered = [s - n for s, n in zip(dpsgd_released_sums(run), noise, strict=True)]
    truth = [value for value, _ in run.releases]  # the curator's exact sums
    error = np.concatenate([r - t for r, t in zip(recovered, truth, strict=True)])
    assert error.size == STEPS * 3
    assert run.report.certified is (not debug)
    if debug:
        assert np.linalg.norm(error) < 1e-9
        assert "public seed" in run.report.caveat
    else:
        # What is left is the difference of two independent noise draws.
        assert np.linalg.norm(error) >= 0.5 * sigma * np.sqrt(error.size)
        assert ks_noise_test(error, stats.norm(0.0, np.sqrt(2.0) * sigma)) > 1e-3


@pytest.mark.parametrize("debug", [False, True])
def test_a_peer_client_cannot_recover_the_other_clients_sum_unless_in_debug_mode(debug):
    audit, run, sigma = _sgd_run(debug)
    own = audit.data.clients(True)[0]  # client 0's rows: it knows them, and the queries
    truth = [replies[1] for replies in run.replies]  # client 1's exact clipped sums
    plain = peer_estimates(run, handler=DPSGDClient(), own=own)
    replayed = peer_estimates(
        run, handler=DPSGDClient(), own=own, replayed_noise=_replayed(audit, run)
    )
    err_plain = np.concatenate([e - t for e, t in zip(plain, truth, strict=True)])
    err_replay = np.concatenate([e - t for e, t in zip(replayed, truth, strict=True)])
    # From the queries alone client 0 learns client 1's sum plus exactly the server noise.
    assert ks_noise_test(err_plain, stats.norm(0.0, sigma)) > 1e-3
    assert np.linalg.norm(err_plain) >= 0.5 * sigma * np.sqrt(err_plain.size)
    if debug:
        # Codec rounding only (2^-32 per coordinate and client).
        assert np.linalg.norm(err_replay) < 1e-9
    else:
        assert np.linalg.norm(err_replay) >= 0.5 * sigma * np.sqrt(err_replay.size)
        assert ks_noise_test(err_replay, stats.norm(0.0, np.sqrt(2.0) * sigma)) > 1e-3


@pytest.mark.parametrize("debug", [False, True])
def test_seed_brute_forced_from_boosting_thresholds_no_longer_yields_the_noise(debug):
    # 10 rounds: the intercept's 2 sums and 9 trees × 8 leaf sums, 74 noise coordinates.
    audit = boosting_audit(rounds=10)
    key = SecretKey.from_public_seed(SEED) if debug else key_for(202)
    run = audit.fit(canary=True, seed=SEED, key=key)
    # The public randomness is public: the released trees give the seed away.
    found = brute_force_seed(run.model, depth=2, n_features=2, candidates=range(256))
    assert found == SEED
    replayed = replay_server_noise(
        audit.make_strategy(False),
        n_features=2,
        seed=found,
        epsilon=audit.epsilon,
        delta=audit.delta,
    )
    true_noise = np.concatenate([out - value for value, out in run.releases])
    error = true_noise - np.concatenate(replayed)
    assert error.size == 74
    if debug:
        assert np.linalg.norm(error) < 1e-9
        assert not run.report.certified
    else:
        sigma = run.strategy.noise_multiplier_ * (L2_SENSITIVITY + rounding_margin(8, "l2"))
        assert np.linalg.norm(error) >= 0.5 * sigma * np.sqrt(error.size)
        assert ks_noise_test(error, stats.norm(0.0, np.sqrt(2.0) * sigma)) > 1e-3
        assert run.report.certified


# The §1 attacker's ε̂: it subtracts its seed replay on D from the released statistic.
# Debug mode separates D from D + canary (perfectly for DP-SGD and boosting: ε̂ =
# log(p̲/p̄) ≈ 3.5 at 250 trials, 3.28 at 200 (the audit's least trials); the forest's clipped
# scores tie in ≈ 1/3 of D' fits, so it keeps 250).
SECTION1 = {
    "dpsgd-logistic": (lambda: dpsgd_audit("logistic"), 200),
    "boosting": (boosting_audit, 200),
    "forest-disjoint": (lambda: forest_audit("disjoint"), 250),
}


@pytest.mark.parametrize("name", list(SECTION1))
def test_section1_attacker_epsilon_hat_explodes_only_in_debug_mode(name):
    factory, n_trials = SECTION1[name]
    audit = factory()
    base = 300 + list(SECTION1).index(name)
    # The replay of a seed is the same fit for both audits (D, the seed's debug key): one
    # replay per seed serves both. The debug audit's own D fits stay fits of their own,
    # so the check below still compares two separate fits of each seed.
    replays: dict[int, float] = {}
    secret = audit_learner(
        audit,
        n_trials=n_trials,
        keys="injected",
        base_key=key_for(base),
        section1=True,
        replays=replays,
    )["section1"]
    debug = audit_learner(audit, n_trials=n_trials, keys="debug", section1=True, replays=replays)[
        "section1"
    ]
    assert len(replays) == 2 * n_trials
    assert secret.epsilon_hat <= audit.epsilon, secret.result
    assert debug.epsilon_hat > audit.epsilon, debug.result
    # In debug mode the replay of D *is* the run whenever the canary is absent.
    assert np.all(debug.scores.without == 0.0)
