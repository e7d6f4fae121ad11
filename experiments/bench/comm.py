"""Communication volume and analytic synchronisation time (benchmark paper §6.2, Tables 11/12).

Uploaded floats per client are what :class:`fedpriv.federation.runtime.InProcessRuntime`
counted during each evaluation fit (``Communication.floats_uploaded``), never a
formula. Synchronisation time is the paper's analytic model
R·(RTT + payload/bandwidth), R synchronous round trips, with 4-byte floats
(the paper's "256 B per round" for 64 boosting floats).
"""

from __future__ import annotations

from dataclasses import dataclass

BYTES_PER_FLOAT = 4


@dataclass(frozen=True)
class Link:
    """A network profile: round-trip time (s) and bandwidth (bit/s)."""

    name: str
    rtt_seconds: float
    bandwidth_bps: float

    def __post_init__(self) -> None:
        if not self.rtt_seconds >= 0.0:
            raise ValueError(f"rtt_seconds must lie in [0, inf); got {self.rtt_seconds!r}")
        if not self.bandwidth_bps > 0.0:
            raise ValueError(f"bandwidth_bps must lie in (0, inf); got {self.bandwidth_bps!r}")


#: Paper Table 12's three link profiles.
LINKS = (
    Link("LAN (1 ms, 1 Gbit/s)", 1e-3, 1e9),
    Link("WAN (50 ms, 100 Mbit/s)", 50e-3, 100e6),
    Link("constrained (150 ms, 10 Mbit/s)", 150e-3, 10e6),
)


def sync_seconds(rounds: int, payload_bytes: float, link: Link) -> float:
    """R·(RTT + 8·payload/bandwidth): R synchronous rounds of ``payload_bytes`` each."""
    if rounds < 0 or payload_bytes < 0:
        raise ValueError(f"rounds and payload must be ≥ 0; got {rounds!r}, {payload_bytes!r}")
    return rounds * (link.rtt_seconds + 8.0 * payload_bytes / link.bandwidth_bps)


def per_round_payload_bytes(floats_per_client: float, rounds: int) -> float:
    """Average bytes a client uploads per round, from the measured total."""
    return BYTES_PER_FLOAT * floats_per_client / max(rounds, 1)
