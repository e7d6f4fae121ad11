"""K > 2 classes: the softmax DP-SGD models (gradients, sensitivity, backends, model file).

Two classes stay the one-logit sigmoid model; these tests cover K logits with
softmax cross-entropy, against torch autograd one example at a time, the
numpy closed forms, the compiled kernel and Opacus.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.models.networks import (
    InputMap,
    ModelKind,
    NetworkModel,
    NetworkSpec,
    clipped_gradient_sum,
    per_example_gradients,
)
from fedpriv.models.opacus_backend import OpacusGradients, builtin_module
from fedpriv.models.sgd_sums import RowBlocks, compiled_clipped_sums

KINDS = [ModelKind.LOGISTIC, ModelKind.MLP]


def _problem(kind, *, k=3, d=6, h=4, n=30, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    spec = NetworkSpec(kind=kind, n_features=d, hidden=h, n_classes=k)
    params = spec.init_params(rng) + scale * rng.normal(size=spec.n_params)
    return spec, params, rng.random((n, d)), rng.integers(0, k, n).astype(np.float64)


def test_binary_keeps_one_logit_and_k_classes_have_k():
    assert NetworkSpec(kind="logistic", n_features=5).n_params == 6
    assert NetworkSpec(kind="logistic", n_features=5, n_classes=3).n_params == 3 * 6
    mlp = NetworkSpec(kind="mlp", n_features=5, hidden=4, n_classes=3)
    assert mlp.n_params == 5 * 4 + 4 + 3 * 4 + 3
    assert sum(p.numel() for p in builtin_module(mlp).parameters()) == mlp.n_params
    with pytest.raises(ValueError, match="n_classes must be an integer in"):
        NetworkSpec(kind="mlp", n_features=5, n_classes=1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [3, 4])
def test_per_example_gradients_match_autograd(kind, k):
    spec, params, X, y = _problem(kind, k=k)
    module = builtin_module(spec)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(params), module.parameters())
    rows = []
    for x, t in zip(X, y, strict=True):
        module.zero_grad()
        f = module(torch.from_numpy(x[None, :]))
        torch.nn.functional.cross_entropy(f, torch.tensor([int(t)])).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in module.parameters()]).numpy())
    ours = per_example_gradients(spec, params, X, y)
    np.testing.assert_allclose(ours, np.array(rows), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), clip=st.floats(0.05, 5.0), scale=st.floats(0.0, 4.0))
def test_one_record_moves_the_compiled_sum_by_at_most_the_clip_norm(kind, seed, clip, scale):
    spec, params, X, y = _problem(kind, n=10, seed=seed, scale=scale)
    y[0] = 7.0  # not a class index: adds nothing, like any other record within C
    imap = InputMap(np.full(X.shape[1], 0.5), np.full(X.shape[1], np.sqrt(12)))
    blocks = RowBlocks.of([X], [y])
    every = np.arange(X.shape[0])
    full = compiled_clipped_sums(spec, params, blocks, clip, [every], imap)[0]
    for i in every:
        without = compiled_clipped_sums(spec, params, blocks, clip, [np.delete(every, i)], imap)
        assert np.linalg.norm(full - without[0]) <= clip * (1 + 1e-12)
    valid = every[1:]
    ref = clipped_gradient_sum(spec, params, imap.apply(X[valid]), y[valid], clip)
    np.testing.assert_allclose(full, ref, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("kind", KINDS)
def test_compiled_sums_are_bit_identical_per_client(kind):
    spec, params, X, y = _problem(kind, n=40, seed=3)
    parts = [np.arange(0, 15), np.arange(15, 40)]
    samples = [np.array([0, 3, 4, 9]), np.array([1, 2, 20, 24])]
    blocks = RowBlocks.of([X[p] for p in parts], [y[p] for p in parts])
    together = compiled_clipped_sums(spec, params, blocks, 0.5, samples)
    for c, p in enumerate(parts):
        alone = compiled_clipped_sums(spec, params, RowBlocks.of([X[p]], [y[p]]), 0.5, [samples[c]])
        np.testing.assert_array_equal(together[c], alone[0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clip", [0.05, 1.0, 100.0])  # all clipped, some, none
def test_opacus_gives_the_compiled_sum(kind, clip):
    spec, params, X, y = _problem(kind, k=4, d=15, h=16, n=120, seed=5, scale=0.5)
    imap = InputMap(np.full(15, 0.5), np.full(15, np.sqrt(12)))
    sample = np.arange(0, 120, 3)
    fast = compiled_clipped_sums(spec, params, RowBlocks.of([X], [y]), clip, [sample], imap)[0]
    opacus = OpacusGradients(builtin_module(spec)).clipped_sum(
        params, imap.apply(X[sample]), y[sample], clip
    )
    np.testing.assert_allclose(opacus, fast, rtol=1e-10, atol=1e-10)
    assert np.abs(fast).max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_model_predicts_k_probabilities_and_round_trips(kind):
    spec, params, X, _ = _problem(kind, k=3)
    imap = InputMap(np.full(X.shape[1], 0.2), np.full(X.shape[1], 2.0))
    model = spec.model(params, imap)
    proba = model.predict_proba(X)
    assert proba.shape == (X.shape[0], 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(proba.argmax(axis=1), model.decision_function(X).argmax(axis=1))
    back = NetworkModel.from_arrays(model.to_arrays())
    assert back.spec == spec
    np.testing.assert_array_equal(back.predict_proba(X), proba)
    # A file from before softmax holds shape [d, h]: the binary model.
    old = NetworkSpec(kind=kind, n_features=X.shape[1], hidden=4).model(
        np.zeros(NetworkSpec(kind=kind, n_features=X.shape[1], hidden=4).n_params)
    )
    arrays = old.to_arrays() | {"shape": old.to_arrays()["shape"][:2]}
    assert NetworkModel.from_arrays(arrays).spec.n_classes == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [2, 3])
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), clip=st.floats(0.05, 5.0), scale=st.floats(0.0, 4.0))
def test_output_bias_clipped_on_its_own_bounds_a_record_by_the_hypotenuse(
    kind, k, seed, clip, scale
):
    # Per-layer clipping: the output bias's r to B, the rest to C; one record moves
    # the sum by ≤ √(C² + B²) whatever its label (y = 5 is clipped like any other).
    spec, params, X, y = _problem(kind, k=k, n=10, seed=seed, scale=scale)
    y[1] = 5.0 if k == 2 else y[1]
    bound = 1.0 if k == 2 else np.sqrt(2.0)
    blocks, every = RowBlocks.of([X], [y]), np.arange(X.shape[0])
    full = compiled_clipped_sums(spec, params, blocks, clip, [every], bias_bound=bound)[0]
    for i in every:
        rest = np.delete(every, i)
        without = compiled_clipped_sums(spec, params, blocks, clip, [rest], bias_bound=bound)[0]
        assert np.linalg.norm(full - without) <= np.hypot(clip, bound) * (1 + 1e-12)
    ref = clipped_gradient_sum(spec, params, X, y, clip, bias_bound=bound)
    np.testing.assert_allclose(full, ref, rtol=1e-11, atol=1e-11)
    opacus = OpacusGradients(builtin_module(spec)).clipped_sum(params, X, y, clip, bias_bound=bound)
    np.testing.assert_allclose(opacus, full, rtol=1e-10, atol=1e-10)
