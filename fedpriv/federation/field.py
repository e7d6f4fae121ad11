"""Arithmetic in a prime field GF(p) on numpy uint64 arrays; p = 2^61 − 1 by default.

An element of GF(p) is a uint64 in [0, p) (*canonical*). The default modulus is
the Mersenne prime p = 2^61 − 1, for which 2^61 ≡ 1 (mod p): a word
x = h·2^61 + l reduces to h + l with a shift, a mask and an add (Crandall & Pomerance,
*Prime Numbers*, 2nd ed., §9.2.3). The product of two elements has up to 122 bits,
more than a uint64 holds, so :func:`mulmod` never forms it: with 32-bit halves
a = a_h·2^32 + a_l (a_h < 2^29, a_l < 2^32; likewise b) and m = a_h·b_l + a_l·b_h,

    a·b = a_h·b_h·2^64 + m·2^32 + a_l·b_l
        ≡ 8·a_h·b_h + ⌊m / 2^29⌋ + (m mod 2^29)·2^32 + a_l·b_l   (mod p)

(2^64 = 8·2^61 ≡ 8, and m·2^32 = ⌊m/2^29⌋·2^61 + (m mod 2^29)·2^32). Each partial
product fits 64 bits (a_h·b_h < 2^58, m < 2^62, a_l·b_l < 2^64) and, with a_l·b_l
folded to (a_l·b_l mod 2^61) + ⌊a_l·b_l / 2^61⌋, the sum stays below 2^63, so no
step wraps; one more fold and one conditional subtraction give the canonical
result. :func:`matmul` splits entries into three 21-bit limbs and lets numpy's
integer matmul add the limb products (each < 2^42; k of them, k ≤ 2^20, stay below
2^62), then recombines the nine limb products with the scalar rules above. No
Python integer enters the arithmetic, but in the smallest products (at most
:data:`SMALL_WORK` multiply-adds, e.g. a Shamir split among five clients), where
numpy's object dtype multiplies exact Python integers in a tenth of the limb
products' fixed cost.

A small prime p < 2^31 takes the direct path a·b mod p (a·b < 2^62), so the
same code runs over a tiny field in tests, where Shamir's perfect secrecy can be
checked by exhaustive enumeration (:mod:`fedpriv.federation.shamir`).
Randomness: :func:`random_elements` only, from the OS CSPRNG (``secrets``).
"""

from __future__ import annotations

import contextlib
import secrets
from functools import lru_cache

import numpy as np

#: The default modulus, the Mersenne prime 2^61 − 1.
PRIME = (1 << 61) - 1
#: Largest inner dimension of :func:`matmul`: 3·k·2^42 < 2^64 (three limb products per sum).
MAX_INNER = 1 << 20
#: Largest inner dimension whose limb products :func:`matmul` sums in float64 (BLAS):
#: k·(2^21 − 1)^2 < 2^53, so every partial sum is an integer float64 holds exactly.
FLOAT_INNER = 1 << 11
#: Largest inner dimension whose limb products of one weight (up to three) :func:`matmul`
#: adds in float64 too: 3·k·(2^21 − 1)^2 < 2^53.
FLOAT_CLASS_INNER = 682

_U64 = np.uint64
_P61 = _U64(PRIME)
_LO32 = _U64((1 << 32) - 1)
_LO29 = _U64((1 << 29) - 1)
_LIMB = 21
_LIMB_MASK = _U64((1 << _LIMB) - 1)
_CHUNK = 1 << 16  # output entries per matmul block: bounds the (3, 3, m, w) limb products
#: Products of at most this many multiply-adds run on exact Python integers (object dtype).
SMALL_WORK = 256
#: Products of more multiply-adds run with one BLAS thread (:func:`_one_thread`); below it
#: OpenBLAS uses one anyway (its threshold, 4·2^16).
_SERIAL_WORK = 1 << 18


@lru_cache(maxsize=64)
def check_prime(prime: int) -> int:
    """``prime`` if it is 2^61 − 1 or a prime in (2, 2^31), else ValueError."""
    if type(prime) is not int or not (prime == PRIME or 2 < prime < 1 << 31):
        raise ValueError(f"prime must be 2**61 - 1 or a prime in (2, 2**31); got {prime!r}")
    if prime != PRIME and any(prime % d == 0 for d in range(2, int(prime**0.5) + 1)):
        raise ValueError(f"prime must be prime; got {prime}")
    return prime


def _u64(name: str, x: object) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.uint64:
        raise TypeError(f"{name} must be a uint64 array; got dtype {arr.dtype}")
    return arr


def _fold(x: np.ndarray) -> np.ndarray:
    # x mod 2^61 + ⌊x / 2^61⌋ ≡ x (mod 2^61 − 1); < 2^61 + 8 for any uint64 x.
    return (x & _P61) + (x >> _U64(61))


def _canon(x: np.ndarray, p: np.uint64) -> np.ndarray:
    # From [0, 2p) to [0, p).
    return np.where(x >= p, x - p, x)


def reduce(x: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """Any uint64 array mod p, canonical."""
    x = _u64("x", x)
    if check_prime(prime) != PRIME:
        return x % _U64(prime)
    return _canon(_fold(_fold(x)), _P61)  # < 2^61 + 8, then ≤ 2^61 − 1 = p: one subtraction


def _mul(a: np.ndarray, b: np.ndarray, prime: int) -> np.ndarray:
    """a·b mod p for canonical a, b (bounds: module docstring)."""
    if prime != PRIME:
        return a * b % _U64(prime)  # a, b < 2^31: the product fits
    a_h, a_l = a >> _U64(32), a & _LO32  # a_h < 2^29, a_l < 2^32
    b_h, b_l = b >> _U64(32), b & _LO32
    mid = a_h * b_l + a_l * b_h  # < 2^62
    low = a_l * b_l  # < 2^64
    s = (a_h * b_h) << _U64(3)  # 8·a_h·b_h < 2^61
    s += mid >> _U64(29)  # < 2^33
    s += (mid & _LO29) << _U64(32)  # < 2^61
    s += _fold(low)  # < 2^61 + 8; s < 3·2^61 + 2^34 < 2^63
    return _canon(_fold(s), _P61)  # fold: < 2^61 + 4 < 2p


def mulmod(a: np.ndarray, b: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """a·b mod p, elementwise (broadcasting), for any uint64 a, b: their 128-bit product
    reduced without forming it."""
    return _mul(reduce(a, prime), reduce(b, prime), prime)


def addmod(a: np.ndarray, b: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """a + b mod p for canonical a, b (a + b < 2p < 2^62)."""
    return _canon(a + b, _U64(prime))


def submod(a: np.ndarray, b: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """a − b mod p for canonical a, b."""
    return np.where(a >= b, a - b, a + (_U64(prime) - b))


def powmod(x: np.ndarray, exponent: int, prime: int = PRIME) -> np.ndarray:
    """x^exponent mod p elementwise for canonical x, by square and multiply."""
    result = np.ones_like(x)
    base = x
    while exponent:
        if exponent & 1:
            result = _mul(result, base, prime)
        base = _mul(base, base, prime)
        exponent >>= 1
    return result


def inverse(x: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """x^(−1) mod p elementwise (Fermat: x^(p−2)); ZeroDivisionError if some x ≡ 0."""
    if np.any(x == 0):
        raise ZeroDivisionError("0 has no inverse in GF(p)")
    return powmod(x, prime - 2, prime)


def exclusive_products(d: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """out[..., j] = Π_{m ≠ j} d[..., m] mod p for canonical d (prefix × suffix products).

    One pass each way along the last axis, so a zero factor is excluded exactly
    where it sits, with no division.
    """
    n = d.shape[-1]
    pre, suf = np.ones_like(d), np.ones_like(d)
    for j in range(1, n):
        pre[..., j] = _mul(pre[..., j - 1], d[..., j - 1], prime)
        suf[..., n - 1 - j] = _mul(suf[..., n - j], d[..., n - j], prime)
    return _mul(pre, suf, prime)


def product(d: np.ndarray, prime: int = PRIME) -> np.ndarray:
    """out[...] = Π_m d[..., m] mod p for canonical d: one pass along the last axis."""
    out = d[..., 0].copy()
    for m in range(1, d.shape[-1]):
        out = _mul(out, d[..., m], prime)
    return out


def _limbs(x: np.ndarray) -> np.ndarray:
    # x < 2^63 as three 21-bit limbs, x = Σ_i limb_i·2^(21·i); stacked on a new first axis.
    return np.stack([(x >> _U64(_LIMB * i)) & _LIMB_MASK for i in range(3)])


def _weigh(term: np.ndarray, g: int, prime: int) -> np.ndarray:
    """term·2^(21·g) mod p, for a limb-product sum term < 2^64, as a value < 2^61
    congruent to it (five of them add without wrapping)."""
    if prime != PRIME:
        return term % _U64(prime) * _U64(pow(2, _LIMB * g, prime)) % _U64(prime)
    x = _fold(_fold(term))  # ≤ p < 2^61
    e = _LIMB * g % 61  # 2^61 ≡ 1: multiplying by 2^e rotates the 61 bits left by e
    if e == 0:
        return x
    return ((x << _U64(e)) & _P61) | (x >> _U64(61 - e))


def left_limbs(a: np.ndarray) -> np.ndarray:
    """The left operand's limbs as :func:`matmul` sums them, shape (3, 1, m, k): to
    compute once for a matrix used in many products (``matmul(..., a_limbs=)``)."""
    a = _u64("a", a)
    exact = np.float64 if a.shape[-1] <= FLOAT_INNER else np.uint64  # matmul's docstring
    return _limbs(a)[:, None].astype(exact)


def matmul(
    a: np.ndarray, b: np.ndarray, prime: int = PRIME, *, a_limbs: np.ndarray | None = None
) -> np.ndarray:
    """(a @ b) mod p for canonical uint64 matrices a (m, k) and b (k, s).

    Exact: with 21-bit limbs a = Σ_i a_i·2^(21i), b = Σ_j b_j·2^(21j), each
    limb product sum (a_i @ b_j)[r, c] has k terms below 2^42, and the (up to
    three) of equal weight g = i + j add to less than 3·k·2^42 < 2^64 for
    k ≤ :data:`MAX_INNER`; each weight class is folded below 2^61 and scaled by
    2^(21·g) mod p (a rotation of 61 bits, 2^61 ≡ 1), and the five classes
    add to less than 5·2^61 < 2^64 before the last reduction. Computed in
    column blocks to bound memory. For k ≤ :data:`FLOAT_INNER` the limb products
    are summed by a float64 matrix product (BLAS): each sum is an integer below
    2^53, exact in float64 whatever the order of the additions. ``a_limbs``:
    :func:`left_limbs` of ``a``, if already computed.
    """
    a, b = _u64("a", a), _u64("b", b)
    check_prime(prime)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (m, k) @ (k, s); got {a.shape} @ {b.shape}")
    m, k = a.shape
    if k > MAX_INNER:
        raise ValueError(f"inner dimension {k} exceeds {MAX_INNER} (uint64 limb sums)")
    if m * k * b.shape[1] <= SMALL_WORK:  # exact integers: no limbs, no BLAS call
        exact = (a.astype(object) @ b.astype(object)) % prime
        return exact.astype(np.uint64).reshape(m, b.shape[1])
    al = left_limbs(a) if a_limbs is None else a_limbs  # (3, 1, m, k)
    bl = _right_limbs(b, al.dtype)  # (1, 3, k, s)
    out = np.empty((m, b.shape[1]), dtype=np.uint64)
    width = max(1, _CHUNK // max(m, 1))
    with _one_thread() if m * k * b.shape[1] > _SERIAL_WORK else contextlib.nullcontext():
        _products(al, bl, out, width, prime)
    return out


def _right_limbs(b: np.ndarray, dtype: type) -> np.ndarray:
    """:func:`_limbs` of ``b`` as ``dtype``, shape (1, 3, k, s): written in place (no stack,
    no second copy; the limbs are integers below 2^21, exact in float64)."""
    out = np.empty((1, 3, *b.shape), dtype=dtype)
    np.bitwise_and(b, _LIMB_MASK, out=out[0, 0], casting="unsafe")
    np.bitwise_and(b >> _U64(_LIMB), _LIMB_MASK, out=out[0, 1], casting="unsafe")
    np.right_shift(b, _U64(2 * _LIMB), out=out[0, 2], casting="unsafe")  # < 2^19 for b < 2^61
    return out


def _products(al: np.ndarray, bl: np.ndarray, out: np.ndarray, width: int, prime: int) -> None:
    """:func:`matmul`'s column blocks, into ``out``."""
    if al.dtype == np.float64 and al.shape[-1] <= FLOAT_CLASS_INNER:
        return _float_products(al, bl, out, width, prime)
    for lo in range(0, bl.shape[-1], width):
        # c[i, j] = a_i @ b_j, entries < k·2^42 (integers, exact in either type)
        c = np.matmul(al, bl[..., lo : lo + width]).astype(np.uint64)
        acc = _weigh(c[0, 0], 0, prime)
        for g in range(1, 5):
            same = [c[i, g - i] for i in range(3) if 0 <= g - i < 3]
            acc += _weigh(sum(same[1:], same[0]), g, prime)  # sum < 3·k·2^42 < 2^64
        out[:, lo : lo + width] = reduce(acc, prime)  # acc < 5·2^61 < 2^64


def _float_products(al, bl, out, width: int, prime: int) -> None:
    """:func:`_products` with each weight class g = i + j summed in float64 before the one
    conversion to integers (five arrays, not nine): its up to three limb-product sums are
    integers below 3·k·(2^21 − 1)^2 < 2^53 for k ≤ :data:`FLOAT_CLASS_INNER`, so exact."""
    for lo in range(0, bl.shape[-1], width):
        c = np.matmul(al, bl[..., lo : lo + width])  # (3, 3, m, w), exact integers
        acc = _weigh(c[0, 0].astype(np.uint64), 0, prime)
        for g in range(1, 5):
            same = [c[i, g - i] for i in range(3) if 0 <= g - i < 3]
            acc += _weigh(sum(same[1:], same[0]).astype(np.uint64), g, prime)
        out[:, lo : lo + width] = reduce(acc, prime)  # acc < 5·2^61 < 2^64


@lru_cache(maxsize=1)
def _blas() -> object:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # inspects the loaded libraries once


def _one_thread():
    """One BLAS thread for a large product. On a machine whose cores are busy, OpenBLAS's
    threads spin waiting for one another: a (73 × 125)·(125 × 5000) product took 8× the
    CPU time with its default threads as with one."""
    return _blas().limit(limits=1, user_api="blas")


def random_elements(shape: int | tuple[int, ...], prime: int = PRIME) -> np.ndarray:
    """Independent uniform elements of GF(p), from the OS CSPRNG (``secrets``), never a seed.

    Rejection sampling: 64-bit words masked to p's bit length, and the (for
    2^61 − 1, probability 2^−61) words ≥ p drawn again, so each element is
    exactly uniform on [0, p).
    """
    check_prime(prime)
    mask = _U64((1 << prime.bit_length()) - 1)
    out = np.zeros(shape, dtype=np.uint64)
    todo = np.ones(out.shape, dtype=bool)
    while (n := int(todo.sum())) > 0:
        draw = np.frombuffer(secrets.token_bytes(8 * n), dtype="<u8").astype(np.uint64) & mask
        out[todo] = draw
        todo &= out >= _U64(prime)
    return out
