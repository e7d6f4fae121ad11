"""The experiments' private randomness: one key per process, one subkey per unit of work.

Experiments never derive private randomness (noise, Poisson coins,
participation, tree assignment) from a public seed. Each process reads
``$FEDPRIV_SECRET_KEY`` (hex) once, through
:func:`fedpriv.privacy.randomness.key_from_environment`, or else draws a fresh
key from OS entropy; every unit of work (a benchmark or ablation cell) takes
the subkey of its public description, e.g. the cell's content key. Set the
variable to replay a study bit for bit, in every pool worker alike. Caches are
keyed by a cell's content only, never by the secret: a cached result is one
random draw of the cell, whatever key produced it.
"""

from __future__ import annotations

import functools

from fedpriv.privacy.randomness import PathItem, SecretKey, key_from_environment


@functools.cache
def process_key() -> SecretKey:
    """This process's key: ``$FEDPRIV_SECRET_KEY`` if set, else fresh OS entropy (read once)."""
    return key_from_environment()


def secret_key_for(*path: PathItem) -> SecretKey:
    """The subkey of ``path`` (e.g. ``("cell", cell.key)``) under :func:`process_key`."""
    return process_key().derive("experiments", *path)
