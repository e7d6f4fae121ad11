"""DP federated gradient boosting: the client half.

Given the public query (the released ensemble so far and the next tree's
structure), a client routes its Poisson-sampled rows to the new tree's leaves
and returns per-leaf (Σg, Σh) with g = p − y and h = p(1 − p) ∈ [0, 0.25]
(benchmark paper §3.4); with C ≥ 3 classes, per leaf the C-vectors Σg and Σh
of the softmax gradient p − e_y and diagonal hessian p_k(1 − p_k). In the
intercept round (``config["phase"] == "intercept"``) every row sits in one
leaf at the released base logit(s): the reply is the total (Σg, Σh). Every
query names its ``phase`` (``"intercept"`` or ``"tree"``; absent: a tree) and
``n_classes``; the released base must have that many logits (one for two
classes), so the statistics clipped are the ones :meth:`reply_sensitivity`
bounds from those two settings alone. It keeps its rows' current logits in
the runtime's per-client state and updates them with the trees released since
its last round; with an empty state it rebuilds them from the query.

The work is one compiled pass over the rows per round
(:mod:`fedpriv.models._kernels`): add the last tree's released leaf value to
each row's logit, route the row through the new tree, then accumulate the
sampled rows' gradients and hessians.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from fedpriv.clients.query_settings import choice_setting, count_setting

from fedpriv.federation.protocol import ClientData, ClientHandler, Query, ReplySensitivity
from fedpriv.models import _kernels
from fedpriv.models.trees import (
    INTERCEPT,
    TREE,
    RandomTree,
    check_leaf_values,
    check_routable,
    leaf_sums_sensitivity,
)
from fedpriv.privacy.randomness import SecretKey


class BoostingClient(ClientHandler):
    """Client handler for :class:`fedpriv.strategies.boosting.DPBoostingStrategy`."""

    method = "boosting"
    #: State entries that only save work; a runtime that serialises the state
    #: every round (Flower) drops them, as shipping them costs more than recomputing.
    cache_keys = ("leaf", "leaf_tree")

    def reply_sensitivity(self, query: Query) -> ReplySensitivity:
        """The query's phase (its stage) and the (L1, L2) change one record makes to the
        reply, from its ``phase`` and ``n_classes`` alone
        (:func:`fedpriv.models.trees.leaf_sums_sensitivity`)."""
        phase, n_classes = _settings(query)
        l1, l2 = leaf_sums_sensitivity(n_classes)
        return ReplySensitivity(stage=phase, l1=l1, l2=l2)

    def answer(
        self,
        query: Query,
        data: ClientData,
        sample: np.ndarray,
        state: dict[str, Any],
        key: SecretKey | None = None,
    ) -> np.ndarray:
        rows = np.asarray(sample, dtype=np.int64)
        if _settings(query)[0] == INTERCEPT:
            return _intercept_sums(query, data.y, [rows], np.zeros(1, np.int64), [data.n])[0]
        margins, leaf, tree = _advance(query, state, data.XT)
        return _leaf_sums(margins, data.y, leaf, [rows], np.zeros(1, np.int64), [data.n], tree)[0]

    def answer_many(self, query, datas, samples, state, keys=None) -> np.ndarray:
        """All clients' replies at once (rows of the result), bit-identical to :meth:`answer`.

        The in-process runtime's fast path: one pass over every client's rows
        instead of one per client. Each client's sums are accumulated over its
        own sample in the same order as in :meth:`answer`, so the floats agree
        exactly.
        """
        phase, _ = _settings(query)
        ids = tuple(d.client_id for d in datas)
        if state.get("ids") != ids:
            sizes = np.array([d.n for d in datas])
            state.clear()
            state.update(
                ids=ids,
                XT=np.concatenate([d.XT for d in datas], axis=1),
                y=np.concatenate([d.y for d in datas]),
                offsets=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
            )
        sizes = [d.n for d in datas]
        if phase == INTERCEPT:
            return _intercept_sums(query, state["y"], samples, state["offsets"], sizes)
        margins, leaf, tree = _advance(query, state, state["XT"])
        return _leaf_sums(margins, state["y"], leaf, samples, state["offsets"], sizes, tree)


def _settings(query: Query) -> tuple[str, int]:
    """The query's phase and class count: all the reply's sensitivity depends on."""
    phase = choice_setting(query, "phase", (INTERCEPT, TREE), default=TREE)
    return phase, count_setting(query, "n_classes", minimum=2)


def _base(query: Query) -> float | np.ndarray:
    """The released base logit (binary, a float) or logits (C classes, a (C,) array).

    Its size picks the kernel, hence the clip (logistic or softmax): it must be
    the one ``config["n_classes"]`` declares, which the node's sensitivity reads.
    """
    n_classes = _settings(query)[1]
    outputs = 1 if n_classes == 2 else n_classes
    base = np.asarray(query.arrays["base"], dtype=np.float64)
    if base.shape != (outputs,):
        raise ValueError(
            f"base holds {base.size} logits; config n_classes {n_classes} needs {outputs}"
        )
    return float(base[0]) if base.size == 1 else base.copy()


def _initial_margins(base: float | np.ndarray, n: int) -> np.ndarray:
    if np.ndim(base) == 0:
        return np.full(n, base)
    return np.zeros((n, np.size(base))) + base


def _intercept_sums(
    query: Query,
    y: np.ndarray,
    samples: Sequence[np.ndarray],
    offsets: np.ndarray,
    sizes: Sequence[int],
) -> np.ndarray:
    """Each client's total ``[Σg | Σh]`` at the base logit(s): a one-leaf tree."""
    margins = _initial_margins(_base(query), y.size)
    leaf = np.zeros(y.size, dtype=np.uint64)
    return _leaf_sums(margins, y, leaf, samples, offsets, sizes, n_leaves=1)


def _leaf_sums(
    margins: np.ndarray,
    y: np.ndarray,
    leaf: np.ndarray,
    samples: Sequence[np.ndarray],
    offsets: np.ndarray,
    sizes: Sequence[int],
    tree: RandomTree | None = None,
    *,
    n_leaves: int | None = None,
) -> np.ndarray:
    """Each client's ``[Σg | Σh]`` row from its sample (local indices) of its block of rows
    (``tree``'s leaves, or ``n_leaves``); (n,) margins: logistic, (n, C): softmax."""
    rows = np.concatenate(samples).astype(np.int64, copy=False)
    if rows.ndim != 1:
        raise ValueError(f"samples must be 1-D arrays of row indices; got shape {rows.shape}")
    starts = np.cumsum([0, *(s.size for s in samples)])
    n_leaves = tree.n_leaves if n_leaves is None else n_leaves
    width = 1 if margins.ndim == 1 else margins.shape[1]
    out = np.zeros((len(samples), 2 * n_leaves * width))
    kernel = _kernels.logistic_leaf_sums if width == 1 else _kernels.softmax_leaf_sums
    if not kernel(margins, y, leaf, rows, starts, offsets, np.asarray(sizes, dtype=np.int64), out):
        raise ValueError(f"sample holds a row index outside its client's rows (sizes {sizes})")
    return out


def _advance(
    query: Query, state: dict[str, Any], XT: np.ndarray
) -> tuple[np.ndarray, np.ndarray, RandomTree]:
    """Bring every row's logit up to the released trees and route every row once.

    Returns the logits, each row's leaf in the query's new tree (the sample's
    leaves now, everyone's logit update next round) and that tree. An empty
    or stale ``state`` is rebuilt from the public query.
    """
    feature, threshold = query.arrays["feature"], query.arrays["threshold"]
    values, base = query.arrays["leaf_values"], _base(query)
    c = 1 if np.ndim(base) == 0 else np.size(base)
    settle, add = (
        (_kernels.settle_and_route, _kernels.add_tree)
        if c == 1
        else (_kernels.settle_and_route_multi, _kernels.add_tree_multi)
    )
    t = values.shape[0]  # trees already released; tree t is the one to fill
    if feature.shape[0] != t + 1 or threshold.shape != feature.shape:
        raise ValueError(
            f"query holds {feature.shape[0]} tree structures for {t} released trees; "
            f"expected {t + 1}"
        )
    tree = RandomTree(feature[t], threshold[t])
    check_routable(tree, XT.shape[0])
    margins, applied = state.get("margins"), state.get("applied", 0)
    old = state.get("base")
    if margins is None or old is None or not np.array_equal(old, base) or applied > t:
        margins, applied = _initial_margins(base, XT.shape[1]), 0
        state.pop("leaf_tree", None)
    elif not margins.flags.writeable:  # deserialised state may be read-only
        margins = margins.copy()
    leaf = state.get("leaf") if state.get("leaf_tree") == t - 1 == applied else None
    for k in range(applied, t):
        released = RandomTree(feature[k], threshold[k])
        vals = check_leaf_values(values[k] if c == 1 else values[k].reshape(-1, c), released, c)
        if leaf is not None:
            # Common case: only the last tree is new and its leaves are known
            # from last round, so one pass settles it and routes the new tree.
            settle(XT, leaf, vals, *tree.kernel_args, margins)
            break
        check_routable(released, XT.shape[0])
        scratch = np.empty(XT.shape[1], dtype=np.uint64)
        add(XT, *released.kernel_args, vals, margins, scratch)
    else:
        leaf = np.empty(XT.shape[1], dtype=np.uint64)
        _kernels.route_rows(XT, *tree.kernel_args, leaf)
    state.update(margins=margins, applied=t, base=base, leaf=leaf, leaf_tree=t)
    return margins, leaf, tree
