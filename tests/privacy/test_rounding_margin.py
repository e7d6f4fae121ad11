"""The noise's sensitivity covers the secure-aggregation codec's rounding.

One record changes one client's vector v by at most Δ; the codec sends
rint(v·2^32), which can move by more than Δ·2^32 ticks (two roundings in
opposite directions on every coordinate). Each coordinate's two roundings
differ by < 1 tick, so the encoded sum moves by < Δ₂ + 2^-32·√d in L2
(Δ₁ + 2^-32·d in L1): the margin the Gaussian and Laplace mechanisms add to
their sensitivity (``fedpriv.privacy.randomness.rounding_margin``). Other
clients' encodings do not move, and the decoded sum already lies on the
noise grid, so the mechanism's own rounding adds nothing more.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fedpriv.privacy.mechanisms as mechanisms
from fedpriv.federation.runtime import DEFAULT_SCALE, codec_for
from fedpriv.federation.secagg import FixedPointCodec, sum_plain
from fedpriv.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from fedpriv.privacy.randomness import GRID, rounding_margin
from tests.keys import private_rng

D = 64
K = 2**26  # whole ticks of each coordinate's change
EPS = 2.0**-8  # ... plus this fraction of a tick


def _worst_pair(scale: float = DEFAULT_SCALE, k: int = K, d: int = D, seed: int = 0):
    """Neighbouring vectors whose encodings differ by k + 1 ticks per coordinate.

    v sits just below a half tick (rounds down), v' = v + (k + EPS) ticks just
    above one (rounds up): the true change is k + EPS ticks, the encoded one
    k + 1, the most two roundings can add.
    """
    tick = 1.0 / scale
    base = np.random.default_rng(seed).integers(-(2**12), 2**12, size=d).astype(float)
    v = (base + 0.5 - EPS / 2) * tick
    v2 = v + (k + EPS) * tick
    return v, v2


def _codec():
    return codec_for(1.0, 1, 3, DEFAULT_SCALE)  # |coordinate| ≤ 1, three clients


def _captured_scale(monkeypatch, name: str) -> list[float]:
    seen: list[float] = []
    real = getattr(mechanisms, name)

    def spy(x, scale, rng):
        seen.append(scale)
        return real(x, scale, rng)

    monkeypatch.setattr(mechanisms, name, spy)
    return seen


def test_the_worst_codec_rounding_is_inside_the_gaussian_margin(monkeypatch):
    v, v2 = _worst_pair()
    delta2 = math.sqrt(D) * (K + EPS) * GRID  # the clipping bound the pair meets exactly
    assert np.linalg.norm(v2 - v) <= delta2 * (1 + 1e-15)
    codec = _codec()
    ticks = np.linalg.norm(
        codec.encode(v2).view(np.int64).astype(float) - codec.encode(v).view(np.int64)
    )
    assert ticks == math.sqrt(D) * (K + 1)
    assert ticks > delta2 * DEFAULT_SCALE + 7.9  # more than Δ·2^32 ticks: rounding matters
    # The aggregate moves by exactly that: the other clients' encodings are fixed.
    others = np.random.default_rng(1).uniform(-0.5, 0.5, size=(2, D))
    a = sum_plain(np.vstack([others, v]), codec)
    a2 = sum_plain(np.vstack([others, v2]), codec)
    moved = np.linalg.norm(a2 - a)
    assert moved == pytest.approx(ticks * GRID, rel=1e-15)
    assert moved > delta2
    # On the grid already: the mechanism's own rounding is the identity here.
    np.testing.assert_array_equal(np.rint(a / GRID) * GRID, a)
    # The mechanism's noise is calibrated to an effective sensitivity that covers it.
    mech = GaussianMechanism(l2_sensitivity=delta2, noise_multiplier=1.3)
    seen = _captured_scale(monkeypatch, "gaussian_on_grid")
    mech.apply(a, rng=private_rng(0))
    effective = seen[0] / mech.noise_multiplier
    assert effective == pytest.approx(delta2 + rounding_margin(D, "l2"), rel=1e-15)
    assert moved <= effective
    assert effective - moved < 0.01 * GRID * math.sqrt(D)  # and the margin is nearly tight


def test_the_worst_codec_rounding_is_inside_the_laplace_margin(monkeypatch):
    v, v2 = _worst_pair()
    delta1 = D * (K + EPS) * GRID
    assert np.abs(v2 - v).sum() <= delta1 * (1 + 1e-15)
    codec = _codec()
    others = np.random.default_rng(2).uniform(-0.5, 0.5, size=(2, D))
    moved = np.abs(
        sum_plain(np.vstack([others, v2]), codec) - sum_plain(np.vstack([others, v]), codec)
    ).sum()
    assert moved == pytest.approx(D * (K + 1) * GRID, rel=1e-15) and moved > delta1
    mech = LaplaceMechanism(l1_sensitivity=delta1, epsilon=0.7)
    seen = _captured_scale(monkeypatch, "laplace_on_grid")
    mech.apply(np.zeros(D), rng=private_rng(1))
    assert moved <= seen[0] * mech.epsilon  # effective Δ₁ = b·ε = Δ₁ + γ·d


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    d=st.integers(1, 40),
    size=st.floats(1e-9, 2.0),
    offset=st.floats(0.0, 1.0),
)
def test_any_neighbouring_encodings_stay_within_the_margin(seed, d, size, offset):
    rng = np.random.default_rng(seed)
    v = rng.uniform(-1.0, 1.0, size=d) + offset * GRID
    step = rng.normal(size=d)
    v2 = np.clip(v + size * step / np.linalg.norm(step), -2.0, 2.0)
    codec = FixedPointCodec(scale=DEFAULT_SCALE, max_abs=4.0, max_summands=2)
    enc = (codec.encode(v2).view(np.int64) - codec.encode(v).view(np.int64)).astype(float)
    true = np.linalg.norm(v2 - v)
    # Float error of v2 − v itself is ~1e-16·|v|; the margin is 2^-32·√d ≈ 2.3e-10·√d.
    assert np.linalg.norm(enc) * GRID <= true + rounding_margin(d, "l2") + 1e-15
    assert np.abs(enc).sum() * GRID <= np.abs(v2 - v).sum() + rounding_margin(d, "l1") + 1e-15


def test_a_codec_on_another_grid_would_break_the_margin_and_is_refused():
    # At scale 2^20 the same construction overshoots Δ₂ + 2^-32·√d by ~4096×.
    scale = 2.0**20
    k = 2**14  # the same 2^-6 per coordinate as above, on the coarser grid
    v, v2 = _worst_pair(scale=scale, k=k)
    codec = FixedPointCodec(scale=scale, max_abs=1.0, max_summands=3)
    moved = np.linalg.norm(codec.decode(codec.encode(v2) - codec.encode(v)))
    delta2 = math.sqrt(D) * (k + EPS) / scale
    assert moved > delta2 + rounding_margin(D, "l2")
    with pytest.raises(ValueError, match=r"scale must be 2\*\*32"):
        codec_for(1.0, 1, 3, scale)
    assert codec_for(1.0, 1, 3, DEFAULT_SCALE).scale == 1.0 / GRID
