"""How much of a released GAM's shape is noise: a per-bin bound from the privacy card.

Every column round of DP-EBM (:mod:`fedpriv.strategies.gam`) releases the
term's per-bin sums ``(G̃_b, H̃_b) = (G_b, H_b) + N(0, σ²)`` with ``σ = z·Δ``
(``z`` the round's noise multiplier, recorded in the privacy card's event;
``Δ`` the reply's public sensitivity) and adds the damped Newton step

    s_b = clip(−η G̃_b / (max(H̃_b, 0) + λ), ±max_update),   λ = max(lam·σ, reg_lambda),

to bin ``b``'s shape (a numeric term's sums kernel-smoothed first, which
only lowers the noise: a row-normalised kernel gives variance σ² Σ_j W_bj² ≤ σ²).
The gradient noise moves the step by ``η N(0, σ²)/(max(H̃_b, 0) + λ)``, whose
standard deviation is at most ``η σ / λ`` (the denominator is at least λ), and
by at most ``max_update`` (the clip). The rounds' noises are independent, so a
bin updated in rounds ``r ∈ R_k`` carries noise of standard deviation at most

    sd_b ≤ √( Σ_{r ∈ R_k} min(η σ_r / λ_r, max_update)² ).

:func:`with_noise_band` computes that bound for every bin from public values
only: the labels and noise multipliers of the card's events (which rounds
updated which term), the public sensitivities and the run's settings. It is an
upper bound: a bin with many records has ``H_b ≫ λ`` and far less noise, but
``H_b`` is a private sum the model does not carry. The hessian noise changes
the step's scale by a relative ``σ/(H̃_b + λ) ≤ 1/lam`` more, not drawn.

A binary-group round (``round t: binary group``) updates the positive bin of
each grouped binary term with ``σ = z·√s·Δ`` (:mod:`fedpriv.models.gam_group`);
a softmax model's step carries the factor ``(C − 1)/C``
(:func:`~fedpriv.models.gam_softmax.softmax_step_scale`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedpriv.models.explain import GAMExplanation, with_terms
from fedpriv.models.gam_group import binary_terms, group_sensitivity
from fedpriv.models.gam_sensitivity import column_sensitivity
from fedpriv.models.gam_softmax import softmax_step_scale

_TERM = re.compile(r"^round (\d+): term (\d+) bin")
_GROUP = re.compile(r"^round (\d+): binary group")
_GAUSSIAN = "GaussianDpEvent"

#: What the band is, in one sentence (the page and ``inspect --terms`` print it).
NOISE_RULE = (
    "an upper bound on the noise's standard deviation in each bin: "
    "√(Σ over the rounds that updated the term of min(η·σ_r/λ_r, max_update)²), "
    "σ_r = z_r·Δ from the card's events, λ_r = max(lam·σ_r, reg_lambda); "
    "bins holding many records carry less (fedpriv.models.gam_noise)"
)


def _multiplier(spec: Mapping[str, Any] | None) -> float | None:
    """The noise multiplier of a plain Gaussian event's dict, else ``None``."""
    if not isinstance(spec, Mapping) or not str(spec.get("type", "")).endswith(_GAUSSIAN):
        return None
    z = spec.get("noise_multiplier")
    return float(z) if isinstance(z, int | float) and math.isfinite(z) and z > 0 else None


def visit_variance(
    z: float, sensitivity: float, settings: Mapping[str, Any], n_classes: int = 2
) -> float:
    """One visit's bound on a bin step's noise variance: ``min(η σ / λ, max_update)²``."""
    sigma = z * sensitivity
    lam = max(float(settings["lam"]) * sigma, float(settings["reg_lambda"]))
    rate = float(settings["learning_rate"])
    if n_classes > 2:
        rate *= softmax_step_scale(n_classes)
    return min(rate * sigma / lam, float(settings["max_update"])) ** 2


def noise_variances(
    model: Any, events: Iterable[tuple[str, Mapping[str, Any] | None]], settings: Mapping[str, Any]
) -> tuple[list[np.ndarray], list[int]] | None:
    """Per term, each bin's bound on the noise variance, and how many rounds updated it.

    Parameters
    ----------
    model : GAMModel
        The released model (its public binning; its shapes are not read).
    events : iterable of (label, event dict)
        The run's releases in order (the privacy card's, or ``privacy.json``'s).
    settings : mapping
        The run's public settings (snake-case keys ``learning_rate``, ``lam``,
        ``reg_lambda``, ``max_update``, ``binary_group``).

    Returns ``None`` when a term round's event is not a plain Gaussian (the bound
    would not hold as stated) or a setting is missing.
    """
    terms, C = model.terms, model.n_classes
    if any(k not in settings for k in ("learning_rate", "lam", "reg_lambda", "max_update")):
        return None
    var = [np.zeros(terms.n_bins(k)) for k in range(terms.m)]
    visits = [0] * terms.m
    s = int(settings.get("binary_group") or 0)
    group = binary_terms(terms) if s and C == 2 else np.zeros(0, dtype=np.int64)
    group = group if group.size >= 2 else np.zeros(0, dtype=np.int64)
    for label, spec in events:
        term, grouped = _TERM.match(label or ""), _GROUP.match(label or "")
        if not (term or grouped):
            continue
        z = _multiplier(spec)
        if z is None:
            return None
        if term:
            k = int(term.group(2))
            if not 0 <= k < terms.m:
                return None
            var[k] += visit_variance(z, column_sensitivity(C), settings, C)
            visits[k] += 1
        else:
            v = visit_variance(z, group_sensitivity(s), settings) if s else 0.0
            for k in group.tolist():
                var[k][1] += v  # a group round moves only the positive bin
                visits[k] += 1
    return var, visits


def with_noise_band(
    explanation: GAMExplanation,
    model: Any,
    events: Iterable[tuple[str, Mapping[str, Any] | None]],
    settings: Mapping[str, Any],
) -> GAMExplanation:
    """``explanation`` with each bin's noise bound (module docstring) and its visits;
    unchanged (no band) when the card does not allow the bound."""
    found = noise_variances(model, events, settings)
    if found is None:
        return explanation
    var, visits = found
    terms = [
        _with(t, np.sqrt(v), n) for t, v, n in zip(explanation.terms, var, visits, strict=True)
    ]
    return with_terms(explanation, terms, NOISE_RULE)


def _with(term: Any, std: np.ndarray, visits: int) -> Any:
    from dataclasses import replace

    return replace(term, noise_std=std, visits=visits)
