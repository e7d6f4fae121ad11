"""DP histogram boosting (DP-EBM): the client half.

Round 0 (``phase = "intercept"``): the client returns (Σg, Σh) of all its
rows at margin 0 (g = ½ − y, h = ¼), followed, when the query's ``grid`` is
positive, by every numeric term's counts on that many equal cells of [0, 1]
(:func:`fedpriv.models.gam.fine_histograms`). Round t ≥ 1 (``phase =
"term"``): it scores all its rows with the released model in the query and
returns the per-bin ``[Σg | Σh]`` of the query's term, g and h clipped to
the bounds the server's sensitivity assumes (:func:`fedpriv.models.gam.bin_sums`;
a softmax model's: :func:`fedpriv.models.gam_softmax.softmax_bin_sums`). A
group round (``phase = "group"``) returns the binary terms' positive-bin sums,
each record's share scaled to count fully in at most ``sparsity`` of them
(:func:`fedpriv.models.gam_group.group_sums`). The
pair stage's rounds (``phase = "select"``: every candidate pair's per-cell
sums, concatenated; ``phase = "pair"``: one kept pair's) are scored the same
way, a record's cell standing for its bin.

The handler keeps only a cache of its rows' bins (keyed by the public
binning), which a runtime may drop: the reply is a function of the query and
the rows alone, so every runtime gets the same floats.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fedpriv.federation.protocol import ClientData, Query, require_every_record
from fedpriv.models.gam import (
    GAMModel,
    Terms,
    bin_matrix,
    bin_sums,
    fine_histograms,
    intercept_sums,
)
from fedpriv.models.gam_group import binary_terms, group_sums
from fedpriv.models.gam_pairs import pairs_from_arrays
from fedpriv.models.gam_softmax import softmax_bin_sums, softmax_intercept_sums
from fedpriv.privacy.randomness import SecretKey


def _binning_key(terms: Terms) -> str:
    h = hashlib.sha256()
    for a in terms.to_arrays().values():
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _sums(model: GAMModel, f: np.ndarray, y: np.ndarray, bins: np.ndarray, n: int):
    """``[Σg | Σh]`` over ``n`` bins (or cells): one logit, or C classes (softmax)."""
    if model.n_classes == 2:
        return bin_sums(f, y, bins, n)
    return softmax_bin_sums(f, y, bins, n, model.n_classes)


class GAMClient:
    """Client handler for :class:`strategies.gam.DPGAMStrategy`."""

    method = "dp_gam"
    #: State entries that only save work (a runtime that serialises state drops them).
    cache_keys = ("bins", "bins_key")

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        require_every_record(sample, data, "DP-EBM counts every record in every round")
        phase = str(query.config["phase"])
        if phase == "intercept":
            C = int(query.config.get("n_classes", 2))
            out = intercept_sums(data.y) if C == 2 else softmax_intercept_sums(data.y, C)
            grid = int(query.config["grid"])
            if grid > 0:
                terms = Terms.from_arrays(dict(query.arrays))
                terms.check_features(data.XT.shape[0])
                out = np.concatenate([out, fine_histograms(terms, data.XT, grid)])
        elif phase in ("term", "group", "pair", "select"):
            arrays = dict(query.arrays)
            model = GAMModel.from_arrays(arrays)
            bins = self._bins(model.terms, data, state)
            f = model.margins(bins)
            if phase == "group":
                group = np.asarray(arrays["group"], dtype=np.int64)
                if model.n_classes != 2 or not set(group.tolist()) <= set(
                    binary_terms(model.terms).tolist()
                ):
                    raise ValueError("a group round needs two classes and binary terms only")
                out = group_sums(f, data.y, bins[group] == 1, int(query.config["sparsity"]))
            elif phase == "term":
                k = int(query.config["term"])
                if not 0 <= k < model.terms.m:
                    raise ValueError(f"term must lie in [0, {model.terms.m}); got {k}")
                out = _sums(model, f, data.y, bins[k], model.terms.n_bins(k))
            elif phase == "pair":
                j = int(query.config["pair"])
                if not 0 <= j < len(model.pairs):
                    raise ValueError(f"pair must lie in [0, {len(model.pairs)}); got {j}")
                pair = model.pairs[j]
                out = _sums(model, f, data.y, pair.cells(bins), pair.n_cells)
            else:
                cands = pairs_from_arrays(arrays, model.terms.n_bins, prefix="candidate")
                out = np.concatenate(
                    [_sums(model, f, data.y, p.cells(bins), p.n_cells) for p in cands]
                )
        else:
            raise ValueError(
                f"phase must be one of ['intercept', 'term', 'group', 'pair', 'select']; "
                f"got {phase!r}"
            )
        if out.size != query.reply_length:
            raise ValueError(
                f"reply has {out.size} values; the query asks for {query.reply_length}"
            )
        return out

    @staticmethod
    def _bins(terms: Terms, data: ClientData, state: dict[str, Any]) -> np.ndarray:
        key = _binning_key(terms)
        if state.get("bins_key") != key or state.get("bins") is None:
            state["bins"] = bin_matrix(terms, data.XT)
            state["bins_key"] = key
        return state["bins"]
