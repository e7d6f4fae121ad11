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

Normalised replies: round 0 divides each block by its sensitivity, a group
round by √``sparsity`` and the selection by √``candidates``, so that every
reply's sensitivity follows from the query's public settings and each stage
has one noise level (:mod:`fedpriv.models.gam_sensitivity`); the server scales
the released sums back.

The handler keeps only a cache of its rows' bins (keyed by the public
binning), which a runtime may drop: the reply is a function of the query and
the rows alone, so every runtime gets the same floats. The in-process runtime
asks :meth:`GAMClient.answer_many` for all K replies in one pass over the
clients' rows laid end to end (:mod:`fedpriv.clients.batched`): the same floats
as K calls of :meth:`GAMClient.answer`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fedpriv.clients.batched import (
    ClientRows,
    answering,
    arrays_digest,
    cached_bins,
    client_rows,
)
from fedpriv.clients.reply_settings import require_rate, setting_choice, setting_int

from fedpriv.federation.protocol import (
    ClientData,
    ClientHandler,
    Query,
    ReplySensitivity,
    require_every_record,
)
from fedpriv.models.gam import (
    GAMModel,
    Terms,
    bin_matrix,
    bin_sums,
    fine_histograms,
    intercept_sums,
)
from fedpriv.models.gam_group import binary_terms, group_sensitivity, group_sums
from fedpriv.models.gam_pairs import pairs_from_arrays
from fedpriv.models.gam_sensitivity import (
    STAGE_OF,
    column_sensitivity,
    head_sensitivity,
    reply_sensitivity,
)
from fedpriv.models.gam_softmax import softmax_bin_sums, softmax_intercept_sums
from fedpriv.privacy.randomness import SecretKey


def _sums(model: GAMModel, f: np.ndarray, y: np.ndarray, bins: np.ndarray, n: int):
    """``[Σg | Σh]`` over ``n`` bins (or cells): one logit, or C classes (softmax)."""
    if model.n_classes == 2:
        return bin_sums(f, y, bins, n)
    return softmax_bin_sums(f, y, bins, n, model.n_classes)


class GAMClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.gam.DPGAMStrategy`."""

    method = "dp_gam"
    #: State entries that only save work (a runtime that serialises state drops them).
    cache_keys = ("bins", "bins_key")

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """(stage, L1, L2) of the normalised reply
        (:func:`fedpriv.models.gam_sensitivity.reply_sensitivity`), from the phase,
        ``n_classes``, round 0's ``grid``, a group's ``sparsity`` and the selection's
        ``candidates`` (each of which :meth:`answer` divides by); q = 1."""
        require_rate(query)
        phase = setting_choice(query, "phase", STAGE_OF)
        classes = setting_int(query, "n_classes", minimum=2)
        grid = setting_int(query, "grid", minimum=0) if phase == "intercept" else 0
        if phase == "group":
            setting_int(query, "sparsity")
            if classes != 2:
                raise ValueError(f"a group round needs n_classes = 2; got {classes}")
        if phase == "select":
            setting_int(query, "candidates")
        stage, l1, l2 = reply_sensitivity(
            phase, n_classes=classes, grid=grid, reply_length=query.reply_length
        )
        return ReplySensitivity(stage=stage, l1=l1, l2=l2)

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
        C = int(query.config["n_classes"])
        if phase == "intercept":
            out = _intercept(query, C, _fine_terms(query, data.XT.shape[0]), data)
        elif phase in SCORED:
            model, arrays = _model(query, C)
            bins = self._bins(model.terms, data, state)
            f = model.margins(bins)
            out = _scored(
                query,
                model,
                arrays,
                bins,
                lambda cells, n: _sums(model, f, data.y, cells, n),
                lambda positive, s: group_sums(f, data.y, positive, s),
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

    def answer_many(self, query, datas, samples, state, keys=None) -> np.ndarray:
        """All clients' replies (rows), each bit-identical to :meth:`answer`'s.

        The rows are binned and scored once, end to end (:mod:`fedpriv.clients.batched`);
        each client's bin sums are the slots of one histogram that carry its position,
        accumulated over its rows in its own order. Round 0's totals and a group round's
        weighted sums (a matrix product, whose order is BLAS's) are each client's own
        call on its block of the scored rows. A client the round did not ask (an empty
        sample) gets zeros; ``state`` is the runtime's one shared state.
        """
        active = answering(datas, samples, "DP-EBM counts every record in every round")
        rows = client_rows(datas, state)
        phase = str(query.config["phase"])
        C = int(query.config["n_classes"])
        out = np.zeros((len(datas), query.reply_length))
        if phase == "intercept":
            terms = _fine_terms(query, rows.data.XT.shape[0])
            replies = {i: _intercept(query, C, terms, datas[i]) for i in np.flatnonzero(active)}
            width = {r.size for r in replies.values()} or {query.reply_length}
            if width != {query.reply_length}:
                raise ValueError(
                    f"reply has {width.pop()} values; the query asks for {query.reply_length}"
                )
            for i, reply in replies.items():
                out[i] = reply
            return out
        if phase not in SCORED:
            raise ValueError(
                f"phase must be one of ['intercept', 'term', 'group', 'pair', 'select']; "
                f"got {phase!r}"
            )
        model, arrays = _model(query, C)
        bins = self._bins(model.terms, rows.data, state)
        f, y = model.margins(bins), rows.data.y

        def group(positive: np.ndarray, s: int) -> np.ndarray:
            sums = {}
            for i in np.flatnonzero(active):
                b = rows.block(i)
                sums[i] = group_sums(f[b], y[b], np.ascontiguousarray(positive[:, b]), s)
            width = next(iter(sums.values())).size if sums else 2 * positive.shape[0]
            return np.stack([sums.get(i, np.zeros(width)) for i in range(len(datas))])

        got = _scored(
            query,
            model,
            arrays,
            bins,
            lambda cells, n: _sums_many(model, f, y, cells, n, rows),
            group,
        )
        if got.shape[1] != query.reply_length:
            raise ValueError(
                f"reply has {got.shape[1]} values; the query asks for {query.reply_length}"
            )
        out[active] = got[active]
        return out

    @staticmethod
    def _bins(terms: Terms, data: ClientData, state: dict[str, Any]) -> np.ndarray:
        key = arrays_digest(terms.to_arrays().values())
        return cached_bins(state, key, lambda: bin_matrix(terms, data.XT))


#: The phases whose reply scores the rows with the query's released model.
SCORED = ("term", "group", "pair", "select")


def _fine_terms(query: Query, n_features: int) -> Terms | None:
    """Round 0's numeric terms for the fine-grid sketch (``None``: ``grid`` is 0)."""
    if int(query.config["grid"]) <= 0:
        return None
    terms = Terms.from_arrays(dict(query.arrays))
    terms.check_features(n_features)
    if int(terms.numeric.sum()) < 1:
        raise ValueError("a fine-grid sketch needs at least one numeric term")
    return terms


def _intercept(query: Query, C: int, terms: Terms | None, data: ClientData) -> np.ndarray:
    """Round 0's reply: the totals at margin 0, then the fine-grid sketch when ``terms``."""
    # Each block divided by its sensitivity (fedpriv.models.gam_sensitivity).
    out = intercept_sums(data.y) if C == 2 else softmax_intercept_sums(data.y, C)
    out = out / head_sensitivity(C)
    if terms is not None:
        grid = int(query.config["grid"])
        hist = fine_histograms(terms, data.XT, grid) / np.sqrt(int(terms.numeric.sum()))
        out = np.concatenate([out, hist])
    return out


def _model(query: Query, C: int) -> tuple[GAMModel, dict[str, np.ndarray]]:
    """The query's released model, refused unless it has the config's ``C`` classes."""
    arrays = dict(query.arrays)
    model = GAMModel.from_arrays(arrays)
    if model.n_classes != C:
        raise ValueError(f"the query's model has {model.n_classes} classes; its config says {C}")
    return model, arrays


def _scored(query: Query, model: GAMModel, arrays, bins: np.ndarray, sums, group) -> np.ndarray:
    """The reply of a scored phase from ``sums(cells, n)``, the ``[Σg | Σh]`` over ``n``
    bins or cells of the rows' ``cells``, and ``group(positive, s)``, the group sums
    (:func:`~fedpriv.models.gam_group.group_sums`): one client's reply, or every
    client's as rows, as the two callables give them. Each scaled by its sensitivity
    (:mod:`fedpriv.models.gam_sensitivity`)."""
    phase = query.config["phase"]
    if phase == "group":
        members = np.asarray(arrays["group"], dtype=np.int64)
        if model.n_classes != 2 or not set(members.tolist()) <= set(
            binary_terms(model.terms).tolist()
        ):
            raise ValueError("a group round needs two classes and binary terms only")
        s = int(query.config["sparsity"])
        scale = column_sensitivity(2) / group_sensitivity(s)  # 1/√s
        return group(bins[members] == 1, s) * scale
    if phase == "term":
        k = int(query.config["term"])
        if not 0 <= k < model.terms.m:
            raise ValueError(f"term must lie in [0, {model.terms.m}); got {k}")
        return sums(bins[k], model.terms.n_bins(k))
    if phase == "pair":
        j = int(query.config["pair"])
        if not 0 <= j < len(model.pairs):
            raise ValueError(f"pair must lie in [0, {len(model.pairs)}); got {j}")
        pair = model.pairs[j]
        return sums(pair.cells(bins), pair.n_cells)
    cands = pairs_from_arrays(arrays, model.terms.n_bins, prefix="candidate")
    if len(cands) != int(query.config["candidates"]):
        raise ValueError(f"the query holds {len(cands)} candidate pairs; its "
                         f"config says {query.config['candidates']}")  # fmt: skip
    parts = [sums(p.cells(bins), p.n_cells) for p in cands]
    return np.concatenate(parts, axis=-1) / np.sqrt(len(cands))


def _sums_many(model: GAMModel, f, y, cells: np.ndarray, n: int, rows: ClientRows):
    """(K, ·): each client's :func:`_sums` over its rows' ``cells``, as rows.

    One histogram of K·n slots (client, cell): a slot accumulates its client's
    rows in their order, as the client's own ``np.bincount`` / ``np.add.at`` does.
    """
    b = np.asarray(cells, dtype=np.int64)
    if b.size and (b.min() < 0 or b.max() >= n):
        raise ValueError(f"bins must lie in [0, {n}); got {b.min()}..{b.max()}")
    K = rows.clients
    flat = _sums(model, f, y, rows.owner * n + b, K * n)  # [Σg of K·n slots | Σh of K·n]
    return flat.reshape(2, K, -1).transpose(1, 0, 2).reshape(K, -1)
