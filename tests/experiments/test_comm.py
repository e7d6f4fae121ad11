"""Synchronisation time R·(RTT + payload/bandwidth) against the paper's Table 12."""

import pytest
from fedpriv.experiments.bench.comm import LINKS, Link, per_round_payload_bytes, sync_seconds

LAN, WAN, SLOW = LINKS


def test_sync_time_formula_by_hand():
    assert sync_seconds(10, 1000, Link("x", 0.1, 8000.0)) == pytest.approx(10 * (0.1 + 1.0))
    assert sync_seconds(0, 1e6, WAN) == 0.0


def test_paper_table12_values():
    # Boosting on 130-US: 25 rounds of 64 floats (256 B); the MLP: 800 steps of 1,649 floats.
    assert sync_seconds(25, 256, WAN) == pytest.approx(1.25, abs=0.01)
    assert sync_seconds(150, 256, SLOW) == pytest.approx(22.5, abs=0.05)
    assert sync_seconds(800, 4 * 1649, WAN) == pytest.approx(40.4, abs=0.05)
    assert sync_seconds(800, 4 * 1649, SLOW) == pytest.approx(124.2, abs=0.05)
    assert sync_seconds(800, 4 * 102, LAN) == pytest.approx(0.8, abs=0.01)


def test_payload_per_round_from_measured_totals():
    assert per_round_payload_bytes(3200, 50) == 256.0


def test_link_validation_names_the_value():
    with pytest.raises(ValueError, match=r"bandwidth_bps must lie in \(0, inf\); got 0"):
        Link("bad", 0.01, 0)
