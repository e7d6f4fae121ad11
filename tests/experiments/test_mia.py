"""The loss-threshold attack and the off-path importance vector."""

import numpy as np
import pytest
from fedpriv.experiments.bench.mia import attack_scores, record_losses, routing_counts


def test_attack_on_a_separable_case():
    members = np.linspace(0.01, 0.2, 50)  # every member's loss below every non-member's
    outsiders = np.linspace(0.5, 2.0, 60)
    out = attack_scores(members, outsiders)
    assert out["attack_auc"] == pytest.approx(1.0)
    assert out["attack_advantage"] == pytest.approx(1.0)
    flipped = attack_scores(outsiders, members)
    assert flipped["attack_auc"] == pytest.approx(0.0)


def test_attack_at_chance_when_losses_are_exchangeable():
    rng = np.random.default_rng(0)
    out = attack_scores(rng.exponential(size=4000), rng.exponential(size=4000))
    assert out["attack_auc"] == pytest.approx(0.5, abs=0.02)


def test_record_losses():
    np.testing.assert_allclose(
        record_losses(np.array([0.9, 0.9]), np.array([1.0, 0.0])), [-np.log(0.9), -np.log(0.1)]
    )


def test_routing_counts_give_each_record_unit_mass():
    from fedpriv.models.trees import TreeEnsemble, sample_tree
    from fedpriv.seeding import derive_generator

    rng = derive_generator(0, "test", "routing")
    trees = tuple(sample_tree(depth=3, n_features=4, rng=rng) for _ in range(5))
    ens = TreeEnsemble(base=0.0, trees=trees, leaf_values=tuple(np.zeros(8) for _ in trees))
    X = derive_generator(1, "test", "x").random((37, 4))
    counts = routing_counts(ens, X)
    assert counts.sum() == pytest.approx(37.0)
    assert routing_counts(ens, X[:1]).sum() == pytest.approx(1.0)  # sensitivity: L1 = 1
