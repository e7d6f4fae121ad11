"""One run seed, many independent generators.

Every random draw in fedpriv comes from a ``np.random.Generator`` derived from
the run seed through ``np.random.SeedSequence``: the path (``"client", 3,
"round", 17``) becomes the sequence's ``spawn_key``, giving statistically
independent streams that are identical across processes and runtimes. The
global numpy RNG is never used.
"""

from __future__ import annotations

import hashlib

import numpy as np

PathItem = int | str


def _key(item: PathItem) -> int:
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise TypeError(f"seed path items must be int or str, got {item!r}")
    if isinstance(item, int):
        if item < 0:
            raise ValueError(f"seed path integers must be >= 0, got {item}")
        return item
    # Python's hash() is salted per process; a digest is stable everywhere.
    return int.from_bytes(hashlib.sha256(item.encode()).digest()[:8], "little")


def seed_sequence(seed: int, *path: PathItem) -> np.random.SeedSequence:
    """The SeedSequence of ``path`` under run ``seed`` (seed must be an int >= 0)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer in [0, inf); got {seed!r}")
    return np.random.SeedSequence(entropy=seed, spawn_key=tuple(_key(p) for p in path))


def derive_generator(seed: int, *path: PathItem) -> np.random.Generator:
    """A ``Generator`` for ``path`` under run ``seed``; same inputs, same stream."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, *path)))


#: numpy's PCG64 jump, (φ − 1)·2^128 (``numpy/random/_pcg64.pyx``, ``jump_inplace``).
_JUMP = 0x9E3779B97F4A7C15F39CC0605CEDC835
_MASK = (1 << 128) - 1


class StreamFamily:
    """Random-access substreams ``0, 1, 2, …`` of one derived stream, cheaply.

    ``StreamFamily(seed, *path).at(i)`` is the PCG64 stream of
    ``seed_sequence(seed, *path)`` advanced by ``i · J`` steps, with
    ``J = (φ − 1)·2^128`` rounded to odd, numpy's own ``PCG64.jumped`` step:
    ``at(i)`` is ``PCG64(...).jumped(i)``. Building a fresh generator costs
    tens of microseconds; this repositions one in ~3 µs, which matters when
    every client draws a new sample every round.

    Not ``i · 2^64``: an LCG modulo 2^128 leaves the low 64 bits of its state
    unchanged when advanced by a multiple of 2^64, so every substream's k-th
    state would share them, and PCG64's output (the XOR of the two halves,
    rotated) is then correlated across substreams: a record's Poisson
    inclusion over 3,000 rounds drifted ~6σ from q
    (``tests/federation/test_partition_invariance.py``,
    ``tests/test_seeding.py``). Golden-ratio multiples keep substreams
    2^128/i apart, far more than any run draws.

    The returned generator is shared: it is valid until the next ``at`` call
    on the same family.
    """

    def __init__(self, seed: int, *path: PathItem) -> None:
        bitgen = np.random.PCG64(seed_sequence(seed, *path))
        self._state = bitgen.state
        self._generator = np.random.Generator(bitgen)

    def at(self, index: int) -> np.random.Generator:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise ValueError(f"index must be an integer in [0, 2^64); got {index!r}")
        bitgen = self._generator.bit_generator
        bitgen.state = self._state
        bitgen.advance((int(index) * _JUMP) & _MASK)
        return self._generator
