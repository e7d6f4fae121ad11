"""The public size of an in-process fit: a declared bound, or a released count's bound.

No exact row count may decide anything in a fit (:mod:`fedpriv.privacy.record_count`).
:func:`fit_size` prepares an estimator's fit: its ledger and secret key, and the
public bounds every size-dependent choice uses: the total ``n_records`` (the forest's
automatic depth, sensitivities' bounds, normalisers, range checks) and the per-client
``max_records`` (the secure-aggregation codec's range).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fedpriv.data.node import check_bound
from fedpriv.privacy import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.randomness import SecretKey


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublicSize:
    """Public bounds on a fit's records, declared by its caller: ``n_records`` on all
    of them, ``max_records`` on one client's (e.g. cross-validation gives every fold
    the whole table's bounds, so no fold's own count decides anything)."""

    n_records: int
    max_records: int


@dataclasses.dataclass(frozen=True)
class FitSize:
    """A fit's ledger (``None``: non-private), the ledger its learner charges (the same,
    or a scope of it once a record count was released), its secret key, the public
    bound ``n_records`` on all records and ``max_records`` per client (``None``: the
    non-private reference's own rows), and ``released_count``: the released count ñ
    itself when no bound was declared (``None`` otherwise), for choices that should
    follow the likely size rather than its 1 − 1e-9 upper bound (Lumberjack's
    automatic forest size, :mod:`fedpriv.models.lumberjack_sizes`)."""

    ledger: PrivacyLedger | None
    learner: PrivacyLedger | None
    key: SecretKey
    n_records: int
    max_records: int | None
    released_count: float | None = None


def learner_epsilon(epsilon: float) -> float:
    """The learner's ε once the count took its share: (1 − COUNT_SHARE)·ε, rounded down to
    the accountant's 1e-4 grid when that keeps at least (1 − 2·COUNT_SHARE)·ε (a budget
    just off the grid, 0.99 · 30 = 29.700000000000003, can sit a grid step under what
    a learner spending its whole budget is accounted at)."""
    from fedpriv.privacy.record_count import COUNT_SHARE

    share = (1.0 - COUNT_SHARE) * epsilon
    on_grid = math.floor(share * 1e4) / 1e4
    return on_grid if on_grid >= (1.0 - 2.0 * COUNT_SHARE) * epsilon else share


def fit_size(
    est: Any,
    partition: list[np.ndarray],
    public: PublicSize | None = None,
    *,
    key: SecretKey | None = None,
    schema: Any = None,
) -> FitSize:
    """``est``'s fit ledger, key and public record bounds.

    ``key``: the fit's secret key if the caller drew it (else ``est.secret_key``);
    ``schema``: the data's public schema, whose privacy unit the ledger declares
    (:meth:`~fedpriv.privacy.PrivacyLedger.declare_unit`) and whose m a released
    count's sensitivity is (``None``: bare arrays, one record).

    ``public`` given: its bounds, each client checked against ``public.max_records``.
    Declared ``max_records``: n = clients × the bound. Undeclared, the exact count is
    never used: a private fit first releases it
    (:func:`~fedpriv.privacy.record_count.release_count`,
    :data:`~fedpriv.privacy.record_count.COUNT_SHARE` of ε, charged to the fit's
    ledger), every bound is its high-probability upper bound U, the released count ñ
    itself is kept for choices that follow the likely size (``released_count``), and
    the learner gets a scope of the ledger with the rest of ε. The non-private
    reference (no ledger) uses the rows: it releases them unprotected anyway.
    """
    from fedpriv.privacy.record_count import release_count

    key = SecretKey.coerce(est.secret_key if key is None else key)  # None: fresh OS entropy
    ledger = est._fit_ledger()
    m = 1 if schema is None else schema.unit_records
    if ledger is not None:  # before anything is spent: whom this fit's figures protect
        ledger.declare_unit("record" if schema is None else schema.privacy_unit)
    if public is not None:
        for rows in partition:
            check_bound(len(rows), public.max_records, source="fit")
        return FitSize(ledger, ledger, key, public.n_records, public.max_records)
    bound = est._record_bound(partition)
    if bound is not None:
        return FitSize(ledger, ledger, key, len(partition) * bound, bound)
    n = int(sum(len(p) for p in partition))
    if ledger is None:
        return FitSize(None, None, key, n, None)
    eps_count = est.epsilon - learner_epsilon(est.epsilon)
    rng = key.derive("server").generator("record-count")  # never the learner's stream
    noisy, upper = release_count(ledger, n, epsilon=eps_count, rng=rng, unit_records=m)
    for rows in partition:  # n ≤ U but with probability COUNT_TAIL: the bound's only
        check_bound(len(rows), upper, source="fit")
    learner = ledger.scope(PrivacyBudget(epsilon=learner_epsilon(est.epsilon), delta=est.delta))
    return FitSize(ledger, learner, key, upper, upper, released_count=noisy)
