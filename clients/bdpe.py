"""bdpe_α: the client half (one level of one tree per round).

A level round's query holds the released ensemble, the tree being grown (its first
2^k − 1 heap nodes set) and the public candidate splits. The client computes
its rows' boosting weights from the released ensemble and its own labels
(w = ψ_α⁻¹(−y±H), clipped to [0, 1] where computed), routes each row to its
node at level k and returns ``[node (w¹, w⁰) | left-child (w¹, w⁰) of every
candidate]`` for every node (:func:`fedpriv.models.bdpe.level_sums`). Nothing
else leaves it; its weights are a function of the query and its rows, so a
runtime may drop the handler's state (caches of the rows' candidate bins
and of their margin under the trees released so far).
The calibration round asks for each class's record count in public bins of
the released margin H (:func:`calibration_counts`). In process,
:meth:`BDPEClient.answer_many` answers every client at once, bit for bit as each
would (:mod:`fedpriv.clients.batched`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.clients import batched
from fedpriv.clients.reply_settings import require_rate, setting_choice, setting_int

from fedpriv.federation import protocol
from fedpriv.federation.protocol import ClientData, ClientHandler, Query, ReplySensitivity
from fedpriv.models.bdpe import example_weights, feature_bins, level_cells, level_sums
from fedpriv.models.bdpe_model import BDPEModel, node_of_rows
from fedpriv.models.forest_sensitivity import (
    LEAF_MASSES,
    leaf_mass_sensitivity,
    level_sum_sensitivity,
    record_count_sensitivity,
)
from fedpriv.privacy.randomness import SecretKey
from fedpriv.records import class_codes


def thresholds_of(cand_feature: np.ndarray, cand_threshold: np.ndarray, d: int):
    """The query's candidates as one ascending threshold array per feature, in order."""
    f = np.asarray(cand_feature, dtype=np.int64)
    t = np.asarray(cand_threshold, dtype=np.float64)
    if f.shape != t.shape or f.ndim != 1 or np.any(np.diff(f) < 0) or f.size == 0:
        raise ValueError("candidates must be non-empty and grouped by ascending feature")
    if f[0] < 0 or f[-1] >= d:
        raise ValueError(f"candidate features must lie in [0, {d}); got [{f[0]}, {f[-1]}]")
    out = [t[f == j] for j in range(d)]
    if any(np.any(np.diff(x) <= 0) for x in out):
        raise ValueError("each feature's candidate thresholds must be strictly increasing")
    return out


class BDPEClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.bdpe.BDPEStrategy`."""

    method = "bdpe"
    #: State entries that only save work (a runtime that serialises state drops them).
    cache_keys = ("bins", "bins_key", "margins", "margin_trees", "margin_key")
    #: The deepest tree (:class:`fedpriv.strategies.bdpe.BDPEConfig`).
    MAX_DEPTH = 10

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """A level round: the level sums over ``candidates`` splits
        (:func:`level_sum_sensitivity`), stage ``split``, or ``leaves`` for a tree's last
        level (whose sums also feed the leaves); the calibration round: one count per
        record (stage ``calibration``). Every record, every round (q = 1)."""
        require_rate(query)
        phase = setting_choice(query, "phase", ("level", "calibrate"))
        if phase == "calibrate":
            l1, l2 = record_count_sensitivity()
            return ReplySensitivity(stage="calibration", l1=l1, l2=l2)
        depth = setting_int(query, "depth", maximum=self.MAX_DEPTH)
        level = setting_int(query, "level", minimum=0, maximum=depth - 1)
        l1, l2 = level_sum_sensitivity(setting_int(query, "candidates"))
        if level < depth - 1:
            return ReplySensitivity(stage="split", l1=l1, l2=l2)
        # The last level's sums also give the leaves' (w¹, w⁰), released on their own.
        parts = {LEAF_MASSES: leaf_mass_sensitivity()}
        return ReplySensitivity(stage="leaves", l1=l1, l2=l2, parts=parts)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        protocol.require_every_record(sample, data, "bdpe counts every record in every level")
        arrays = dict(query.arrays)
        model = BDPEModel.from_arrays(arrays)  # routing checks every split feature
        y = class_codes(data.y, 2)  # −1: not a class, counted nowhere
        H = self._margins(model, data, state)
        phase = str(query.config.get("phase"))
        if phase == "calibrate":
            out = calibration_counts(H, y, arrays["edges"])
        elif phase == "level":
            w = example_weights(H, np.maximum(y, 0), model.alpha)
            out = self._level(query, arrays, model, data, y, w, state)
        else:
            raise ValueError(f"phase must be one of ['level', 'calibrate']; got {phase!r}")
        if out.size != query.reply_length:
            raise ValueError(
                f"reply has {out.size} values; the query asks for {query.reply_length}"
            )
        return out

    def _level(self, query, arrays, model, data: ClientData, y, w, state) -> np.ndarray:
        level, feature, threshold, thresholds = _level_query(query, arrays, model, data.XT.shape[0])
        node = node_of_rows(feature, threshold, level, data.X)
        bins = self._bins(arrays, thresholds, data, state)
        left, total = level_sums(bins, thresholds, node, 1 << level, y, w)
        return np.concatenate([total.ravel(), left.ravel()])

    def answer_many(self, query, datas, samples, state, keys=None) -> np.ndarray:
        """All clients' replies (rows), each bit-identical to :meth:`answer`'s.

        The rows are scored, routed and binned once, end to end
        (:mod:`fedpriv.clients.batched`), the margins continued as :meth:`answer`
        continues them (same trees, same order); each client's sums are the slots
        of one histogram that carry its position (:func:`level_sums_many`,
        :func:`calibration_counts_many`). A client the round did not ask (an
        empty sample) gets zeros; ``state`` is the runtime's one shared state.
        """
        active = batched.answering(datas, samples, "bdpe counts every record in every level")
        rows = batched.client_rows(datas, state)
        arrays = dict(query.arrays)
        model = BDPEModel.from_arrays(arrays)
        y = class_codes(rows.data.y, 2)
        H = self._margins(model, rows.data, state)
        phase = str(query.config.get("phase"))
        if phase == "calibrate":
            out = calibration_counts_many(H, y, arrays["edges"], rows)
        elif phase == "level":
            w = example_weights(H, np.maximum(y, 0), model.alpha)
            d = rows.data.XT.shape[0]
            level, feature, threshold, thresholds = _level_query(query, arrays, model, d)
            node = node_of_rows(feature, threshold, level, rows.data.X)
            bins = self._bins(arrays, thresholds, rows.data, state)
            out = level_sums_many(rows, bins, thresholds, node, 1 << level, y, w)
        else:
            raise ValueError(f"phase must be one of ['level', 'calibrate']; got {phase!r}")
        if out.shape[1] != query.reply_length:
            raise ValueError(
                f"reply has {out.shape[1]} values; the query asks for {query.reply_length}"
            )
        out[~active] = 0.0
        return out

    @staticmethod
    def _margins(model: BDPEModel, data: ClientData, state: dict[str, Any]) -> np.ndarray:
        """H of the rows: the cached sum continued when the released ensemble only grew
        (each tree's D levels and the next tree's then route each tree once, not D·T
        times); the same additions in the same order as a fresh sum."""
        n, k = model.n_trees, int(state.get("margin_trees", -1))
        if 0 <= k <= n and state.get("margin_key") == _prefix_key(model, k):
            H = model.margins(data.X, start=k, base=state["margins"])
        else:
            H = model.margins(data.X)
        state.update(margins=H, margin_trees=n, margin_key=_prefix_key(model, n))
        return H

    @staticmethod
    def _bins(arrays, thresholds, data: ClientData, state: dict[str, Any]) -> np.ndarray:
        key = batched.arrays_digest(arrays[name] for name in ("cand_feature", "cand_threshold"))
        return batched.cached_bins(state, key, lambda: feature_bins(data.XT, thresholds))


def calibration_counts(margins: np.ndarray, y: np.ndarray, edges) -> np.ndarray:
    """``[n¹_b, n⁰_b]`` per bin b of the margin (B = len(edges) + 1 bins, in order):
    each record with a class counts once (a count, whatever its weight)."""
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or np.any(np.diff(e) <= 0):
        raise ValueError("calibration edges must be strictly increasing")
    keep = (y == 0) | (y == 1)
    b = np.searchsorted(e, margins[keep], side="left")
    cell = b * 2 + (1 - y[keep])
    return np.bincount(cell, minlength=2 * (e.size + 1)).astype(np.float64)


def _prefix_key(model: BDPEModel, k: int) -> str:
    """Digest of the first ``k`` released trees (structure, leaf values, β)."""
    m = model
    return batched.arrays_digest((m.feature[:k], m.threshold[:k], m.leaf_values[:k], m.beta[:k]))


def calibration_counts_many(margins: np.ndarray, y: np.ndarray, edges, rows: batched.ClientRows):
    """(K, 2B): each client's :func:`calibration_counts` over its block of ``rows``
    (counts: exact in any order)."""
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or np.any(np.diff(e) <= 0):
        raise ValueError("calibration edges must be strictly increasing")
    keep = (y == 0) | (y == 1)
    width = 2 * (e.size + 1)
    b = np.searchsorted(e, margins[keep], side="left")
    cell = rows.owner[keep] * width + b * 2 + (1 - y[keep])
    counts = np.bincount(cell, minlength=rows.clients * width).astype(np.float64)
    return counts.reshape(rows.clients, width)


#: Most histogram slots one batch of clients fills at once (8 bytes each): K clients'
#: (feature, node, class, bin) histograms at depth 10 would not fit in memory at once.
HIST_SLOTS = 1 << 22


def level_sums_many(rows: batched.ClientRows, bins, thresholds, node, n_nodes: int, y, w):
    """(K, ·): each client's level reply ``[total | left]`` from :func:`level_sums` over
    its block of ``rows``, as rows.

    The same histogram with the client's position as its outer index, filled by
    one ``np.bincount`` per batch of clients (:data:`HIST_SLOTS`): each slot
    accumulates its client's rows in their order, as that client's own call
    does; then the same cumulative sum over bins.
    """
    w, cls, V, cell = level_cells(thresholds, node, y, w)
    d = bins.shape[1]
    width = n_nodes * 2 * V  # one feature's slots
    K, G = rows.clients, sum(len(t) for t in thresholds)
    out = np.empty((K, n_nodes * 2 * (1 + G)))
    step = max(1, HIST_SLOTS // max(d * width, 1))
    for c0 in range(0, K, step):
        c = min(K, c0 + step) - c0
        r = slice(int(rows.starts[c0]), int(rows.starts[c0 + c]))
        local = rows.owner[r] - c0
        idx = (local[:, None] * d + np.arange(d, dtype=np.int64)[None, :]) * width
        idx += cell[r][:, None] + bins[r]
        hist = np.bincount(idx.ravel(), weights=np.repeat(w[r], d), minlength=c * d * width)
        cum = np.cumsum(hist.reshape(c, d, n_nodes, 2, V), axis=4)
        total = np.bincount(
            (local * n_nodes + node[r]) * 2 + (1 - cls[r]), weights=w[r], minlength=c * n_nodes * 2
        )
        parts = [cum[:, j, :, :, : len(t)].transpose(0, 1, 3, 2) for j, t in enumerate(thresholds)]
        left = np.concatenate(parts, axis=2) if parts else np.zeros((c, n_nodes, 0, 2))
        out[c0 : c0 + c] = np.concatenate([total.reshape(c, -1), left.reshape(c, -1)], axis=1)
    return out


def _level_query(query: Query, arrays, model: BDPEModel, d: int):
    """A level round's public inputs, checked: the level, the tree being grown (heap
    features and thresholds) and the candidates (one threshold array per feature)."""
    level = int(query.config["level"])
    if model.depth != int(query.config["depth"]):  # what the node's stage is read from
        raise ValueError(f"the query's trees have depth {model.depth}, its config says "
                         f"{query.config['depth']}")  # fmt: skip
    feature = np.asarray(arrays["tree_feature"], dtype=np.int64)
    threshold = np.asarray(arrays["tree_threshold"], dtype=np.float64)
    if not 0 <= level < max(model.depth, 1) or feature.size != (1 << model.depth) - 1:
        raise ValueError(f"level must lie in [0, {model.depth}); got {level}")
    thresholds = thresholds_of(arrays["cand_feature"], arrays["cand_threshold"], d)
    if sum(t.size for t in thresholds) != int(query.config["candidates"]):
        raise ValueError(f"the query holds {sum(t.size for t in thresholds)} candidates; "
                         f"its config says {query.config['candidates']}")  # fmt: skip
    return level, feature, threshold, thresholds
