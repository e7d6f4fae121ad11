"""What a well-formed upload looks like: checked before it enters a sum.

A participant may be faulty or hostile. Its upload is checked against what the
round's public plan fixes (the round id, the reply length, the ring's dtype, the
participants it must share its seed with, the codec's bound) *before* it is
aggregated; a malformed one is that client's dropout for the round (the shim's
recovery removes its pair masks), never a crash and never a summand. What cannot
be checked one upload at a time (secure aggregation hides the values) is checked
on the released sum (:mod:`fedpriv.privacy.range_guard`).

Each check returns ``None`` for a well-formed upload, else a short public reason
(the message's shape, never its values): the engine logs it and counts it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from fedpriv.federation import shamir
from fedpriv.federation.secagg_common import MAX_SEED_BATCH, MaskedInput, UnmaskAnswer
from fedpriv.federation.secagg_seeds import SPAN_BYTES, ShareColumn, column_of, span_of

#: One Shamir share of a seed: 5 elements of GF(2^61 − 1) in 40 bytes (``shamir.to_bytes``).
SHARE_BYTES = shamir.SHARE_BYTES


def _all_bytes(values: Collection[object], size: int) -> bool:
    """Whether every value is ``bytes`` (a subclass too) of length ``size`` (checked in C:
    a round has K·k of them)."""
    kinds = set(map(type, values))
    if kinds != {bytes} and not all(issubclass(k, bytes) for k in kinds):
        return False
    return set(map(len, values)) == {size}


def _ring_vector(name: str, v: object, n: int) -> str | None:
    if not isinstance(v, np.ndarray):
        return f"{name} is a {type(v).__name__}, not an array"
    if v.dtype != np.uint64:
        return f"{name} has dtype {v.dtype}, not uint64 (the ring)"
    if v.shape != (n,):
        return f"{name} has shape {v.shape}, not ({n},)"
    return None


def check_masked(
    upload: object,
    *,
    sender: int,
    round_id: int,
    n: int,
    participants: Sequence[int],
    addressees: Collection[int] | None = None,
    sealed_due: bool = True,
    max_batch: int = MAX_SEED_BATCH,
) -> str | None:
    """Why ``upload`` is not a round-``round_id`` masked input of ``sender`` (or ``None``).

    It must be a :class:`MaskedInput` of this round, a uint64 vector of length n, and
    its sealed batch of seed shares (:mod:`fedpriv.federation.secagg_seeds`): one for
    each other participant (under SecAgg+'s graph, for each of the sender's
    ``addressees``, its neighbours), all of one length with one header covering the
    round, at most ``max_batch`` rounds (the run's ``secagg-seed-batch``). The batch may
    be left out (no shares) unless ``sealed_due``: the server lacks it.
    """
    if not isinstance(upload, MaskedInput):
        return f"not a masked input ({type(upload).__name__})"
    if upload.round_id != round_id:
        return f"round {upload.round_id!r}, not {round_id}"
    if why := _ring_vector("vector", upload.vector, n):
        return why
    peers = set(participants) - {sender} if addressees is None else set(addressees)
    shares = upload.shares
    if isinstance(shares, Mapping) and not shares and not sealed_due:
        return None  # its batch of sealed shares came with an earlier round
    if not isinstance(shares, Mapping) or set(shares) != peers:
        got = sorted(shares) if isinstance(shares, Mapping) else type(shares).__name__
        whom = "the other participants" if addressees is None else "its neighbours"
        return f"shares addressed to {got}, not to {whom} {sorted(peers)}"
    if not shares:
        return None
    sealed = shares.values()
    first = next(iter(sealed))
    if not isinstance(first, bytes) or not _all_bytes(sealed, len(first)):
        return "sealed shares are not bytes of one length"
    if len({c[:SPAN_BYTES] for c in sealed}) != 1:
        return "sealed shares name different rounds"
    try:
        start, count = span_of(first)
    except ValueError as err:
        return str(err)
    if count > max_batch:
        return f"sealed shares cover {count} rounds, more than the run's {max_batch}"
    if not start <= round_id < start + count:
        return f"sealed shares cover rounds [{start}, {start + count}), not round {round_id}"
    return None


def check_plain(vector: object, *, n: int, max_abs: float) -> str | None:
    """Why ``vector`` is not a plain upload (n finite floats, each |x| ≤ max_abs)."""
    if not isinstance(vector, np.ndarray) or vector.dtype != np.float64:
        return f"not a float64 array ({getattr(vector, 'dtype', type(vector).__name__)})"
    if vector.shape != (n,):
        return f"shape {vector.shape}, not ({n},)"
    if vector.size and not np.abs(vector).max() <= max_abs:  # NaN fails ``<=`` too
        return f"a value is not finite or beyond the codec's bound {max_abs:g}"
    return None


def check_answer(
    answer: object, *, survivors: Sequence[int], dropped: Sequence[int], n: int
) -> str | None:
    """Why ``answer`` is not an unmask answer for (survivors, dropped) (or ``None``).

    One 40-byte share of each survivor's seed, and one ring vector, the sum of the pair
    masks with the dropped clients, which ``lost`` names (under SecAgg+'s graph the
    caller passes the answerer's own: its surviving neighbours and itself, its dropped
    neighbours).
    """
    if not isinstance(answer, UnmaskAnswer):
        return f"not an unmask answer ({type(answer).__name__})"
    shares, lost = answer.shares, answer.lost
    if not isinstance(shares, Mapping) or set(shares) != set(survivors):
        return "shares are not one per survivor"
    column = type(shares) is ShareColumn  # one buffer: 40 bytes a share, checked whole
    if shares and not (column_of(shares) if column else _all_bytes(shares.values(), SHARE_BYTES)):
        return f"a share is not {SHARE_BYTES} bytes"
    if not isinstance(lost, tuple) or sorted(lost) != sorted(dropped):  # duplicates too
        return "the pair-mask sum does not cover each dropped client once"
    if not lost:
        return None if answer.mask is None else "a pair-mask sum with no dropped client"
    return _ring_vector("pair-mask sum", answer.mask, n)
