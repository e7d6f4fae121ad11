"""What the histogram learners' ``answer_many`` share: every client's rows as one block.

The in-process runtime's fast path (:meth:`InProcessTransport.ask
<fedpriv.federation.inprocess_transport.InProcessTransport.ask>`) asks one handler
for all K clients' replies at once. The per-row work of these learners (binning,
routing, scoring) is elementwise, so it runs once over the clients' rows laid
end to end; each client's sums then come from a histogram whose slots carry
the client's position, so every slot accumulates the same rows in the same
order as that client's own :meth:`answer` would, and the floats agree exactly.

The concatenation is a cache in the runtime's one shared state, keyed by the
clients' ids (as the boosting client's is): a runtime that drops it gets it
rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv.federation.protocol import ClientData, require_every_record


@dataclass(frozen=True, kw_only=True)
class ClientRows:
    """K clients' rows laid end to end."""

    #: Every row (client id −1), client 0's first; its ``XT`` is the concatenation of
    #: the clients' ``XT`` (one copy).
    data: ClientData
    #: (K + 1,) int64: client i's rows are ``starts[i]:starts[i + 1]``.
    starts: np.ndarray
    #: (N,) int64: each row's client position, the histograms' client index.
    owner: np.ndarray

    @property
    def clients(self) -> int:
        return self.starts.size - 1

    def block(self, i: int) -> slice:
        """Client i's rows."""
        return slice(int(self.starts[i]), int(self.starts[i + 1]))

    def row_mask(self, clients: np.ndarray) -> np.ndarray:
        """(N,) bool: the rows of the clients ``clients`` (a (K,) bool) marks."""
        return np.repeat(clients, np.diff(self.starts))


def client_rows(datas: Sequence[ClientData], state: dict) -> ClientRows:
    """The clients' rows as one block, cached in ``state`` under their ids.

    Another set of clients clears ``state``: everything else a handler keeps
    there (bins, margins, walks) is of the old rows.
    """
    ids = tuple(d.client_id for d in datas)
    if state.get("ids") != ids or state.get("rows") is None:
        sizes = np.array([d.n for d in datas], dtype=np.int64)
        XT = np.concatenate([d.XT for d in datas], axis=1)
        y = np.concatenate([d.y for d in datas])
        rows = ClientRows(
            data=ClientData(client_id=-1, X=XT.T, y=y),  # X.T is XT: no second copy
            starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            owner=np.repeat(np.arange(len(datas), dtype=np.int64), sizes),
        )
        state.clear()
        state.update(ids=ids, rows=rows)
    return state["rows"]


def answering(datas: Sequence[ClientData], samples: Sequence[np.ndarray], why: str) -> np.ndarray:
    """(K,) bool: the clients that answer this round, for a learner that reads every row.

    A sample of all the client's rows answers (``answer`` checks only its
    size: :func:`~fedpriv.federation.protocol.require_every_record`). An empty
    sample of a client with rows is a client the round did not ask (the
    runtime passes every client, the unasked with no rows): its reply row is
    zeros, which the runtime discards. Any other sample is refused, as
    ``answer`` refuses it.
    """
    if len(samples) != len(datas):
        raise ValueError(f"{len(samples)} samples for {len(datas)} clients")
    out = np.empty(len(datas), dtype=bool)
    for i, (data, sample) in enumerate(zip(datas, samples, strict=True)):
        size = np.asarray(sample).size
        out[i] = size == data.n
        if size and not out[i]:
            require_every_record(sample, data, why)
    return out


def arrays_digest(arrays) -> str:
    """SHA-256 of arrays' bytes in order: the key of a cache built from public arrays."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def cached_bins(state: dict, key: str, compute) -> np.ndarray:
    """The rows' bins under the public binning ``key``, computed once and kept in
    ``state`` (a runtime may drop it: it is rebuilt from the rows and the key)."""
    if state.get("bins_key") != key or state.get("bins") is None:
        state["bins"] = compute()
        state["bins_key"] = key
    return state["bins"]
