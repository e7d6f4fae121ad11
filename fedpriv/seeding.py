"""Public randomness: one public run seed, many independent generators.

Every *public* random draw in fedpriv (random tree structure, thresholds,
split features, initial weights, data splits and simulated partitions) comes
from a ``np.random.Generator`` derived from the public run seed through
``np.random.SeedSequence``: the path (``"server"``, ``"partition", "iid"``)
becomes the sequence's ``spawn_key``, giving statistically independent
streams that are identical across processes and runtimes. The global numpy
RNG is never used.

*Private* draws (noise, sampling coins, mechanism draws) never come from
here: see :mod:`fedpriv.privacy.randomness` (secret keys, ChaCha20).
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
