"""Built-in DP-SGD models: closed-form per-example gradients, clipping, compiled sums.

References are independent: torch autograd one example at a time (not
Opacus), central finite differences, and the numpy closed forms against the
compiled kernels.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from fedpriv.models.networks import (
    InputMap,
    ModelKind,
    NetworkModel,
    NetworkSpec,
    clip_factors,
    clipped_gradient_sum,
    per_example_gradients,
    sigmoid,
)
from fedpriv.models.opacus_backend import builtin_module
from fedpriv.models.sgd_sums import RowBlocks, compiled_clipped_sums

KINDS = [ModelKind.LOGISTIC, ModelKind.MLP]


def _problem(kind, d=7, h=5, n=40, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    spec = NetworkSpec(kind=kind, n_features=d, hidden=h)
    params = spec.init_params(rng) + scale * rng.normal(size=spec.n_params)
    X = rng.random((n, d))
    y = (rng.random(n) < 0.4).astype(np.float64)
    return spec, params, X, y


def _autograd_per_example(spec, params, X, y):
    module = builtin_module(spec)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(params), module.parameters())
    rows = []
    for x, t in zip(X, y, strict=True):
        module.zero_grad()
        f = module(torch.from_numpy(x[None, :])).reshape(())
        torch.nn.functional.binary_cross_entropy_with_logits(f, torch.tensor(t)).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in module.parameters()]).numpy())
    return np.array(rows)


def test_parameter_counts_follow_the_paper():
    assert NetworkSpec(kind="logistic", n_features=15).n_params == 16  # P = d + 1
    assert NetworkSpec(kind="mlp", n_features=15, hidden=16).n_params == 15 * 16 + 2 * 16 + 1
    mlp = NetworkSpec(kind="mlp", n_features=15, hidden=16)
    assert builtin_module(mlp) is not None
    assert sum(p.numel() for p in builtin_module(mlp).parameters()) == mlp.n_params


@pytest.mark.parametrize("kind", KINDS)
def test_per_example_gradients_match_autograd(kind):
    spec, params, X, y = _problem(kind)
    ours = per_example_gradients(spec, params, X, y)
    np.testing.assert_allclose(ours, _autograd_per_example(spec, params, X, y), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_per_example_gradients_match_finite_differences(kind):
    spec, params, X, y = _problem(kind, n=3, seed=4)

    def loss(theta, i):
        f = spec.decision_function(theta, X[i : i + 1])[0]
        return np.logaddexp(0.0, f) - y[i] * f

    grads = per_example_gradients(spec, params, X, y)
    eps = 1e-6
    for i in range(3):
        numeric = np.array(
            [
                (loss(params + eps * e, i) - loss(params - eps * e, i)) / (2 * eps)
                for e in np.eye(spec.n_params)
            ]
        )
        np.testing.assert_allclose(grads[i], numeric, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), clip=st.floats(0.05, 5.0), scale=st.floats(0.0, 4.0))
def test_one_record_moves_the_sum_by_at_most_the_clip_norm(kind, seed, clip, scale):
    # The sensitivity claim of DP-SGD: add/remove one record, the sum moves by ≤ C.
    spec, params, X, y = _problem(kind, n=12, seed=seed, scale=scale)
    full = clipped_gradient_sum(spec, params, X, y, clip)
    for i in range(X.shape[0]):
        rest = np.delete(np.arange(X.shape[0]), i)
        without = clipped_gradient_sum(spec, params, X[rest], y[rest], clip)
        assert np.linalg.norm(full - without) <= clip * (1 + 1e-12)


def test_clipping_scales_only_large_gradients():
    norms = np.array([0.0, 0.5, 1.0, 4.0])
    np.testing.assert_array_equal(clip_factors(norms, 1.0), [1.0, 1.0, 1.0, 0.25])


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    clip=st.floats(0.05, 5.0),
)
def test_compiled_sums_match_numpy_and_are_bit_identical_per_client(kind, seed, sizes, clip):
    rng = np.random.default_rng(seed)
    d = 6
    spec = NetworkSpec(kind=kind, n_features=d, hidden=4)
    params = spec.init_params(rng) + rng.normal(size=spec.n_params)
    imap = InputMap(rng.random(d), rng.uniform(0.5, 3.0, d))
    Xs = [rng.random((n, d)) for n in sizes]
    ys = [(rng.random(n) < 0.5).astype(np.float64) for n in sizes]
    samples = [np.sort(rng.choice(n, size=rng.integers(0, n + 1), replace=False)) for n in sizes]
    blocks = RowBlocks.of(Xs, ys)
    together = compiled_clipped_sums(spec, params, blocks, clip, samples, imap)
    for c, (X, y, s) in enumerate(zip(Xs, ys, samples, strict=True)):
        alone = compiled_clipped_sums(spec, params, RowBlocks.of([X], [y]), clip, [s], imap)[0]
        np.testing.assert_array_equal(together[c], alone)
        ref = clipped_gradient_sum(spec, params, imap.apply(X[s]), y[s], clip)
        np.testing.assert_allclose(alone, ref, rtol=1e-11, atol=1e-11)


def test_compiled_sums_refuse_bad_inputs():
    spec, params, X, y = _problem(ModelKind.MLP)
    blocks = RowBlocks.of([X], [y])
    with pytest.raises(ValueError, match="outside its client's rows"):
        compiled_clipped_sums(spec, params, blocks, 1.0, [np.array([0, 40])])
    with pytest.raises(ValueError, match="outside its client's rows"):
        compiled_clipped_sums(spec, params, blocks, 1.0, [np.array([-1])])
    with pytest.raises(ValueError, match="parameters; got shape"):
        compiled_clipped_sums(spec, params[:-1], blocks, 1.0, [np.array([0])])
    with pytest.raises(ValueError, match="parameters must be finite"):
        compiled_clipped_sums(spec, params * np.nan, blocks, 1.0, [np.array([0])])
    with pytest.raises(ValueError, match=r"clip must lie in \(0, inf\)"):
        compiled_clipped_sums(spec, params, blocks, 0.0, [np.array([0])])
    with pytest.raises(ValueError, match="1-D arrays of row indices"):
        compiled_clipped_sums(spec, params, blocks, 1.0, [np.zeros((2, 1), dtype=np.int64)])
    with pytest.raises(ValueError, match="exceed"):
        RowBlocks(X, y, np.array([0]), np.array([41]))


def test_input_map_and_model_round_trip():
    spec, params, X, _ = _problem(ModelKind.MLP)
    imap = InputMap(np.full(7, 0.5), np.full(7, np.sqrt(12)))
    model = NetworkModel(spec, params, imap)
    np.testing.assert_allclose(
        model.decision_function(X), spec.decision_function(params, np.sqrt(12) * (X - 0.5))
    )
    again = NetworkModel.from_arrays(model.to_arrays())
    np.testing.assert_array_equal(again.predict_proba(X), model.predict_proba(X))
    assert again.spec == spec
    with pytest.raises(ValueError, match="non-zero"):
        InputMap(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="input map has 3 features"):
        NetworkModel(spec, params, InputMap.identity(3))


def test_spec_validation_and_initialisation():
    with pytest.raises(ValueError, match="hidden must lie in"):
        NetworkSpec(kind="mlp", n_features=3, hidden=5000)
    with pytest.raises(ValueError, match="'tree' is not a valid ModelKind"):
        NetworkSpec(kind="tree", n_features=3)
    assert NetworkSpec(kind="logistic", n_features=3, hidden=9).hidden == 0
    spec = NetworkSpec(kind="mlp", n_features=9, hidden=4)
    a = spec.init_params(np.random.default_rng(1))
    np.testing.assert_array_equal(a, spec.init_params(np.random.default_rng(1)))
    w = spec.unpack(a)
    assert np.abs(w["W1"]).max() <= 1 / 3 and np.abs(w["w2"]).max() <= 1 / 2
    logistic = NetworkSpec(kind="logistic", n_features=9)
    assert not np.any(logistic.init_params(np.random.default_rng(1)))


def test_sigmoid_is_stable():
    z = np.array([-800.0, -30.0, 0.0, 30.0, 800.0])
    np.testing.assert_allclose(sigmoid(z), expit(z), rtol=1e-12, atol=0)
