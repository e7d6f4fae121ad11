"""Many in-process clients' masking step at once: one Shamir split for all their seeds.

The in-process runtime holds every client's :class:`~fedpriv.federation.secagg.
SecAggClient` in one process. Each client's :meth:`~fedpriv.federation.secagg.
SecAggClient.mask` splits its own 5-limb seed with a (k + 2 − t) × t matrix product
(Shamir 1979; :func:`fedpriv.federation.shamir.split`), whose per-call cost at
K = 1,000 is mostly fixed overhead. Under SecAgg+'s sparse graph (Bell et al. CCS
2020) every client shares at the same points (ranks 1..k + 1 in its closed
neighbourhood), so the seeds of all clients with one holder-point set and threshold
are one batch: one draw from the OS CSPRNG and one matrix product for all of them.

Nothing else changes: each client still runs its own checks and encoding
(:meth:`~fedpriv.federation.secagg.SecAggClient._begin`) and its own cryptography (self
mask, pair masks, sealing) and bookkeeping (``_finish``). Each seed's limbs and each
polynomial's free values are independent uniform elements from the OS CSPRNG, as
separate calls would draw them, so every client's shares have exactly the distribution
its own call gives them (t − 1 of them uniform whatever the seed) and the server's sum
is the same. The per-client path (one client per process, the Flower runtime) keeps
calling :meth:`~fedpriv.federation.secagg.SecAggClient.mask`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedpriv.federation import field, shamir
from fedpriv.federation.secagg import SecAggClient
from fedpriv.federation.secagg_common import MaskedInput


def mask_many(
    parties: Sequence[SecAggClient],
    vectors: Sequence[Any],
    options: Sequence[Mapping[str, Any]],
) -> list[MaskedInput | Exception]:
    """Each party's :meth:`~fedpriv.federation.secagg.SecAggClient.mask` of its vector
    with its keyword arguments, in order: its masked input, or the exception its own call
    would have raised (a refusal fails that client only).

    Seeds of parties sharing holder points and threshold are split in one batch (module
    docstring); a party may appear once only (one masked input per round each).
    """
    if len({id(p) for p in parties}) != len(parties):
        raise ValueError("mask_many masks each party once: a party appears twice")
    if not len(parties) == len(vectors) == len(options):
        raise ValueError("mask_many needs one vector and one options mapping per party")
    out: list[MaskedInput | Exception | None] = [None] * len(parties)
    groups: dict[tuple, list[tuple[int, tuple, bool]]] = {}
    ready: list[tuple[int, tuple, Any, bool]] = []
    for i, (party, vector, kw) in enumerate(zip(parties, vectors, options, strict=True)):
        kw = dict(kw)
        resend, left = bool(kw.pop("resend", True)), kw.pop("rounds_left", None)
        try:
            job = party._begin(vector, **kw)
            batch = party._covering(job[0], job[1], job[2])
            count = party._batch_count(job[0], left) if batch is None else 0
        except Exception as err:  # that client's own refusal
            out[i] = err
            continue
        if batch is None:  # a new batch starts at this round
            key = (job[-1].xs, job[2], count)
            groups.setdefault(key, []).append((i, job, resend))
        else:
            ready.append((i, job, batch, resend))
    for (xs, t, count), every in groups.items():
        # In chunks of parties: the product's operands stay small enough for the caches.
        step = max(1, _CHUNK // (t * count * shamir.LIMBS))
        for jobs in (every[c : c + step] for c in range(0, len(every), step)):
            ready.extend(_split_batches(parties, out, jobs, xs, t, count))
    for i, job, batch, send in ready:
        try:
            out[i] = parties[i]._finish(job, batch, send=send)
        except Exception as err:
            out[i] = err
    return out  # type: ignore[return-value]


_CHUNK = 1 << 17  # field elements drawn per split call


def _split_batches(parties, out, jobs, xs, t, count):
    """New batches for ``jobs`` (one split for all): (i, job, batch, True) each, or the
    party's error in ``out``."""
    # Every party's batch of seeds: independent uniform limbs, OS CSPRNG.
    seeds = field.random_elements((len(jobs), count, shamir.LIMBS))
    split = shamir.split(seeds, xs=xs, threshold=t)  # (k + 1, B, count, LIMBS)
    # Party b's shares in holder order, count × 40 bytes each: one slice per party.
    raw = shamir.to_bytes(np.ascontiguousarray(split.transpose(1, 0, 2, 3)))
    size = len(xs) * count * shamir.SHARE_BYTES
    for b, (i, job, _) in enumerate(jobs):
        try:
            part = raw[b * size : (b + 1) * size]
            batch = parties[i]._new_batch(job[0], job[1], t, job[-1], seeds[b], part)
        except Exception as err:
            out[i] = err
            continue
        yield i, job, batch, True
