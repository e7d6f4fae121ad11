"""The two built-in DP-SGD models: logistic regression and a one-hidden-layer ReLU MLP.

Both are a flat parameter vector θ plus a :class:`NetworkSpec` that says how
to read it. The layout is PyTorch's ``parameters_to_vector`` order for the
equivalent module (``nn.Linear(d, 1)``, or ``nn.Sequential(nn.Linear(d, h),
nn.ReLU(), nn.Linear(h, 1))``), so a vector moves between the fast backend and
the Opacus backend (:mod:`fedpriv.models.opacus_backend`) unchanged:

* logistic, P = d + 1:  ``[w (d) | b]``;
* MLP, P = d·h + 2h + 1: ``[W1 (h × d, row-major) | b1 (h) | w2 (h) | b2]``.

Two classes: one logit f, the logistic loss ℓ(θ; x, y) = log(1 + e^f) − y·f
(benchmark paper §3.5). K > 2 classes: K logits (``nn.Linear(·, K)``, weight
K × fan-in row-major, then its K biases), softmax cross-entropy
ℓ = log Σ_k e^{f_k} − f_y, label y the class index; with r = softmax(f) − e_y
the output layer's gradients are r xᵀ (or r aᵀ) and r. :func:`clipped_gradient_sum` is the
closed-form, vectorised per-example gradient with L2 clipping (Abadi et al.
2016, Alg. 1, "clip gradient"); the compiled clients use
:mod:`fedpriv.models._sgd_kernels`, which computes the same sums row by row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from fedpriv.models.base import ReleasedModel
from fedpriv.models.recalibration import LinearRecalibration
from fedpriv.validation import check_count, check_generator


class ModelKind(StrEnum):
    """Which built-in DP-SGD model."""

    LOGISTIC = "logistic"
    MLP = "mlp"


_KINDS = list(ModelKind)


@dataclass(frozen=True, eq=False)
class InputMap:
    """Public affine map x ↦ (x − shift)·scale applied to every row before the model.

    Part of the model's definition, not of the data: the server sends it in
    every query and the released model applies it when predicting. Built
    from the schema alone (:func:`fedpriv.data.box_standardisation`).
    """

    shift: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        shift = np.ascontiguousarray(self.shift, dtype=np.float64)
        scale = np.ascontiguousarray(self.scale, dtype=np.float64)
        if shift.ndim != 1 or shift.shape != scale.shape:
            raise ValueError(f"shift and scale must be equal 1-D; got {shift.shape}, {scale.shape}")
        if not (np.all(np.isfinite(shift)) and np.all(np.isfinite(scale)) and np.all(scale != 0)):
            raise ValueError("shift must be finite and scale finite and non-zero")
        for a in (shift, scale):
            a.flags.writeable = False
        object.__setattr__(self, "shift", shift)
        object.__setattr__(self, "scale", scale)

    @classmethod
    def identity(cls, n_features: int) -> InputMap:
        return cls(np.zeros(n_features), np.ones(n_features))

    @property
    def n_features(self) -> int:
        return int(self.shift.size)

    def apply(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.shift) * self.scale


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """Shape of a built-in model; ``hidden`` is the MLP width (0 for logistic).

    ``n_classes`` 2 is the sigmoid model (one logit); K > 2 the softmax model
    (K logits).
    """

    kind: ModelKind
    n_features: int
    hidden: int = 16
    n_classes: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ModelKind(self.kind))
        check_count("n_features", self.n_features)
        check_count("n_classes", self.n_classes, minimum=2)
        if self.n_classes > 1024:
            raise ValueError(f"n_classes must lie in [2, 1024]; got {self.n_classes}")
        if self.kind is ModelKind.LOGISTIC:
            object.__setattr__(self, "hidden", 0)
            return
        check_count("hidden", self.hidden)
        if self.hidden > 4096:
            raise ValueError(f"hidden must lie in [1, 4096]; got {self.hidden}")

    @property
    def n_outputs(self) -> int:
        """Logits per row: 1 for two classes, else ``n_classes``."""
        return 1 if self.n_classes == 2 else self.n_classes

    @property
    def n_params(self) -> int:
        """P: (d + 1)·o (logistic) or d·h + h + (h + 1)·o (MLP), o = :attr:`n_outputs`."""
        d, h, o = self.n_features, self.hidden, self.n_outputs
        return (d + 1) * o if self.kind is ModelKind.LOGISTIC else d * h + h + (h + 1) * o

    def unpack(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """Views of ``params`` by name (``w, b`` or ``W1, b1, w2, b2``).

        Two classes: ``w`` (d,), ``w2`` (h,), ``b``/``b2`` (1,); K classes:
        ``w`` (K, d), ``w2`` (K, h), ``b``/``b2`` (K,).
        """
        params = check_params(self, params)
        d, h, o = self.n_features, self.hidden, self.n_outputs
        shape = (lambda n: (n,)) if o == 1 else (lambda n: (o, n))
        if self.kind is ModelKind.LOGISTIC:
            return {"w": params[: o * d].reshape(shape(d)), "b": params[o * d :]}
        return {
            "W1": params[: h * d].reshape(h, d),
            "b1": params[h * d : h * d + h],
            "w2": params[h * d + h : h * d + h + o * h].reshape(shape(h)),
            "b2": params[h * d + h + o * h :],
        }

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """Data-independent starting point (public: drawn from the server's generator).

        Logistic regression starts at 0 (the loss is convex). The MLP uses
        PyTorch's default ``nn.Linear`` init, U(−1/√fan_in, 1/√fan_in) for
        every weight and bias, which a zero start would not break the symmetry of.
        """
        check_generator("rng", rng)
        if self.kind is ModelKind.LOGISTIC:
            return np.zeros(self.n_params)
        d, h, o = self.n_features, self.hidden, self.n_outputs
        first = rng.uniform(-1.0, 1.0, size=h * d + h) / math.sqrt(d)
        second = rng.uniform(-1.0, 1.0, size=(h + 1) * o) / math.sqrt(h)
        return np.concatenate([first, second])

    def model(
        self,
        params: np.ndarray,
        input_map: InputMap | None = None,
        *,
        recalibration: LinearRecalibration | None = None,
    ) -> NetworkModel:
        """The released model with parameters ``params`` (its input map, its recalibration)."""
        return NetworkModel(self, params, input_map, recalibration)

    def decision_function(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Logits f_θ(x) of the rows of ``X``: (n,) for two classes, else (n, K)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"X must be (n, {self.n_features}); got {X.shape}")
        p = self.unpack(params)
        if self.kind is ModelKind.LOGISTIC:
            inner, w, b = X, p["w"], p["b"]
        else:
            inner, w, b = np.maximum(X @ p["W1"].T + p["b1"], 0.0), p["w2"], p["b2"]
        return inner @ w + b[0] if self.n_outputs == 1 else inner @ w.T + b


def check_params(spec: NetworkSpec, params: np.ndarray) -> np.ndarray:
    """``params`` as a finite float64 vector of length ``spec.n_params``."""
    params = np.asarray(params, dtype=np.float64)
    if params.shape != (spec.n_params,):
        raise ValueError(
            f"{spec.kind.value} with d={spec.n_features}, h={spec.hidden} has "
            f"{spec.n_params} parameters; got shape {params.shape}"
        )
    # One reduction instead of isfinite + all (this runs every step): a NaN or
    # an infinity makes the sum non-finite; so do values near 1e308, never valid.
    if not math.isfinite(np.add.reduce(params)):
        raise ValueError("parameters must be finite")
    return params


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function, without overflow for large |z|."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (n, K) logits, without overflow."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def per_example_gradients(
    spec: NetworkSpec, params: np.ndarray, X: np.ndarray, y: np.ndarray
) -> np.ndarray:
    """(n, P) gradients of ℓ(θ; x_i, y_i), in the parameter layout of ``spec``.

    With r = σ(f) − y (∂ℓ/∂f): logistic ∇ = r·[x, 1]; MLP, with a = ReLU(W1 x +
    b1) and u = r·w2 ⊙ 1[W1 x + b1 > 0] (ReLU's derivative is 0 at 0, as in
    PyTorch): ∇W1 = u xᵀ, ∇b1 = u, ∇w2 = r·a, ∇b2 = r. K classes: r =
    softmax(f) − e_y (K,), ∇W = r xᵀ, ∇b = r; MLP u = W2ᵀ r ⊙ 1[z > 0].
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    p = spec.unpack(params)
    n = X.shape[0]
    if spec.n_outputs > 1:
        r = softmax(spec.decision_function(params, X))
        r[np.arange(n), y.astype(np.int64)] -= 1.0
        if spec.kind is ModelKind.LOGISTIC:
            return np.column_stack([(r[:, :, None] * X[:, None, :]).reshape(n, -1), r])
        pre = X @ p["W1"].T + p["b1"]
        a = np.maximum(pre, 0.0)
        u = (r @ p["w2"]) * (pre > 0)
        dW1 = (u[:, :, None] * X[:, None, :]).reshape(n, -1)
        dW2 = (r[:, :, None] * a[:, None, :]).reshape(n, -1)
        return np.column_stack([dW1, u, dW2, r])
    if spec.kind is ModelKind.LOGISTIC:
        r = sigmoid(X @ p["w"] + p["b"][0]) - y
        return np.column_stack([r[:, None] * X, r])
    pre = X @ p["W1"].T + p["b1"]
    a = np.maximum(pre, 0.0)
    r = sigmoid(a @ p["w2"] + p["b2"][0]) - y
    u = r[:, None] * p["w2"][None, :] * (pre > 0)
    dW1 = (u[:, :, None] * X[:, None, :]).reshape(n, spec.hidden * spec.n_features)
    return np.column_stack([dW1, u, r[:, None] * a, r])


def clip_factors(norms: np.ndarray, clip: float) -> np.ndarray:
    """min(1, C/‖g‖) per example (1 for a zero gradient)."""
    # C / max(‖g‖, C) = min(1, C/‖g‖), without dividing by a zero norm.
    return clip / np.maximum(norms, clip)


def clipped_gradient_sum(
    spec: NetworkSpec,
    params: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    clip: float,
    *,
    bias_bound: float = 0.0,
) -> np.ndarray:
    """Σ_i g_i · min(1, C/‖g_i‖₂): the DP-SGD sum whose L2 sensitivity is C.

    ``bias_bound`` B > 0: the output bias's gradient r (o coordinates, the
    last of θ) is clipped on its own to ‖r‖ ≤ B and the rest of g to C, so one
    record moves the sum by at most √(C² + B²) (module docstring). A
    vectorised numpy reference (it materialises the n × P gradients); the
    clients use the compiled kernels, which agree to rounding.
    """
    grads = per_example_gradients(spec, params, X, y)
    if bias_bound == 0:
        return clip_factors(np.linalg.norm(grads, axis=1), clip) @ grads
    o = spec.n_outputs
    rest, bias = grads[:, :-o], grads[:, -o:]
    return np.concatenate(
        [
            clip_factors(np.linalg.norm(rest, axis=1), clip) @ rest,
            clip_factors(np.linalg.norm(bias, axis=1), bias_bound) @ bias,
        ]
    )


@dataclass(frozen=True)
class NetworkModel(ReleasedModel):
    """A released DP-SGD model: its spec, parameters, public input map and, with the
    ``linear`` recalibration, the released map of its probabilities."""

    spec: NetworkSpec
    params: np.ndarray
    input_map: InputMap | None = None
    recalibration: LinearRecalibration | None = None

    def __post_init__(self) -> None:
        params = check_params(self.spec, self.params).copy()
        params.flags.writeable = False
        object.__setattr__(self, "params", params)
        imap = self.input_map or InputMap.identity(self.spec.n_features)
        if imap.n_features != self.spec.n_features:
            raise ValueError(f"input map has {imap.n_features} features; model {self.spec}")
        object.__setattr__(self, "input_map", imap)
        if self.recalibration is not None and self.recalibration.n_classes != self.spec.n_classes:
            raise ValueError(
                f"recalibration maps {self.recalibration.n_classes} classes; model "
                f"{self.spec.n_classes}"
            )

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Logits per row (the recalibrated probabilities' log-odds / logs when recalibrated)."""
        if self.recalibration is None:
            return self.spec.decision_function(self.params, self.input_map.apply(X))
        with np.errstate(divide="ignore"):
            P = self.predict_proba(X)
            return np.log(P) - np.log1p(-P) if P.ndim == 1 else np.log(P)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(y = 1 | x) per row (two classes), else (n, K) class probabilities."""
        f = self.spec.decision_function(self.params, self.input_map.apply(X))
        P = sigmoid(f) if self.spec.n_outputs == 1 else softmax(f)
        return P if self.recalibration is None else self.recalibration.apply(P)

    def to_arrays(self) -> dict[str, np.ndarray]:
        s = self.spec
        return {
            "params": np.asarray(self.params),
            # Numeric, so every transport (Flower's Array, np.savez) carries it.
            "kind": np.array(_KINDS.index(s.kind), dtype=np.int64),
            "shape": np.array([s.n_features, s.hidden, s.n_classes], dtype=np.int64),
            "input_shift": np.asarray(self.input_map.shift),
            "input_scale": np.asarray(self.input_map.scale),
        } | ({} if self.recalibration is None else {"recalibration": self.recalibration.to_array()})

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> NetworkModel:
        d, h, *k = (int(v) for v in arrays["shape"])  # files before softmax: [d, h]
        kind = _KINDS[int(arrays["kind"])]
        spec = NetworkSpec(kind=kind, n_features=d, hidden=h, n_classes=k[0] if k else 2)
        imap = InputMap(arrays["input_shift"], arrays["input_scale"])
        recal = arrays.get("recalibration")
        recal = None if recal is None else LinearRecalibration.from_array(recal)
        return cls(spec, np.asarray(arrays["params"], dtype=np.float64), imap, recal)
