"""The Opacus backend gives the same clipped sums as the compiled one, and any module works."""

import numpy as np
import pytest
import torch
from torch import nn

from fedpriv.models.networks import (
    InputMap,
    ModelKind,
    NetworkSpec,
)
from fedpriv.models.opacus_backend import (
    OpacusGradients,
    TorchSpec,
    builtin_module,
    module_parameters,
)
from fedpriv.models.sgd_sums import RowBlocks, compiled_clipped_sums


@pytest.mark.parametrize("kind", [ModelKind.LOGISTIC, ModelKind.MLP])
@pytest.mark.parametrize("clip", [0.05, 1.0, 100.0])  # all clipped, some, none
def test_backends_give_the_same_clipped_sum(kind, clip):
    rng = np.random.default_rng(3)
    d, n = 15, 200
    spec = NetworkSpec(kind=kind, n_features=d, hidden=16)
    params = spec.init_params(rng) + 0.5 * rng.normal(size=spec.n_params)
    X = rng.random((n, d))
    y = (rng.random(n) < 0.3).astype(np.float64)
    imap = InputMap(np.full(d, 0.5), np.full(d, np.sqrt(12)))
    sample = np.flatnonzero(rng.random(n) < 0.3)
    fast = compiled_clipped_sums(spec, params, RowBlocks.of([X], [y]), clip, [sample], imap)[0]
    opacus = OpacusGradients(builtin_module(spec)).clipped_sum(
        params, imap.apply(X[sample]), y[sample], clip
    )
    np.testing.assert_allclose(opacus, fast, rtol=1e-10, atol=1e-10)
    assert np.abs(fast).max() > 1e-3  # not a vacuous comparison


def test_blocks_in_one_pass_equal_separate_calls():
    rng = np.random.default_rng(5)
    spec = NetworkSpec(kind="mlp", n_features=4, hidden=3)
    grads = OpacusGradients(builtin_module(spec))
    params = spec.init_params(rng)
    X, y = rng.random((9, 4)), (rng.random(9) < 0.5).astype(float)
    together = grads.clipped_sums(params, X, y, 0.7, [4, 0, 5])
    np.testing.assert_allclose(together[0], grads.clipped_sum(params, X[:4], y[:4], 0.7))
    np.testing.assert_array_equal(together[1], np.zeros(spec.n_params))
    np.testing.assert_allclose(together[2], grads.clipped_sum(params, X[4:], y[4:], 0.7))
    with pytest.raises(ValueError, match="do not add up"):
        grads.clipped_sums(params, X, y, 0.7, [4, 4])


def _seeded_module(seed: int) -> nn.Module:
    # A user's own architecture; its public initial values come from a seeded generator.
    module = nn.Sequential(
        nn.Linear(5, 8, dtype=torch.float64), nn.Tanh(), nn.Linear(8, 1, dtype=torch.float64)
    )
    gen = np.random.default_rng(seed)
    init = torch.from_numpy(gen.normal(0, 0.3, sum(p.numel() for p in module.parameters())))
    torch.nn.utils.vector_to_parameters(init, module.parameters())
    return module


def test_any_module_matches_per_example_autograd():
    module = _seeded_module(0)
    rng = np.random.default_rng(1)
    X, y = rng.random((30, 5)), (rng.random(30) < 0.5).astype(float)
    params = module_parameters(module) + rng.normal(0, 0.5, module_parameters(module).size)
    clip = 0.3
    got = OpacusGradients(module).clipped_sum(params, X, y, clip)

    ref = np.zeros_like(params)
    plain = _seeded_module(0)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(params), plain.parameters())
    for x, t in zip(X, y, strict=True):
        plain.zero_grad()
        f = plain(torch.from_numpy(x[None])).reshape(())
        nn.functional.binary_cross_entropy_with_logits(f, torch.tensor(t)).backward()
        g = torch.cat([p.grad.reshape(-1) for p in plain.parameters()]).numpy()
        ref += g * min(1.0, clip / np.linalg.norm(g))
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_torch_spec_predicts_through_the_module():
    module = _seeded_module(2)
    spec = TorchSpec(module)
    start = spec.init_params(np.random.default_rng(0))
    X = np.random.default_rng(3).random((6, 5))
    model = spec.model(start + 0.1, InputMap(np.full(5, 0.5), np.full(5, 2.0)))
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.from_numpy(start + 0.1), module.parameters())
        expected = module(torch.from_numpy(2.0 * (X - 0.5))).reshape(-1).numpy()
    np.testing.assert_allclose(model.decision_function(X), expected)
    assert model.predict_proba(X).shape == (6,)
