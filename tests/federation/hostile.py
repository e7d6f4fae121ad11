"""A hostile participant for the in-process runtime: one client tampers with its uploads.

:class:`HostileTransport` is the in-process transport with client ``HOSTILE``
replaced, in round ``ATTACK_ROUND``, by what an adversary can send instead of its
honest upload. Every case names its asserted outcome:

* ``dropout``: the upload is refused before aggregation (or the client fails); the
  round is released from the honest survivors alone, exactly their sum;
* ``aborted``: the shim cannot unmask (a peer refuses, shares fail authentication);
  nothing is released and nothing is spent;
* ``discarded``: the sum is released through the ledger (spent) and fails the range
  check (:mod:`fedpriv.privacy.range_guard`); the model does not use it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedpriv.federation.protocol import Query
from fedpriv.federation.runtime import InProcessTransport
from fedpriv.federation.secagg import MaskedInput

HOSTILE = 1  # the tampering client
VICTIM = 2  # the client it impersonates
ATTACK_ROUND = 1  # round 0 is honest, so there is a reply to replay

#: case -> asserted outcome
CASES = {
    "replay": "dropout",  # round 0's upload again, tagged round 0
    "replay_retagged": "dropout",  # round 0's upload tagged round 1: its shares cover round 0
    "wrong_round": "dropout",  # an upload tagged for round 2
    "unmasked": "discarded",  # the plain encoding, no masks: the sum is ring noise
    "ring_wrap": "discarded",  # + 2^63 in the ring on one coordinate
    "past_codec_bound": "discarded",  # + 1e9, past the codec's per-client bound
    "impersonation": "aborted",  # its upload, re-addressed, in the victim's name
    "wrong_length": "dropout",  # one coordinate too many
    "float_vector": "dropout",  # float64 instead of ring elements
    "nan": "dropout",  # its handler yields NaN: its own shim refuses to mask
    "straggler": "dropout",  # its upload arrives after the round closed
}


#: A forgery inside the codec's range that only the sample-size-aware range check
#: catches: + half of record_bound · n on every coordinate, ≈ 10× the largest sum an
#: honest Poisson(q = 0.05) sample can produce, yet half the bound that ignores q.
RANGE_CASES = {"inflated": "discarded"}


#: Plain sums (in-process benchmarks): the server sees each vector, so each is
#: checked whole; every forged one is its sender's dropout.
PLAIN_CASES = {
    "past_codec_bound": lambda v: v + 1e9,
    "wrong_length": lambda v: np.append(v, 0.0),
    "float32": lambda v: v.astype(np.float32),
    "inf": lambda v: np.full_like(v, np.inf),
}


class HostileTransport(InProcessTransport):
    """The in-process transport with one client tampering in one round (module docstring)."""

    def __init__(self, case: str, **kwargs) -> None:
        super().__init__(**kwargs)
        if case not in CASES and case not in PLAIN_CASES and case not in RANGE_CASES:
            raise ValueError(f"unknown case {case!r}; one of {sorted(CASES)}")
        self.case = case
        self.honest: dict[int, dict[int, np.ndarray]] = {}  # round -> client -> vector
        self.previous: MaskedInput | None = None
        handler = self.handler
        outer = self

        class Recording:
            """The honest handler, recording each reply (and the hostile NaN)."""

            def answer(self, query: Query, data, sample, state, key=None):
                vec = handler.answer(query, data, sample, state, key)
                outer.honest.setdefault(query.round, {})[data.client_id] = vec
                attacked = query.round == ATTACK_ROUND and data.client_id == HOSTILE
                if attacked and outer.case == "nan":
                    return np.full_like(vec, np.nan)
                if attacked and not outer.secure and outer.case in PLAIN_CASES:
                    return PLAIN_CASES[outer.case](vec)
                return vec

        self.handler = Recording()
        self.vectorised = False  # per-client answers: the hostile one differs

    def ask(self, plan):
        replies = super().ask(plan)
        r, masked = plan.query.round, dict(replies.masked)
        mine = masked.get(HOSTILE)
        if r == 0:
            self.previous = mine
        if r != ATTACK_ROUND or self.case == "nan" or not self.secure:
            return replies
        case, n = self.case, plan.query.reply_length
        forged = None
        if case == "replay":
            forged = self.previous
        elif case == "replay_retagged":
            forged = dataclasses.replace(self.previous, round_id=r)
        elif case == "wrong_round":
            forged = dataclasses.replace(mine, round_id=r + 1)
        elif case == "unmasked":
            forged = dataclasses.replace(mine, vector=plan.codec.encode(self.honest[r][HOSTILE]))
        elif case == "ring_wrap":
            v = mine.vector.copy()
            v[:1] += np.uint64(2**63)  # array addition wraps mod 2^64 silently
            forged = dataclasses.replace(mine, vector=v)
        elif case == "past_codec_bound":
            v = mine.vector.copy()
            v[:1] += np.uint64(int(1e9 * plan.codec.scale))  # what encode(1e9) would add
            forged = dataclasses.replace(mine, vector=v)
        elif case == "inflated":
            n_public = sum(c.n for c in self.clients)  # the strategy's public n
            extra = 0.5 * plan.query.record_bound * n_public
            forged = dataclasses.replace(
                mine, vector=mine.vector + np.uint64(int(extra * plan.codec.scale))
            )
        elif case == "impersonation":
            # The victim's upload never arrives; the hostile one's, re-addressed as if
            # the victim had sealed it, arrives in its name.
            shares = dict(mine.shares)
            shares[HOSTILE] = shares.pop(VICTIM)
            masked[VICTIM] = dataclasses.replace(mine, shares=shares)
        elif case == "wrong_length":
            forged = dataclasses.replace(mine, vector=np.zeros(n + 1, dtype=np.uint64))
        elif case == "float_vector":
            forged = dataclasses.replace(mine, vector=mine.vector.astype(np.float64))
        elif case == "straggler":
            del masked[HOSTILE]
            senders = tuple(u for u in replies.senders if u != HOSTILE)
            return dataclasses.replace(replies, senders=senders, masked=masked)
        if forged is not None:
            masked[HOSTILE] = forged
        return dataclasses.replace(replies, masked=masked)
