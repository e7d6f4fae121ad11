"""What the secure sampler costs: ChaCha20 + grid rounding against PCG64 + a float add.

Times, per call and in the same process, ``GaussianMechanism.apply`` with a
private ChaCha20 generator (noise drawn from a secret key and released on the
2^-32 grid, Mironov 2012) against the old ``x + rng.normal(0, σ, d)`` with a
seeded PCG64, and the ChaCha20 draw alone (``x + chacha.normal(0, σ, d)``) to
split the cost between the cipher and the rounding. Each measurement is the
fastest of ``repeats`` timed loops of at least ``min_seconds`` (the
interleaved minimum is robust to the other processes sharing the cores).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from fedpriv.privacy import GaussianMechanism
from fedpriv.privacy.randomness import SecretKey

SIZES = (64, 4_800, 100_000)


def _loop_time(fn: Callable[[], object], loops: int) -> float:
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def _loops_for(fn: Callable[[], object], min_seconds: float) -> int:
    loops = 1
    while _loop_time(fn, loops) * loops < min_seconds:
        loops *= 2
    return loops


def sampler_cost(
    sizes: Sequence[int] = SIZES, *, min_seconds: float = 0.1, repeats: int = 5
) -> list[dict[str, float]]:
    """Per-call seconds of the secure and the old sampler, and their ratio, per size."""
    mech = GaussianMechanism(l2_sensitivity=1.0, noise_multiplier=1.0)
    secure = SecretKey.generate().generator("sampler-cost")
    old = np.random.default_rng(0)  # PCG64, what the noise came from before
    sd = mech.std
    rows = []
    for d in sizes:
        x = np.linspace(-1.0, 1.0, d)
        candidates = {
            "secure": lambda x=x: mech.apply(x, rng=secure),
            "old": lambda x=x, d=d: x + old.normal(0.0, sd, size=d),
            "chacha_only": lambda x=x, d=d: x + secure.normal(0.0, sd, size=d),
        }
        loops = {k: _loops_for(f, min_seconds) for k, f in candidates.items()}
        best = {k: np.inf for k in candidates}
        for _ in range(repeats):
            for k, f in candidates.items():
                best[k] = min(best[k], _loop_time(f, loops[k]))
        rows.append(
            {
                "coordinates": int(d),
                "secure_us": best["secure"] * 1e6,
                "old_us": best["old"] * 1e6,
                "chacha_only_us": best["chacha_only"] * 1e6,
                "ratio_secure_over_old": best["secure"] / best["old"],
                "ratio_chacha_over_old": best["chacha_only"] / best["old"],
            }
        )
    return rows
