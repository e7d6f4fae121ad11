"""Who is asked and how their sum is encoded: the pieces every runtime plans a round with.

The fixed-point codec of a round (:func:`codec_for`), the private participation
coins (:func:`round_plan`, :func:`participation_streams`), each client's own key
(:func:`client_key`) and the start of a strategy (:func:`begin_strategy`), shared by
the round engine (:mod:`fedpriv.federation.engine`) and the runtimes.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from fedpriv.federation.fixedpoint import SecAggOverflowError
from fedpriv.federation.protocol import Strategy
from fedpriv.federation.secagg import FixedPointCodec
from fedpriv.privacy.randomness import GRID, PrivateStreams, SecretKey
from fedpriv.seeding import derive_generator

if TYPE_CHECKING:  # the accountant (dp_accounting, scipy) costs a ClientApp ~0.7 s to import
    from fedpriv.privacy.ledger import PrivacyLedger

#: Fixed-point scale of the shim: 2^-32 ≈ 2.3e-10 resolution per summand. It must be
#: the noise grid's 1/γ: the mechanisms' rounding margin γ√d (γd in L1) covers the
#: codec's rounding of the one client a record changes only then (see
#: :func:`codec_for`), and the decoded sum then lies on the grid already.
DEFAULT_SCALE = 1.0 / GRID  # = 2.0**32 exactly
#: Fewest clients whose sum may be revealed; below it a round is aborted.
MIN_PARTIES = 2


def codec_for(
    record_bound: float, max_records: int, n_clients: int, scale: float
) -> FixedPointCodec:
    """Fixed-point codec whose range holds the largest possible sum.

    One client's coordinate is at most ``record_bound · max_records`` in
    absolute value (clipping bound times a public bound on its record count),
    and at most ``n_clients`` vectors are summed; the codec refuses a scale
    that could overflow instead of wrapping silently.

    Rounding and DP: one record changes one client's vector v by Δ (L2); its
    encoding rint(v·s)/s moves by at most Δ + √d/s (each coordinate's rounding
    error is ≤ 1/(2s), so two roundings differ by ≤ 1/s), and no other
    client's encoding moves. With s = 1/γ = 2^32 that is Δ₂ + γ√d, exactly the
    margin every Gaussian/Laplace mechanism adds to its sensitivity
    (:func:`fedpriv.privacy.randomness.rounding_margin`); the decoded sum is
    then on the grid γℤ, so the mechanism's own rounding adds nothing more. A
    coarser scale would leave the margin short (√d/s > γ√d), a finer one
    would round twice: both are refused.
    """
    if scale != DEFAULT_SCALE:
        raise ValueError(
            f"scale must be 2**32 = {DEFAULT_SCALE!r} (the noise grid's 1/γ, which the "
            f"mechanisms' rounding margin assumes); got {scale!r}"
        )
    try:
        return FixedPointCodec(
            scale=scale, max_abs=record_bound * max_records, max_summands=n_clients
        )
    except SecAggOverflowError:
        # The scale is fixed (above): the run's declared sizes are what must change.
        # The largest m with n · (m · bound · scale + 1/2) < 2^63 − 1, exactly.
        top = (Fraction(2**63 - 1, n_clients) - Fraction(1, 2)) / (
            Fraction(record_bound) * Fraction(scale)
        )
        most = math.ceil(top) - 1
        sum_range = "the secure sum (2^32 fixed point, signed 64 bits) cannot hold more"
        if most < 1:  # not even one record: the per-record bound itself is too large
            raise SecAggOverflowError(
                f"a record adds up to {record_bound:g} to a sum (the method's clipping bound, "
                f"e.g. clip-norm) with {n_clients} clients: {sum_range}; lower the bound"
            ) from None
        raise SecAggOverflowError(
            f"max-records must be at most {most:,} for {n_clients} clients whose records "
            f"each add up to {record_bound:g} to a sum; got {max_records:,}: {sum_range}"
        ) from None


def round_plan(
    fates: PrivateStreams,
    round_id: int,
    n_clients: int,
    participation: float,
    dropout_rate: float = 0.0,
) -> tuple[list[int], set[int]]:
    """Which clients are asked in ``round_id`` (each w.p. ρ) and whose replies get lost.

    Drawn from the server's private streams (participation coins are private
    randomness: the ρ-amplification assumes no one can predict them); every
    runtime draws the same substream from the same key, so the in-process and
    Flower runs ask the same clients.
    """
    if participation >= 1.0 and not dropout_rate:
        # Everyone, for sure: the draws below could only say so (u < 1 always).
        return list(range(n_clients)), set()
    fate = fates.at(round_id)
    asked = [i for i in range(n_clients) if fate.random() < participation]
    lost = {i for i in asked if dropout_rate and fate.random() < dropout_rate}
    return asked, lost


def client_key(key: SecretKey, client_id: int) -> SecretKey:
    """Client ``client_id``'s own key: its coins are secret from the server and its peers."""
    return key.derive("client", client_id)


def participation_streams(key: SecretKey) -> PrivateStreams:
    """The server's private per-round participation coins."""
    return key.derive("server").streams("participation")


def begin_strategy(
    strategy: Strategy,
    *,
    n_features: int,
    ledger: PrivacyLedger | None,
    seed: int,
    secret_key: SecretKey,
    noise_stream: str = "noise",
) -> None:
    """Start ``strategy`` as every runtime does: public generator from ``seed``, the
    server's private one from ``secret_key`` (a debug key voids the ledger's guarantee).

    ``noise_stream`` names the server's private stream: a second strategy in the same
    run (the DP evaluation after training) takes its own, never a replay of the first's.
    """
    if ledger is not None and not secret_key.certified:
        ledger.mark_uncertified(secret_key.public_reason)
    strategy.begin(
        n_features=n_features,
        ledger=ledger,
        rng=derive_generator(seed, "server"),
        secret_rng=secret_key.derive("server").generator(noise_stream),
    )


def check_participation(strategy: Strategy, participation: float) -> float:
    """``participation``, refused unless it is the ρ ``strategy`` was planned for.

    A strategy whose accounting reads ρ (its ``participation`` attribute, from
    :class:`~fedpriv.methods.StrategyContext`) calibrates its noise and charges its
    ledger for it: on a runtime drawing another ρ its report would be wrong (planned
    for ρ = 0.2 with tight accounting, run at ρ = 1: ε 1.000 reported where 1.23 was
    spent). One ρ decides both, so a mismatch stops the run before any round. A
    strategy without the attribute accounts every round as if every client answered,
    which holds at any ρ.
    """
    declared = getattr(strategy, "participation", None)
    if declared is not None and float(declared) != float(participation):
        raise ValueError(
            f"participation: {type(strategy).__name__} was planned for participation "
            f"{float(declared):g} (its accounting), the runtime draws clients at "
            f"{float(participation):g}; give both the same value (one run setting)"
        )
    return participation
