"""Injected secret keys for tests: reproducible private randomness.

A test that needs the same noise twice (determinism, runtime equivalence,
a fixed statistical sample) injects a key from here; everything else gets a
fresh key from OS entropy, as in production. These keys are public (they are
in the source), which is fine for tests and never done in a run.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fedpriv.privacy.randomness import SecretKey


def _material(i: int) -> bytes:
    return hashlib.sha256(b"fedpriv-tests" + str(int(i)).encode()).digest()


def key_for(i: int = 0) -> SecretKey:
    """Test key number ``i``."""
    return SecretKey(_material(i))


def key_hex(i: int = 0) -> str:
    """Test key ``i`` as the hex text of ``$FEDPRIV_SECRET_KEY`` (Flower processes).

    ``SecretKey.from_hex(key_hex(i)) == key_for(i)``: a launched run and an
    in-process fit under the same ``i`` draw the same private randomness.
    """
    return _material(i).hex()


def private_rng(i: int = 0) -> np.random.Generator:
    """A private (ChaCha20) generator under test key ``i``."""
    return key_for(i).generator("test")
