"""DP-SGD logistic regression and MLP: the client half.

Given the public query (the current parameters θ, the model's shape, its
public input map and the clipping norm C), a client returns
Σ_i ∇ℓ(θ; x_i, y_i) · min(1, C/‖∇ℓ_i‖) over its Poisson sample (benchmark
paper §3.5; Abadi et al. 2016, Alg. 1), with the output bias's part clipped
on its own to B when the query says so (``bias_bound``). In the centring
round (``stage="centre"``) it returns Σ_i x̃_i · min(1, R/‖x̃_i‖) over all its
rows, x̃ the mapped row (:mod:`fedpriv.strategies.dpsgd`). Nothing else leaves the client: no
count, no loss. The handler keeps no state between steps; everything it needs
is in the query.

Every clip comes from the query's config (``clip_norm``, ``bias_bound``,
``n_classes``), read by the same functions in :meth:`DPSGDClient.answer` and
:meth:`DPSGDClient.reply_sensitivity`, so the bound a node derives is the one
enforced; a missing, non-finite or unknown setting is refused.

Unit-level privacy (``data.units``, :mod:`fedpriv.privacy.units`): a centring or
step query is answered with one clipped sum per sampled unit
(:mod:`fedpriv.models.sgd_units`), so a unit moves it by C as a record did
(:meth:`DPSGDClient.unit_sensitivity`); the recalibration sums stay per record and
a unit moves them m times as far.

Two backends answer the same query with the same floats up to rounding:

* ``"fast"``: compiled closed forms for the built-in models
  (:mod:`fedpriv.models._sgd_kernels`);
* ``"opacus"``: per-sample gradients of a torch module through Opacus's
  ``GradSampleModule`` (:mod:`fedpriv.models.opacus_backend`). It is the
  path for a user's own ``torch.nn.Module`` (pass ``module=``); torch is
  imported only when it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from fedpriv.clients.query_settings import bound_setting, choice_setting, count_setting

from fedpriv.federation.protocol import (
    ClientData,
    ClientHandler,
    Query,
    ReplySensitivity,
    scaled_sensitivity,
)
from fedpriv.models import recalibration as linear_recal
from fedpriv.models import sgd_recalibration as recal
from fedpriv.models.networks import InputMap, NetworkSpec
from fedpriv.models.sgd_sums import (
    CENTRE,
    STEP,
    RowBlocks,
    clipped_sum_sensitivity,
    compiled_clipped_sums,
    compiled_feature_sums,
)
from fedpriv.models.sgd_units import unit_clipped_feature_sum, unit_clipped_gradient_sum
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import class_codes

if TYPE_CHECKING:
    from torch import nn

#: Query ``config["model"]`` for a user-supplied torch module.
CUSTOM = "module"
#: The stages a query can name (``config["stage"]``; absent: a step).
STAGES = (CENTRE, STEP, recal.RECALIBRATE, recal.LINEAR)


class DPSGDClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.dpsgd.DPSGDStrategy`.

    Parameters
    ----------
    module : torch.nn.Module, optional
        A user's model for queries with ``model="module"`` (Opacus backend
        only): it maps (n, d) inputs to n logits, and its
        ``parameters_to_vector`` layout is the query's parameter vector.
    """

    method = "dpsgd"

    def __init__(self, *, module: nn.Module | None = None) -> None:
        self.module = module
        self._opacus: dict[tuple, Any] = {}  # one GradSampleModule per model shape
        self._specs: dict[tuple, NetworkSpec] = {}
        self._map: tuple[np.ndarray, np.ndarray, InputMap] | None = None

    def _spec(self, query: Query, n_features: int) -> NetworkSpec | None:
        kind = query.config["model"]
        if kind == CUSTOM:
            return None
        n_classes = count_setting(query, "n_classes", minimum=2)
        key = (kind, n_features, int(query.config["hidden"]), n_classes)
        if (spec := self._specs.get(key)) is None:
            spec = self._specs[key] = NetworkSpec(
                kind=kind, n_features=n_features, hidden=key[2], n_classes=key[3]
            )
        return spec

    def _input_map(self, query: Query) -> InputMap:
        # In process every query carries the same (read-only) arrays: check them once.
        shift, scale = query.arrays["input_shift"], query.arrays["input_scale"]
        if self._map is None or self._map[0] is not shift or self._map[1] is not scale:
            self._map = (shift, scale, InputMap(shift, scale))
        return self._map[2]

    def _opacus_backend(self, spec: NetworkSpec | None):
        from fedpriv.models.opacus_backend import OpacusGradients, builtin_module

        key = (
            ("module",)
            if spec is None
            else (spec.kind, spec.n_features, spec.hidden, spec.n_classes)
        )
        if key not in self._opacus:
            if spec is None:
                if self.module is None:
                    raise ValueError("query asks for a custom module, but this client has none")
                self._opacus[key] = OpacusGradients(self.module)
            else:
                self._opacus[key] = OpacusGradients(builtin_module(spec))
        return self._opacus[key]

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """The query's stage and the (L1, L2) change one record makes to the reply, from
        its ``stage``, ``clip_norm``, ``bias_bound``, ``n_classes`` and ``reply_length``.

        Centring and steps: a clipped sum (:func:`~fedpriv.models.sgd_sums.
        clipped_sum_sensitivity`); ``recalibrate``: :func:`fedpriv.models.
        sgd_recalibration.sensitivity` of the class count; ``recalibrate_linear``:
        the affine map's constants (:mod:`fedpriv.models.recalibration`).
        """
        stage = _stage(query)
        if stage == recal.LINEAR:
            return ReplySensitivity(
                stage=stage, l1=linear_recal.L1_SENSITIVITY, l2=linear_recal.SENSITIVITY
            )
        if stage == recal.RECALIBRATE:
            n_classes = count_setting(query, "n_classes", minimum=2)
            outputs = 1 if n_classes == 2 else n_classes
            return ReplySensitivity(
                stage=stage, l1=recal.l1_sensitivity(outputs), l2=recal.sensitivity(outputs)
            )
        clip, bias_bound = _clips(query, stage)
        l1, l2 = clipped_sum_sensitivity(
            clip_norm=clip, bias_bound=bias_bound, dims=query.reply_length
        )
        return ReplySensitivity(stage=stage, l1=l1, l2=l2)

    def unit_sensitivity(self, query: Query, max_records: int) -> ReplySensitivity:
        """A unit's: centring and steps clip one sum per unit (the record's bound holds
        per unit); the recalibration sums are per record, m times the record's."""
        sens = self.reply_sensitivity(query)
        if sens.stage in (CENTRE, STEP):
            return sens
        return scaled_sensitivity(sens, max_records)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        if data.units is not None and _stage(query) in (CENTRE, STEP):
            return self._unit_answer(query, data, sample)
        return self._answer(query, [data], [sample], RowBlocks.of([data.X_rows], [data.y]))[0]

    def _unit_answer(self, query: Query, data: ClientData, sample: np.ndarray) -> np.ndarray:
        """A centring or step reply with one clipped sum per sampled unit (module docstring)."""
        stage = _stage(query)
        clip, bias_bound = _clips(query, stage)
        rows = _check_rows(sample, data.n)
        X = self._input_map(query).apply(data.X_rows[rows])
        units = data.units[rows]
        if stage == CENTRE:
            return unit_clipped_feature_sum(X, units, clip)
        spec = self._spec(query, data.X.shape[1])
        if spec is None:
            raise ValueError(
                "unit-level privacy clips one gradient sum per unit with the built-in models' "
                "per-example gradients; a custom module is not supported"
            )
        params = query.arrays["params"]
        return unit_clipped_gradient_sum(
            spec, params, X, data.y[rows], units, clip, bias_bound=bias_bound
        )

    def answer_many(
        self,
        query: Query,
        datas: Sequence[ClientData],
        samples: Sequence[np.ndarray],
        state: dict[str, Any],
        keys: Sequence[SecretKey] | None = None,
    ) -> np.ndarray:
        """All clients' replies at once (rows of the result), bit-identical to :meth:`answer`.

        The compiled backend serves every client in one call over their rows
        side by side; each client's sum runs over its own sample in the same
        order as when it is served alone (:mod:`fedpriv.models._sgd_kernels`).
        """
        if any(d.units is not None for d in datas):  # one clipped sum per unit: per client
            return np.stack(
                [self.answer(query, d, s, state) for d, s in zip(datas, samples, strict=True)]
            )
        ids = tuple(d.client_id for d in datas)
        if state.get("ids") != ids:
            state.clear()
            state.update(
                ids=ids, blocks=RowBlocks.of([d.X_rows for d in datas], [d.y for d in datas])
            )
        return self._answer(query, datas, samples, state["blocks"])

    def _answer(
        self,
        query: Query,
        datas: Sequence[ClientData],
        samples: Sequence[np.ndarray],
        blocks: RowBlocks,
    ) -> np.ndarray:
        stage = _stage(query)
        imap = self._input_map(query)
        if stage == CENTRE:
            return compiled_feature_sums(blocks, imap, _clips(query, stage)[0], list(samples))
        params = query.arrays["params"]
        if stage == recal.LINEAR:
            spec = self._spec(query, blocks.n_features)
            rows = [_check_rows(s, d.n) for d, s in zip(datas, samples, strict=True)]
            model = spec.model(params)
            return np.stack(
                [
                    linear_recal.record_sums(
                        model.predict_proba(imap.apply(d.X[r])),
                        class_codes(d.y[r], spec.n_classes),
                    )
                    for d, r in zip(datas, rows, strict=True)
                ]
            )
        if stage == recal.RECALIBRATE:
            spec = self._spec(query, blocks.n_features)
            rows = [_check_rows(s, d.n) for d, s in zip(datas, samples, strict=True)]
            return np.stack(
                [
                    recal.record_sums(spec, params, imap.apply(d.X[r]), d.y[r])
                    for d, r in zip(datas, rows, strict=True)
                ]
            )
        clip, bias_bound = _clips(query, stage)
        spec = self._spec(query, blocks.n_features)
        backend = query.config.get("backend", "fast")
        if backend == "fast" and spec is not None:
            return compiled_clipped_sums(
                spec, params, blocks, clip, list(samples), imap, bias_bound=bias_bound
            )
        if backend != "opacus":
            raise ValueError(
                f"backend must be 'fast' or 'opacus' (a custom module needs 'opacus'); "
                f"got {backend!r}"
            )
        grads = self._opacus_backend(spec)
        rows = [_check_rows(s, d.n) for d, s in zip(datas, samples, strict=True)]
        X = imap.apply(np.concatenate([d.X[r] for d, r in zip(datas, rows, strict=True)]))
        y = np.concatenate([d.y[r] for d, r in zip(datas, rows, strict=True)])
        return grads.clipped_sums(params, X, y, clip, [r.size for r in rows], bias_bound=bias_bound)


def _stage(query: Query) -> str:
    """The query's stage (:data:`STAGES`; no ``stage``: a step)."""
    return choice_setting(query, "stage", STAGES, default=STEP)


def _clips(query: Query, stage: str) -> tuple[float, float]:
    """(C, B) of a centring or step query: its ``clip_norm``, and a step's ``bias_bound``
    (0: the whole gradient clipped jointly to C)."""
    clip = bound_setting(query, "clip_norm")
    return clip, (bound_setting(query, "bias_bound", zero=True) if stage == STEP else 0.0)


def _check_rows(sample: np.ndarray, n: int) -> np.ndarray:
    rows = np.asarray(sample, dtype=np.int64)
    if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= n)):
        raise ValueError(f"sample must be 1-D row indices in [0, {n}); got {sample!r}")
    return rows
