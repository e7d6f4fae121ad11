"""Shamir secret sharing of many secrets at once, over GF(2^61 − 1) in numpy (Shamir 1979).

Shamir, A. (1979). "How to share a secret". Communications of the ACM 22(11),
612–613. A secret s ∈ GF(p) is the constant term of a random polynomial

    f(x) = s + c_1·x + … + c_{t−1}·x^{t−1}   (mod p),  c_k uniform in GF(p),

and party j holds the share (x_j, f(x_j)) for a distinct non-zero x_j. Any t
shares determine f, hence s = f(0), by Lagrange interpolation; any t − 1 shares
are uniformly distributed on GF(p)^{t−1} whatever s is (perfect secrecy): for
fixed s the map (c_1, …, c_{t−1}) ↦ (f(x_1), …, f(x_{t−1})) is a bijection
(a Vandermonde system). More than t shares over-determine f, so
:func:`reconstruct` checks that all of them lie on one polynomial of degree
< t and refuses inconsistent (wrong or tampered) shares; exactly t shares
cannot be checked, and a wrong one then yields a wrong, uniformly shifted secret.

Batches. Every function acts on a batch of B secrets with B independent
polynomials at once. Their shares at n points are one matrix product,

    Y = V·C   (mod p),   V[i, k] = x_i^k (n × t),   C = [s; c_1; …; c_{t−1}] (t × B),

with V cached per point set, and the secrets are s = λ(0)·Y_base, where
Y_base holds the shares at the t smallest points and the Lagrange weights
λ_j(0) are computed once per point set (cached) and reused for every secret of
the batch. The extra shares must satisfy Y_extra = Λ(x_extra)·Y_base; a random
combination of their rows is checked (one row of products, not one per extra share;
false acceptance 1/p), and a failure is located row by row. The arithmetic is
:mod:`fedpriv.federation.field` (uint64 arrays, no Python integer per share).

Field and seeds. p = 2^61 − 1, a Mersenne prime. One element carries
log2(p) ≈ 61 bits, fewer than a 256-bit key, so a secure-aggregation seed is
:data:`LIMBS` = 5 independent uniform elements (:func:`draw_seed`, OS CSPRNG):
5·log2(2^61 − 1) ≈ 305 bits of entropy (short of 305 by < 10^−17), more than
the 256-bit ChaCha20 key that HKDF-SHA256 derives from it
(:func:`fedpriv.federation.secagg_common.self_mask`). Each limb is shared by its
own polynomial with fresh coefficients, so the argument above holds per limb,
and, the polynomials being independent, t − 1 shares of the whole seed are
uniform on GF(p)^{5(t−1)} whatever the seed: the seed stays hidden
information-theoretically, as one element of a larger field would. A share of a
seed is 5 elements, :data:`SHARE_BYTES` = 40 bytes (:func:`to_bytes`).
The functions are pure apart from :func:`split`, :func:`draw_seed` and :func:`draw_seeds`, which
draw from the OS CSPRNG; :func:`evaluate` takes the coefficients explicitly,
for tests. ``prime`` may also be a small prime (< 2^31), for exhaustive tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from fedpriv.federation import field

#: The field's prime p = 2^61 − 1.
PRIME = field.PRIME
#: Field elements per seed: LIMBS·log2(p) ≈ 305 ≥ 256 bits of entropy.
LIMBS = 5
#: Bytes of one field element, little-endian uint64.
ELEMENT_BYTES = 8
#: Point sets whose Lagrange weights :func:`reconstruct_many` computes in one batch
#: (bounds its arrays: batch × points × threshold elements).
_BATCH = 128
#: Bytes of one share of a seed: :data:`LIMBS` elements.
SHARE_BYTES = LIMBS * ELEMENT_BYTES


class ShamirError(ValueError):
    """Shares that cannot be reconstructed: too few, malformed, or not on one polynomial.

    ``index``: the batch position of the first secret concerned (``None`` if all);
    ``item``: under :func:`reconstruct_many`, the position of the item concerned.
    """

    def __init__(
        self, message: str, *, index: tuple[int, ...] | None = None, item: int | None = None
    ) -> None:
        super().__init__(message)
        self.index = index
        self.item = item


def _check_points(xs: Iterable[int], prime: int) -> tuple[int, ...]:
    out = tuple(xs)
    if any(type(x) is not int or not 0 < x < prime for x in out) or len(set(out)) != len(out):
        raise ValueError(f"share points must be distinct ints in [1, {prime}); got {list(out)}")
    return out


def _check_threshold(threshold: int, n: int) -> int:
    if type(threshold) is not int or not 1 <= threshold <= n:
        raise ValueError(
            f"threshold must be an int in [1, {n}] (the number of shares); got {threshold!r}"
        )
    return threshold


def _check_elements(name: str, values: object, prime: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != np.uint64 or np.any(arr >= np.uint64(prime)):
        raise ValueError(f"{name} must be uint64 elements of GF({prime}), each in [0, {prime})")
    return arr


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False  # cached: shared by every caller
    return arr


@lru_cache(maxsize=64)
def vandermonde(xs: tuple[int, ...], degree: int, prime: int = PRIME) -> np.ndarray:
    """V[i, k] = x_i^k mod p for k < ``degree`` (read-only, cached per point set)."""
    points = np.array(_check_points(xs, field.check_prime(prime)), dtype=np.uint64)
    out = np.ones((points.size, degree), dtype=np.uint64)
    for k in range(1, degree):
        out[:, k] = field.mulmod(out[:, k - 1], points, prime)
    return _frozen(out)


@lru_cache(maxsize=256)
def lagrange_weights(xs: tuple[int, ...], at: tuple[int, ...], prime: int = PRIME) -> np.ndarray:
    """Λ[a, j] with f(at_a) = Σ_j Λ[a, j]·f(x_j) for every f of degree < len(xs).

    Λ[a, j] = Π_{m≠j} (at_a − x_m) / Π_{m≠j} (x_j − x_m) mod p (Lagrange basis),
    for all targets at once: the numerators and denominators are exclusive
    products along m (:func:`fedpriv.federation.field.exclusive_products`), the
    t denominators are inverted together. Read-only, cached: a round
    reconstructs every survivor's seed from the same points.
    """
    points = np.array(_check_points(xs, field.check_prime(prime)), dtype=np.uint64)
    return _frozen(_weights(points, reduce_ints(at, prime), prime))


def _weights(points: np.ndarray, targets: np.ndarray, prime: int) -> np.ndarray:
    # Λ of :func:`lagrange_weights` for distinct canonical points (0 allowed: split's base),
    # points (..., t) and targets (..., a) -> (..., a, t): leading axes are a batch of point
    # sets, whose exclusive products and inverses run together.
    sub = field.submod
    num = field.exclusive_products(sub(targets[..., :, None], points[..., None, :], prime), prime)
    gaps = sub(points[..., :, None], points[..., None, :], prime)  # x_j − x_m
    j = np.arange(points.shape[-1])
    gaps[..., j, j] = 1  # the factor m = j is left out of Π_{m≠j}
    inv = field.inverse(field.product(gaps, prime), prime)  # x_j − x_m ≠ 0 for m ≠ j
    return field.mulmod(num, inv[..., None, :], prime)


@lru_cache(maxsize=64)
def _completion(xs: tuple[int, ...], threshold: int, prime: int) -> tuple[np.ndarray, np.ndarray]:
    # f at xs[t − 1:] from f(0) and f at xs[:t − 1] (Lagrange through those t points), and
    # its limbs for field.matmul: computed once per point set (every client of a SecAgg+
    # run shares at the same points, fedpriv.federation.secagg_topology).
    base = np.array((0, *xs[: threshold - 1]), dtype=np.uint64)
    weights = _weights(base, np.array(xs[threshold - 1 :], dtype=np.uint64), prime)
    return _frozen(weights), _frozen(field.left_limbs(weights))


def reduce_ints(values: Iterable[int], prime: int = PRIME) -> np.ndarray:
    """Python ints in [0, 2^64) as canonical uint64 elements (points and targets)."""
    return field.reduce(np.array(list(values), dtype=np.uint64).reshape(-1), prime)


def evaluate(
    secrets: np.ndarray, coefficients: np.ndarray, xs: Sequence[int], *, prime: int = PRIME
) -> np.ndarray:
    """Shares f_b(x) for each x in ``xs`` and each secret b of the batch, shape (n, *batch).

    f_b(x) = secrets[b] + Σ_k coefficients[k − 1, b]·x^k mod p; ``coefficients``
    has shape (t − 1, *batch), so the threshold is t. Deterministic: the
    coefficients are given, so tests can enumerate them.
    """
    field.check_prime(prime)
    s = _check_elements("secrets", secrets, prime)
    c = _check_elements("coefficients", coefficients, prime)
    if c.ndim != s.ndim + 1 or c.shape[1:] != s.shape:
        raise ValueError(f"coefficients must have shape (t - 1, *{s.shape}); got {c.shape}")
    return _evaluate(s, c, _check_points(xs, prime), prime)


@lru_cache(maxsize=64)
def _vandermonde_limbs(xs: tuple[int, ...], degree: int, prime: int) -> np.ndarray:
    # V's limbs for field.matmul, split once per point set: every client of a SecAgg+
    # run shares at the same points (fedpriv.federation.secagg_topology).
    return _frozen(field.left_limbs(vandermonde(xs, degree, prime)))


def _evaluate(s: np.ndarray, c: np.ndarray, points: tuple[int, ...], prime: int) -> np.ndarray:
    # Y = V·[s; c] for checked arguments: one matrix product for the whole batch.
    stacked = np.concatenate([s[None], c]).reshape(c.shape[0] + 1, -1)
    degree = stacked.shape[0]
    ys = field.matmul(
        vandermonde(points, degree, prime), stacked, prime,
        a_limbs=_vandermonde_limbs(points, degree, prime),
    )  # fmt: skip
    return ys.reshape(len(points), *s.shape)


def split(
    secrets: np.ndarray, *, xs: Sequence[int], threshold: int, prime: int = PRIME
) -> np.ndarray:
    """Shamir shares of every secret of the batch at the points ``xs``, shape (n, *batch):
    any ``threshold`` rows recover the batch.

    The shares at the first t − 1 points are (t − 1)·B uniform elements, one draw
    from the OS CSPRNG (:func:`fedpriv.federation.field.random_elements`), never from
    a seeded generator: predictable ones would give the secrets away from fewer than t
    shares. The others are the polynomial through (0, s) and those t − 1 points,
    evaluated with cached Lagrange weights: one matrix product of n − t + 1 rows, not
    n. This is the same distribution as uniform coefficients (module docstring: for a
    fixed s, coefficients and the values at t − 1 non-zero points are in bijection).
    """
    points = _check_points(xs, field.check_prime(prime))
    t = _check_threshold(threshold, len(points))
    s = _check_elements("secrets", secrets, prime)
    free = field.random_elements((t - 1, *s.shape), prime).reshape(t - 1, s.size)
    weights, limbs = _completion(points, t, prime)
    rest = field.matmul(weights, np.concatenate([s.reshape(1, -1), free]), prime, a_limbs=limbs)
    return np.concatenate([free, rest]).reshape(len(points), *s.shape)


def reconstruct(
    xs: Sequence[int], ys: np.ndarray, *, threshold: int, prime: int = PRIME
) -> np.ndarray:
    """The secrets f_b(0), shape ``ys.shape[1:]``, from ``ys[i]`` = the shares at ``xs[i]``.

    Interpolates through the ``threshold`` shares with the smallest x and
    checks every further share against that polynomial, for all secrets at once.

    Raises
    ------
    ShamirError
        Fewer than ``threshold`` points, a share that is not a field element,
        or shares that do not lie on one polynomial of degree < ``threshold``
        (some share is wrong); ``index`` names the first secret concerned.
    """
    return reconstruct_many([(xs, ys)], threshold=threshold, prime=prime)[0]


def reconstruct_many(
    items: Sequence[tuple[Sequence[int], np.ndarray]], *, threshold: int, prime: int = PRIME
) -> list[np.ndarray]:
    """:func:`reconstruct` of each ``(xs, ys)`` item, with the same checks and results.

    Items with different point sets (a SecAgg+ round with dropouts: each seed's
    answering holders differ) would each cost one Lagrange computation, about 2·t
    modular products of a few elements each and an inversion. Here the weights of
    items are computed together, as one batch of exclusive products and one batched
    inversion over up to 128 point sets at a time; a single item keeps the cached
    :func:`lagrange_weights`.

    Raises
    ------
    ShamirError
        As :func:`reconstruct`, for the first item concerned; ``item`` names its
        position in ``items`` and ``index`` the secret in its batch.
    """
    if type(threshold) is not int or threshold < 1:
        raise ValueError(f"threshold must be an int >= 1; got {threshold!r}")
    field.check_prime(prime)
    jobs = [_job(k, xs, ys, threshold, prime) for k, (xs, ys) in enumerate(items)]
    if len(jobs) == 1:  # one point set (every holder answered, the common case): the cache
        ranked = jobs[0][0]
        weights = [lagrange_weights(ranked[:threshold], (0, *ranked[threshold:]), prime)]
    else:
        weights = []
        for lo in range(0, len(jobs), _BATCH):
            weights += _weights_of([j[0] for j in jobs[lo : lo + _BATCH]], threshold, prime)
    out = []
    for k, (ranked, flat, batch) in enumerate(jobs):
        secret = _checked(weights[k], flat, threshold, prime)
        if secret is not None:
            out.append(secret.reshape(batch))
            continue
        got = field.matmul(weights[k], flat[:threshold], prime)  # locate the wrong share
        if (off := got[1:] != flat[threshold:]).any():
            col = int(np.flatnonzero(off.any(axis=0))[0])
            row = int(np.flatnonzero(off[:, col])[0])
            raise ShamirError(
                f"share at x = {ranked[threshold + row]} is not on the polynomial through "
                f"x = {list(ranked[:threshold])}: some share is wrong",
                index=tuple(int(i) for i in np.unravel_index(col, batch)), item=k,
            )  # fmt: skip
        out.append(got[0].reshape(batch))  # every extra share checked one by one: on it
    return out


def _checked(weights: np.ndarray, flat: np.ndarray, threshold: int, prime: int):
    """The secrets λ(0)·Y_base if every extra share lies on the polynomial; ``None`` if
    some may not (then :func:`reconstruct_many` checks them one by one).

    Random combinations of the extra rows instead of each (Schwartz–Zippel, the batch
    check of a linear relation): with ρ uniform on GF(p)^e drawn after the shares (OS
    CSPRNG), a column whose extra shares E differ from their completions Λ_e·Y_base
    passes ρ·E = (ρ·Λ_e)·Y_base with probability 1/p, so c independent rows of ρ let a
    wrong share through with probability p^−c ≤ 2^−60: for p = 2^61 − 1 one row, three
    rows of products instead of 1 + e. A small test prime needs more rows than the
    extra shares themselves: then each is checked.
    """
    extra = flat.shape[0] - threshold
    if extra == 0:  # exactly t shares: nothing to check
        return field.matmul(weights[:1], flat[:threshold], prime)[0]
    rows = -(-60 // (prime.bit_length() - 1))  # p ≥ 2^(bits − 1): p^−rows ≤ 2^−60
    if rows >= extra:
        return None
    rho = field.random_elements((rows, extra), prime)
    left = np.concatenate([weights[:1], field.matmul(rho, weights[1:], prime)])
    got = field.matmul(left, flat[:threshold], prime)
    if (got[1:] != field.matmul(rho, flat[threshold:], prime)).any():
        return None
    return got[0]


def _weights_of(point_sets: list[tuple[int, ...]], threshold: int, prime: int) -> list:
    """Λ for each sorted point set (its first t points the base; targets 0 and the rest):
    one batch, the targets padded with 0 to the longest set's and the padding dropped."""
    extra = max(len(x) for x in point_sets) - threshold
    base = np.array([x[:threshold] for x in point_sets], dtype=np.uint64)
    targets = np.zeros((len(point_sets), 1 + extra), dtype=np.uint64)
    for i, x in enumerate(point_sets):
        targets[i, 1 : len(x) - threshold + 1] = x[threshold:]
    lam = _weights(base, targets, prime)
    return [lam[i, : len(x) - threshold + 1] for i, x in enumerate(point_sets)]


def _job(k: int, xs, ys, threshold: int, prime: int) -> tuple[tuple[int, ...], np.ndarray, tuple]:
    """Item ``k`` of :func:`reconstruct_many`, checked: its points in increasing order, its
    shares in that order (one row per point, one column per secret), its batch shape."""
    points = _check_points(xs, prime)
    if len(points) < threshold:
        raise ShamirError(
            f"need at least threshold = {threshold} shares; got {len(points)}", item=k
        )
    ys = np.asarray(ys)
    if ys.dtype != np.uint64 or ys.ndim < 1 or ys.shape[0] != len(points):
        raise ValueError(
            f"ys must be uint64 of shape ({len(points)}, ...); got {ys.dtype}{ys.shape}"
        )
    batch = ys.shape[1:]
    order = np.argsort(points, kind="stable")
    flat = ys[order].reshape(len(points), -1)
    ranked = tuple(points[i] for i in order)
    if (outside := flat >= np.uint64(prime)).any():
        row, col = np.argwhere(outside)[0]
        raise ShamirError(
            f"share at x = {ranked[row]} is not an element of GF({prime})",
            index=tuple(int(i) for i in np.unravel_index(col, batch)), item=k,
        )  # fmt: skip
    return ranked, flat, batch


def draw_seed(prime: int = PRIME) -> np.ndarray:
    """A fresh seed: :data:`LIMBS` independent uniform elements of GF(p), OS CSPRNG."""
    return field.random_elements(LIMBS, prime)


def draw_seeds(count: int, prime: int = PRIME) -> np.ndarray:
    """``count`` fresh independent seeds, shape (count, :data:`LIMBS`), OS CSPRNG."""
    return field.random_elements((count, LIMBS), prime)


def to_bytes(elements: np.ndarray) -> bytes:
    """Elements of GF(:data:`PRIME`) as little-endian uint64 words (a seed's share: 40 bytes)."""
    return _check_elements("field elements", elements, PRIME).astype("<u8").tobytes()


def seed_bytes(seed: np.ndarray) -> bytes:
    """:func:`to_bytes` of one seed; its checks in a few Python operations, not numpy calls
    (the self-mask key of every seed, every round, is derived from these bytes)."""
    if type(seed) is np.ndarray and seed.dtype.str == "<u8" and seed.size == LIMBS:
        if max(seed.tolist()) < PRIME:
            return seed.tobytes()
    return to_bytes(seed)


def from_bytes(raw: bytes, *, count: int = LIMBS) -> np.ndarray:
    """Inverse of :func:`to_bytes` for ``count`` elements; refuses a wrong length or a value ≥ p."""
    raw = bytes(raw)
    if len(raw) != count * ELEMENT_BYTES:
        raise ValueError(
            f"{count} field elements take {count * ELEMENT_BYTES} bytes; got {len(raw)}"
        )
    return _check_elements(
        "field elements", np.frombuffer(raw, dtype="<u8").astype(np.uint64), PRIME
    )
