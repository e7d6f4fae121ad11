"""Private randomness: secret keys, a CSPRNG, and noise on a fixed grid.

fedpriv keeps two kinds of randomness apart (docs/explanation/trust-model.md):

* **Public randomness** (random tree structure, thresholds, split features,
  initial weights) comes from the public run seed (:mod:`fedpriv.seeding`).
  It is released anyway, so anyone may replay it.
* **Private randomness** (every noise draw, Poisson coins, client
  participation, exponential-mechanism and permute-and-flip draws,
  record-to-tree assignment) comes from a :class:`SecretKey`. A key is drawn
  from the operating system's entropy unless the caller injects one (tests,
  paper reproductions). It is never logged, saved, pickled or sent: its repr
  hides it, and pickling stores a redacted placeholder that refuses to
  generate. Each party derives its own subkeys (HMAC-SHA256, RFC 2104), so a
  client's coins are unknown to the server and to every other client.

Generators are numpy ``Generator`` objects over ChaCha20 (Bernstein 2008;
``randomgen.ChaCha``, 20 rounds), a cryptographically secure stream cipher:
a draw reveals nothing about the key or about other draws, unlike PCG64,
whose state a few outputs expose.

Noise on a grid (Mironov 2012). Adding a float sample to a float value leaks
the value through the low-order bits of the result: the set of reachable
doubles depends on the input. Every additive mechanism here releases instead

    y = γ · (rint(x/γ) + rint(σ/γ · N)),   N ~ N(0, 1) or Laplace(0, 1),

with γ = 2^-32, the secure-aggregation codec's resolution. Both terms are
integers, so the released value lies on the grid γℤ whatever x is, and for
x on the grid ``rint(x/γ) + rint(σN/γ) = rint((x + σN)/γ)``: the release is a
deterministic function (post-processing) of the ideal continuous mechanism
``x + σN`` and inherits its exact privacy loss. Rounding an x that is not on
the grid moves each coordinate by at most γ/2, so the L2 distance between two
rounded neighbours grows by at most γ·√d (L1: γ·d); mechanisms add that
margin to their sensitivity (:func:`rounding_margin`) and the recorded event
stays exact. The float sample σN/γ has magnitude ≫ 1 with spacing ≪ 1 for any
σ ≥ 2^-20, so rounding it to an integer loses nothing the analysis needs.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
from typing import Final

import numpy as np
from randomgen import ChaCha

PathItem = int | str

#: Grid of every additive-noise release: the codec's 2^-32 resolution.
GRID: Final[float] = 2.0**-32
#: Key length in bytes (ChaCha20 takes a 256-bit key).
KEY_BYTES: Final[int] = 32
#: Environment variable from which the launchers read an injected key (hex).
KEY_ENV: Final[str] = "FEDPRIV_SECRET_KEY"


def _encode_path(path: tuple[PathItem, ...]) -> bytes:
    parts = []
    for item in path:
        if isinstance(item, bool) or not isinstance(item, (int, str, np.integer)):
            raise TypeError(f"key path items must be int or str, got {item!r}")
        if isinstance(item, str):
            tag, body = b"s", item.encode()
        else:
            tag, body = b"i", str(int(item)).encode()
        parts.append(tag + len(body).to_bytes(4, "little") + body)
    return b"".join(parts)


class SecretKey:
    """A 256-bit secret for private randomness; never logged, saved, pickled or sent.

    Parameters
    ----------
    material : bytes
        At least 16 bytes of secret key material (32 recommended). Use
        :meth:`generate` for a fresh key from the OS CSPRNG.
    public_reason : str, optional
        Set only by :meth:`from_public_seed`: the key is derivable from public
        information, and a privacy report built on it says ``certified: false``
        with this reason.
    """

    __slots__ = ("_material", "public_reason")

    def __init__(self, material: bytes, *, public_reason: str | None = None) -> None:
        if not isinstance(material, (bytes, bytearray)) or len(material) < 16:
            raise ValueError(
                "secret key material must be at least 16 bytes; use SecretKey.generate()"
            )
        self._material = bytes(material)
        self.public_reason = public_reason

    # -- construction ---------------------------------------------------
    @classmethod
    def generate(cls) -> SecretKey:
        """A fresh key from the operating system's entropy (``secrets.token_bytes``)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_hex(cls, text: str) -> SecretKey:
        """A key injected as hex text (e.g. ``$FEDPRIV_SECRET_KEY``)."""
        try:
            material = bytes.fromhex(text.strip())
        except ValueError:
            raise ValueError(f"{KEY_ENV} must be hex text of at least 16 bytes") from None
        return cls(material)

    @classmethod
    def from_public_seed(cls, seed: int) -> SecretKey:
        """Debug mode: a key derived from a *public* seed. Not a privacy guarantee.

        Anyone who knows ``seed`` can replay every noise draw and Poisson coin,
        so runs built on this key report ``certified: false``.
        """
        digest = hashlib.sha256(b"fedpriv-public-debug-key" + str(int(seed)).encode()).digest()
        return cls(digest, public_reason=f"private randomness derived from public seed {seed}")

    @classmethod
    def coerce(cls, key: SecretKey | bytes | None) -> SecretKey:
        """``key`` as a :class:`SecretKey`; ``None`` draws a fresh one from OS entropy."""
        if key is None:
            return cls.generate()
        if isinstance(key, SecretKey):
            return key
        if isinstance(key, (bytes, bytearray)):
            return cls(bytes(key))
        raise TypeError(
            f"secret_key must be a SecretKey, bytes or None (fresh OS entropy); got "
            f"{type(key).__name__} (an int seed is public: use seed= for public randomness)"
        )

    # -- use ------------------------------------------------------------
    @property
    def certified(self) -> bool:
        """False for a key derived from public information (debug mode)."""
        return self.public_reason is None

    def derive(self, *path: PathItem) -> SecretKey:
        """The subkey of ``path`` (HMAC-SHA256): knowing one subkey reveals no other."""
        digest = hmac.new(self._material, _encode_path(path), hashlib.sha256).digest()
        return SecretKey(digest, public_reason=self.public_reason)

    def generator(self, *path: PathItem) -> np.random.Generator:
        """A ChaCha20 ``Generator`` keyed by the subkey of ``path``."""
        return PrivateStreams(self, *path).at(0)

    def streams(self, *path: PathItem) -> PrivateStreams:
        """Independent per-index substreams (e.g. one per round) under ``path``."""
        return PrivateStreams(self, *path)

    def bytes_for_local_store(self) -> bytes:
        """The raw key, for a party's own in-memory state (a Flower node's ``context.state``).

        The one way out of this object: never put it in a message, a log or a file.
        """
        return self._material

    # -- never leaves the process --------------------------------------
    def __repr__(self) -> str:
        kind = "debug, public" if self.public_reason else "hidden"
        return f"SecretKey(<{kind}>)"

    def __str__(self) -> str:
        return repr(self)

    def __reduce__(self):
        # Pickling (an estimator, a config) stores a placeholder, never the key.
        return (_redacted, (self.public_reason,))

    def __copy__(self) -> SecretKey:
        return self  # immutable; scikit-learn's clone() deep-copies parameters

    def __deepcopy__(self, memo: dict) -> SecretKey:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretKey) and hmac.compare_digest(self._material, other._material)

    def __hash__(self) -> int:
        return hash(hashlib.sha256(b"fedpriv-key-id" + self._material).digest())


def key_from_environment() -> SecretKey:
    """The key injected through ``$FEDPRIV_SECRET_KEY`` (hex), else a fresh one.

    How a Flower ServerApp or ClientApp process, which takes no Python
    arguments, reproduces a run: the variable lives in the processes'
    environment only, never in a run config, a message or a file.
    """
    text = os.environ.get(KEY_ENV, "")
    return SecretKey.from_hex(text) if text else SecretKey.generate()


class _RedactedKey(SecretKey):
    """What a pickled :class:`SecretKey` becomes: it can no longer generate anything."""

    def __init__(self, public_reason: str | None = None) -> None:
        self._material = b""
        self.public_reason = public_reason

    def derive(self, *path: PathItem) -> SecretKey:
        raise RuntimeError("this secret key was redacted when its owner was pickled")

    def __repr__(self) -> str:
        return "SecretKey(<redacted>)"


def _redacted(public_reason: str | None) -> SecretKey:
    return _RedactedKey(public_reason)


class PrivateStreams:
    """Substreams ``0, 1, 2, …`` of one ChaCha20 key: ``at(i)`` starts at block ``i·2^64``.

    ChaCha20's 128-bit counter makes random access free: substream i is the
    keystream from counter i·2^64, 2^64 blocks (2^70 bytes) from the next.
    The returned generator is shared: valid until the next ``at`` call.
    """

    def __init__(self, key: SecretKey, *path: PathItem) -> None:
        sub = key.derive(*path)
        self._key = int.from_bytes(sub._material, "little")
        self._bitgen = ChaCha(key=self._key, counter=0, rounds=20)
        self._generator = np.random.Generator(self._bitgen)

    def at(self, index: int) -> np.random.Generator:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ValueError(f"index must be an integer in [0, 2^64); got {index!r}")
        self._bitgen.seed(key=self._key, counter=int(index) << 64)
        return self._generator


def is_private(rng: object) -> bool:
    """Whether ``rng`` is a ``Generator`` over a cryptographically secure bit generator."""
    return isinstance(rng, np.random.Generator) and isinstance(rng.bit_generator, ChaCha)


def check_private(name: str, rng: object) -> np.random.Generator:
    """``rng`` if private (:func:`is_private`); otherwise a clear ``TypeError``."""
    if not is_private(rng):
        got = type(getattr(rng, "bit_generator", rng)).__name__
        raise TypeError(
            f"{name} must be a private generator (SecretKey.generator(...), ChaCha20); got "
            f"{got}: noise and sampling coins must not be derivable from a seed"
        )
    return rng


def rounding_margin(size: int, norm: str) -> float:
    """How far grid rounding can move a vector of ``size`` coordinates ("l1" or "l2")."""
    if norm == "l2":
        return GRID * math.sqrt(max(size, 1))
    if norm == "l1":
        return GRID * max(size, 1)
    raise ValueError(f"norm must be 'l1' or 'l2'; got {norm!r}")


def _on_grid(x: np.ndarray, draws: np.ndarray, scale: float) -> np.ndarray:
    # Integers in float64 are exact below 2^53, i.e. |value| < 2^21 on this grid;
    # beyond it the int64 sum is rounded once more, still a function of the noisy sum.
    ticks = np.rint(x / GRID).astype(np.int64)
    noise = np.rint(draws * (scale / GRID)).astype(np.int64)
    return (ticks + noise) * GRID


def gaussian_on_grid(x, std: float, rng: np.random.Generator) -> np.ndarray:
    """``x + N(0, std²)`` per coordinate, released on the grid γℤ (module docstring)."""
    check_private("rng", rng)
    arr = np.asarray(x, dtype=np.float64)
    return _on_grid(arr, rng.standard_normal(arr.shape), std)


def laplace_on_grid(x, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + Laplace(0, scale)`` per coordinate, released on the grid γℤ."""
    check_private("rng", rng)
    arr = np.asarray(x, dtype=np.float64)
    return _on_grid(arr, rng.laplace(0.0, 1.0, size=arr.shape), scale)
