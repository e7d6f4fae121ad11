"""The round's sum: secure aggregation's unmask path, or the plain ring sum.

:class:`RoundSums` holds :class:`~fedpriv.federation.engine.RoundEngine`'s
secure sum (the shim's consistency and unmask exchanges, Bonawitz et al. 2017
§4, with their communication counts); :func:`_plain_sum` sums plain uploads in
the same fixed-point ring, so both paths give the same bits. Apart from the
engine, which plans rounds and screens replies; the rules both follow are
stated once in :mod:`fedpriv.federation.engine`.
"""

from __future__ import annotations

import numpy as np

from fedpriv import logs
from fedpriv.federation.replies import check_answer
from fedpriv.federation.rounds import Replies, RoundPlan, UnmaskRequest
from fedpriv.federation.secagg import SecAggAbort, SecAggServer, sum_plain
from fedpriv.privacy.distributed import DistributedSum

log = logs.get_logger("fedpriv.federation.engine")  # the engine's log, as before the split


class RoundSums:
    """Mixin of :class:`~fedpriv.federation.engine.RoundEngine`: :meth:`_secure_sum`
    (needs ``secagg``, ``transport`` and ``communication``; the round's graph rides
    on its plan)."""

    def _secure_sum(self, plan: RoundPlan, replies: Replies) -> np.ndarray | None:
        r, asked = plan.query.round, plan.asked
        server = SecAggServer(codec=plan.codec, config=self.secagg, graph=plan.graph)
        masked = {u: replies.masked[u] for u in replies.senders}
        try:
            sealed = self.sealed.take(r, masked)  # kept for the batch's later rounds
            survivors, dropped = server.unmask_plan(round_id=r, participants=asked, masked=masked)
            inboxes = self.sealed.inboxes(survivors, sealed)  # only what each has not used
        except (SecAggAbort, ValueError):
            return None  # fewer than t survivors, or a malformed upload: release nothing
        if plan.noise is not None and len(survivors) < plan.noise.min_survivors:
            # Their shares fall short of the target noise: unmask nothing, release nothing.
            log.warning(
                "round %d: %d survivors < %d, the minimum for the target noise; aborted "
                "before the unmask",
                r,
                len(survivors),
                plan.noise.min_survivors,
            )
            return None
        comm = self.communication
        # The consistency round (Bonawitz §4): every survivor signs the list it is shown;
        # t signatures on this very list travel with the unmask request, else abort.
        signed = self.transport.consistency(plan, survivors, dropped)
        comm.round_trips += 1
        for u in sorted(set(signed) & set(survivors)):
            comm.bytes_uploaded[u] += len(signed[u])
        try:
            signed = server.check_signatures(
                round_id=r, participants=asked, survivors=survivors, dropped=dropped,
                signatures=signed, key_book=self.transport.key_book,
                book_digest=self.book_digest,
            )  # fmt: skip
        except (SecAggAbort, ValueError):
            return None  # a server-side view the survivors did not sign: release nothing
        # The unmask exchange, every round: survivors return shares of the survivors'
        # self-mask seeds and their pair masks with the dropped clients.
        # Under SecAgg+'s graph each survivor gets t of its own neighbours' signatures.
        forward = None if plan.graph is None else {u: server.forward(u, signed) for u in survivors}
        answers = self.transport.unmask(
            UnmaskRequest(
                plan=plan, survivors=survivors, dropped=dropped, inboxes=inboxes,
                signatures=signed, forward=forward,
            )
        )  # fmt: skip
        comm.round_trips += 1
        comm.recoveries += bool(dropped)
        self.sealed.used(inboxes, answers)
        n, hood = plan.query.reply_length, server.topology(asked)
        live, lost = set(survivors), set(dropped)
        for u in sorted(answers):
            if u in live and plan.graph is not None:  # its own duties: its neighbourhood's
                near = hood.closed(u)  # all of it survived if no one dropped
                owed = (near, ()) if not lost else (
                    live.intersection(near), lost.intersection(hood.neighbours(u))
                )  # fmt: skip
            else:
                owed = (survivors, dropped)
            why = check_answer(answers[u], survivors=owed[0], dropped=owed[1], n=n)
            if u not in live or why is not None:
                comm.rejected_replies += 1
                log.warning(
                    "round %d: unmask answer of client %d refused (%s)",
                    r,
                    u,
                    why or "not a survivor",
                )
                del answers[u]  # as if silent: the shim aborts if it needs that answer
                continue
            comm.bytes_uploaded[u] += answers[u].nbytes
        vectors = {u: m.vector for u, m in masked.items()}
        try:
            total = server.aggregate(
                round_id=r, participants=asked, masked=vectors, answers=answers
            )
        except (SecAggAbort, ValueError):
            return None  # too few or inconsistent answers: the sum would be noise
        if plan.noise is None:
            return total
        return DistributedSum.wrap(
            total, survivors=len(survivors), min_survivors=plan.noise.min_survivors
        )


def _plain_sum(plan: RoundPlan, replies: Replies) -> np.ndarray:
    """The plain ring sum (the same ring as the secure path, so the same bits)."""
    n, codec = plan.query.reply_length, plan.codec
    if not replies.senders:
        return np.zeros(n)
    if isinstance(replies.plain, np.ndarray) and replies.plain.ndim == 2:
        return sum_plain(replies.plain, codec)
    if len(replies.senders) > codec.max_summands:
        raise ValueError(f"{len(replies.senders)} replies for {codec.max_summands} summands")
    # One vector at a time: memory O(n), not O(K·n).
    acc = np.zeros(n, dtype=np.uint64)
    for vec in replies.plain:
        acc += codec.encode(vec)
    return codec.decode(acc)
