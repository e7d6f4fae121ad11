"""Clipped per-example gradient sums of any ``torch.nn.Module``, through Opacus.

The general DP-SGD path: a user's module (any architecture Opacus can
per-sample-differentiate) that maps an (n, d) float tensor to n logits, or to
(n, K) logits for K classes (softmax cross-entropy, labels the class indices). Opacus's
``GradSampleModule`` computes every example's gradient of the summed logistic
loss in one backward pass (``loss_reduction="sum"``, so no 1/n rescaling);
each is clipped to L2 norm C and the clipped gradients are summed (Abadi et
al. 2016, Alg. 1). Only that per-sample machinery is used: Opacus's
``PrivacyEngine`` adds noise on each client (local DP), which is not this
regime — here the server adds noise once to the securely aggregated sum.

The parameter vector is ``torch.nn.utils.parameters_to_vector`` order, which
for the built-in models is the layout of :mod:`fedpriv.models.networks`, so
this backend and the compiled one answer the same query with the same sum (a
test checks it to 1e-10).

torch is imported here only: the fast path never loads it.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from opacus.grad_sample import GradSampleModule
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from fedpriv.models.networks import InputMap, ModelKind, NetworkSpec, sigmoid, softmax


def builtin_module(spec: NetworkSpec, *, dtype: torch.dtype = torch.float64) -> nn.Module:
    """The torch module of a built-in model (parameters uninitialised: load a vector).

    ``skip_init`` keeps torch's global generator untouched; every parameter
    value comes from the run's own vector.
    """
    d, h, o = spec.n_features, spec.hidden, spec.n_outputs
    if spec.kind is ModelKind.LOGISTIC:
        return nn.utils.skip_init(nn.Linear, d, o, dtype=dtype)
    return nn.Sequential(
        nn.utils.skip_init(nn.Linear, d, h, dtype=dtype),
        nn.ReLU(),
        nn.utils.skip_init(nn.Linear, h, o, dtype=dtype),
    )


def module_parameters(module: nn.Module) -> np.ndarray:
    """The module's parameters as one float64 vector (``parameters_to_vector`` order)."""
    with torch.no_grad():
        return parameters_to_vector(module.parameters()).detach().double().numpy().copy()


class OpacusGradients:
    """Clipped per-example gradient sums of ``module`` via Opacus ``GradSampleModule``.

    Parameters
    ----------
    module : torch.nn.Module
        Maps (n, d) inputs to (n,) or (n, 1) logits. It is wrapped, not
        copied: its parameters are overwritten by each call's vector.
    """

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        self.module = GradSampleModule(module, batch_first=True, loss_reduction="sum")
        self._params = [p for p in self.module.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("module has no trainable parameters")
        self.dtype = self._params[0].dtype
        self.n_params = int(sum(p.numel() for p in self._params))

    def clipped_sum(
        self,
        params: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        clip: float,
        *,
        bias_bound: float = 0.0,
    ) -> np.ndarray:
        """Σ_i ∇ℓ_i · min(1, C/‖∇ℓ_i‖₂) at ``params`` over the rows of ``X`` (float64)."""
        n = np.asarray(X).shape[0]
        return self.clipped_sums(params, X, y, clip, [n], bias_bound=bias_bound)[0]

    def clipped_sums(
        self,
        params: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        clip: float,
        sizes: list[int],
        *,
        bias_bound: float = 0.0,
    ) -> np.ndarray:
        """One clipped sum per consecutive block of ``sizes`` rows, from one backward pass.

        ``bias_bound`` B > 0: the module's last parameter (the output bias of
        the built-in models) is clipped on its own to B, the rest to C, as in
        :func:`fedpriv.models.networks.clipped_gradient_sum`.

        Per-sample gradients do not depend on which other rows share the
        batch (Opacus refuses batch-coupling layers such as BatchNorm), so
        several clients' samples go through the module together and are
        summed per client afterwards.
        """
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (self.n_params,):
            raise ValueError(f"module has {self.n_params} parameters; got shape {params.shape}")
        if not clip > 0:
            raise ValueError(f"clip must lie in (0, inf); got {clip!r}")
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        if sum(sizes) != n or min(sizes, default=0) < 0:
            raise ValueError(f"block sizes {sizes} do not add up to the {n} rows")
        out = np.zeros((len(sizes), self.n_params))
        if n == 0:
            return out
        with torch.no_grad():
            vector_to_parameters(torch.from_numpy(params).to(self.dtype), self._params)
        for p in self._params:
            p.grad = None
            p.grad_sample = None
        xt = torch.from_numpy(np.ascontiguousarray(X)).to(self.dtype)
        y = np.asarray(y, dtype=np.float64)
        logits = self.module(xt)
        if logits.ndim == 2 and logits.shape[1] > 1:  # K logits: softmax cross-entropy
            # A label that is not a class index adds nothing, as in the compiled kernel.
            k = logits.shape[1]
            valid = torch.from_numpy((y >= 0) & (y < k) & (y == np.floor(y)))
            yt = torch.from_numpy(np.where(valid.numpy(), y, 0).astype(np.int64))
            losses = nn.functional.cross_entropy(logits, yt, reduction="none")
            loss = torch.where(valid, losses, torch.zeros((), dtype=losses.dtype)).sum()
        else:
            yt = torch.from_numpy(y).to(self.dtype)
            loss = nn.functional.binary_cross_entropy_with_logits(
                logits.reshape(-1), yt, reduction="sum"
            )
        with warnings.catch_warnings():
            # Opacus's hooks fire on module outputs since inputs need no gradient: expected.
            warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
            loss.backward()
        grads = torch.cat([p.grad_sample.reshape(n, -1) for p in self._params], dim=1).double()
        for p in self._params:
            p.grad = None
            p.grad_sample = None
        with torch.no_grad():
            # A non-finite per-sample gradient (a NaN or infinite label or input)
            # adds nothing, as in the compiled kernels: its norm would be NaN and
            # slip through the clip. Every other row has norm ≤ C after the clip,
            # whatever its label (y ∈ {0, 5} makes |σ(f) − y| up to 5, still clipped).
            finite = torch.isfinite(grads).all(dim=1)
            grads = torch.where(finite[:, None], grads, torch.zeros((), dtype=grads.dtype))
            if bias_bound > 0:
                o = self._params[-1].numel()
                rest, bias = grads[:, :-o], grads[:, -o:]
                factor = clip / rest.norm(dim=1).clamp_min(clip)  # min(1, C/‖g‖)
                fb = bias_bound / bias.norm(dim=1).clamp_min(bias_bound)
                clipped = torch.cat([factor[:, None] * rest, fb[:, None] * bias], dim=1).numpy()
            else:
                norms = grads.norm(dim=1)
                factor = clip / norms.clamp_min(clip)  # min(1, C/‖g‖), no division by zero
                clipped = (factor[:, None] * grads).numpy()
        start = 0
        for k, size in enumerate(sizes):
            out[k] = clipped[start : start + size].sum(axis=0)
            start += size
        return out


class TorchSpec:
    """A user's module as a DP-SGD model: what :class:`fedpriv.strategies.dpsgd.DPSGDStrategy` needs.

    Mirrors :class:`fedpriv.models.networks.NetworkSpec`: ``n_params``,
    ``init_params`` (the module's own parameters, which must not come from
    the private data) and ``model`` (a released model over a parameter vector).
    """

    kind_name = "module"
    hidden = 0

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        self._start = module_parameters(module)
        self.n_params = int(self._start.size)

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        return self._start.copy()

    def model(self, params: np.ndarray, input_map: InputMap | None = None) -> TorchModel:
        return TorchModel(self.module, params, input_map)


class TorchModel:
    """A released parameter vector of a user's module; predicts through torch."""

    def __init__(
        self, module: nn.Module, params: np.ndarray, input_map: InputMap | None = None
    ) -> None:
        self.module = module
        self.input_map = input_map
        self.params = np.array(params, dtype=np.float64)
        self.params.flags.writeable = False

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        if self.input_map is not None:
            X = self.input_map.apply(X)
        ps = [p for p in self.module.parameters() if p.requires_grad]
        with torch.no_grad():
            vector_to_parameters(torch.from_numpy(self.params.copy()).to(ps[0].dtype), ps)
            out = self.module(torch.from_numpy(np.asarray(X, dtype=np.float64)).to(ps[0].dtype))
        out = out.double().numpy()
        return (out if out.ndim == 2 and out.shape[1] > 1 else out.reshape(-1)).copy()

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1 | x) of a one-logit module, else softmax of its logits."""
        f = self.decision_function(X)
        return sigmoid(f) if f.ndim == 1 else softmax(f)

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"params": np.asarray(self.params)}
        if self.input_map is not None:
            out.update(input_shift=self.input_map.shift, input_scale=self.input_map.scale)
        return out
