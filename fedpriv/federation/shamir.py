"""Shamir secret sharing over a prime field, with Python integers (Shamir 1979).

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

The default field is GF(2^255 − 19), the prime of Curve25519 (RFC 7748): a
secret drawn uniformly from it has 255 bits of entropy and fits a 32-byte
key, so a 32-byte seed is one field element, not several. The functions are
pure apart from :func:`split`, which draws the coefficients from the OS CSPRNG
(``secrets``); :func:`evaluate` takes them explicitly, for tests.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

#: The field's prime p = 2^255 − 19 (RFC 7748 §4.1).
PRIME = 2**255 - 19
#: Bytes of one field element of GF(PRIME), little-endian.
ELEMENT_BYTES = 32


class ShamirError(ValueError):
    """Shares that cannot be reconstructed: too few, or not on one polynomial."""


def _check_field(prime: int, value: int, name: str) -> int:
    if type(value) is not int or not 0 <= value < prime:
        raise ValueError(f"{name} must be an int in [0, {prime}) (the field); got {value!r}")
    return value


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


def evaluate(
    secret: int, coefficients: Sequence[int], xs: Iterable[int], *, prime: int = PRIME
) -> dict[int, int]:
    """Shares f(x) for each x in ``xs``, f(x) = secret + Σ_k coefficients[k−1]·x^k mod p.

    Deterministic: the coefficients are given, so tests can enumerate them.
    The threshold is ``len(coefficients) + 1``.
    """
    _check_field(prime, secret, "secret")
    for k, c in enumerate(coefficients, start=1):
        _check_field(prime, c, f"coefficient {k}")
    out = {}
    for x in _check_points(xs, prime):
        acc = 0
        for c in reversed(coefficients):  # Horner: ((c_{t−1}·x + c_{t−2})·x + …)·x + s
            acc = (acc + c) * x % prime
        out[x] = (acc + secret) % prime
    return out


def split(secret: int, *, xs: Sequence[int], threshold: int, prime: int = PRIME) -> dict[int, int]:
    """Shamir shares of ``secret`` at the points ``xs``: any ``threshold`` of them recover it.

    The t − 1 coefficients come from the OS CSPRNG (``secrets.randbelow``),
    never from a seeded generator: predictable coefficients would give the
    secret away from fewer than t shares.
    """
    points = _check_points(xs, prime)
    _check_threshold(threshold, len(points))
    coefficients = [secrets.randbelow(prime) for _ in range(threshold - 1)]
    return evaluate(secret, coefficients, points, prime=prime)


@lru_cache(maxsize=256)
def lagrange_coefficients(xs: tuple[int, ...], at: int, prime: int = PRIME) -> tuple[int, ...]:
    """λ_j with f(at) = Σ_j λ_j·f(x_j) for every f of degree < len(xs) (Lagrange basis at ``at``).

    λ_j = Π_{m≠j} (at − x_m) / (x_j − x_m) mod p. Cached: a round reconstructs
    every survivor's secret from the same points.
    """
    points = _check_points(xs, prime)
    out = []
    for j, xj in enumerate(points):
        num = den = 1
        for m, xm in enumerate(points):
            if m != j:
                num = num * (at - xm) % prime
                den = den * (xj - xm) % prime
        out.append(num * pow(den, -1, prime) % prime)
    return tuple(out)


def reconstruct(shares: Mapping[int, int], *, threshold: int, prime: int = PRIME) -> int:
    """The secret f(0) from at least ``threshold`` shares {x: f(x)}.

    Interpolates through the ``threshold`` shares with the smallest x and
    checks every further share against that polynomial.

    Raises
    ------
    ShamirError
        Fewer than ``threshold`` shares, or shares that do not lie on one
        polynomial of degree < ``threshold`` (some share is wrong).
    """
    if type(threshold) is not int or threshold < 1:
        raise ValueError(f"threshold must be an int >= 1; got {threshold!r}")
    if len(shares) < threshold:
        raise ShamirError(f"need at least threshold = {threshold} shares; got {len(shares)}")
    xs = tuple(sorted(shares))
    _check_points(xs, prime)
    ys = [_check_field(prime, shares[x], f"share at x = {x}") for x in xs]
    base, base_ys = xs[:threshold], ys[:threshold]
    for x, y in zip(xs[threshold:], ys[threshold:], strict=True):
        lam = lagrange_coefficients(base, x, prime)
        if sum(a * b for a, b in zip(lam, base_ys, strict=True)) % prime != y:
            raise ShamirError(
                f"share at x = {x} is not on the polynomial through x = {list(base)}: "
                f"some share is wrong"
            )
    lam = lagrange_coefficients(base, 0, prime)
    return sum(a * b for a, b in zip(lam, base_ys, strict=True)) % prime


def to_bytes(value: int) -> bytes:
    """A GF(:data:`PRIME`) element as :data:`ELEMENT_BYTES` little-endian bytes."""
    return _check_field(PRIME, value, "field element").to_bytes(ELEMENT_BYTES, "little")


def from_bytes(raw: bytes) -> int:
    """Inverse of :func:`to_bytes`; refuses a wrong length or a value ≥ p."""
    raw = bytes(raw)
    if len(raw) != ELEMENT_BYTES:
        raise ValueError(f"a field element takes {ELEMENT_BYTES} bytes; got {len(raw)}")
    return _check_field(PRIME, int.from_bytes(raw, "little"), "field element")
