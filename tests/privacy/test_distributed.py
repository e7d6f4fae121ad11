"""Distributed noise: the bounds, the noise law of the sum, the survivors rule, the server's view.

A probe strategy asks K clients for a fixed vector each, under a Gaussian stage,
and keeps what the engine hands it; the clients add their shares inside secure
aggregation (:mod:`fedpriv.privacy.distributed`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedpriv.federation.engine import round_plan
from fedpriv.federation.node_stage import NodeStage
from fedpriv.federation.protocol import ClientData, Query, ReplySensitivity
from fedpriv.federation.runtime import InProcessRuntime, participation_streams
from fedpriv.privacy.distributed import (
    GRID,
    DistributedNoise,
    DistributedSum,
    draw_share,
    round_tv,
    share_spec,
    share_streams,
    tau_sum,
    tv_rounded,
    wrap_probability,
)
from fedpriv.privacy.ledger import PrivacyBudget, PrivacyLedger
from fedpriv.privacy.noise_stage import GaussianRounds
from fedpriv.privacy.participation import ParticipationAccounting
from tests.keys import key_for

D = 4000  # coordinates per round


def _values(client: int) -> np.ndarray:
    # Dyadic, distinct per client: exact in the ring, so the noise is released − Σ x.
    return (client + 1) * 0.25 + (np.arange(D) % 7) * 0.125


class Probe:
    """``rounds`` queries of D coordinates, each one Gaussian release of the stage."""

    def __init__(self, rounds: int) -> None:
        self.rounds, self.got, self.released = rounds, [], []

    def begin(self, *, n_features, ledger, rng, secret_rng) -> None:
        self._t = 0
        self.stage = GaussianRounds.plan(
            ledger,
            l2_sensitivity=1.0,
            sampling_rate=1.0,
            rounds=self.rounds,
            participation=1.0,
            accounting=ParticipationAccounting.VALID,
            rng=secret_rng,
            dims=D,
        )

    def noise_std(self, query: Query) -> float:
        return self.stage.std(query.reply_length)

    def node_stages(self) -> list[NodeStage]:
        """What the nodes are declared: one Gaussian stage of ``rounds`` probe queries."""
        if self.stage is None:
            return []
        return [NodeStage(name="probe", method="probe", mechanism="gaussian", rounds=self.rounds,
                          sampling_rate=1.0, reply_length=D, record_bound=4.0,
                          noise=self.stage.std(D))]  # fmt: skip

    def next_query(self) -> Query | None:
        if self._t == self.rounds:
            return None
        return Query(round=self._t, method="probe", sampling_rate=1.0, reply_length=D,
                     record_bound=4.0)  # fmt: skip

    def update(self, query: Query, aggregate) -> None:
        self.got.append(aggregate)
        self.released.append(
            None if aggregate is None else self.stage.release(aggregate, label=f"r{query.round}")
        )
        self._t += 1


class Fixed:
    """Each client answers its fixed vector, whatever the query."""

    def answer(self, query, data, sample, state, key=None):
        return _values(data.client_id)

    def reply_sensitivity(self, query):
        if query.method != "probe":
            raise ValueError(f"not a probe query: {query.method!r}")
        return ReplySensitivity(stage="probe", l1=math.sqrt(D), l2=1.0)


def _run(k=5, rounds=3, dropouts=1, dropout_rate=0.0, key=1, epsilon=2.0, noise=True):
    clients = [ClientData(client_id=i, X=np.zeros((4, 1)), y=np.zeros(4)) for i in range(k)]
    setting = DistributedNoise(dropouts=dropouts, max_parties=k) if noise else None
    runtime = InProcessRuntime(
        clients=clients, handler=Fixed(), seed=0, secret_key=key_for(key), noise=setting,
        dropout_rate=dropout_rate, vectorised=False,
    )  # fmt: skip
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=epsilon, delta=1e-5))
    probe = runtime.run(Probe(rounds), ledger=ledger)
    return probe, ledger, runtime


# -- the bounds -----------------------------------------------------------------
@pytest.mark.parametrize("sigma", [1.5, 3.0, 8.0])
def test_the_rounding_bound_covers_the_exact_total_variation(sigma):
    """TV(rint(N(0, σ²)), N_Z(0, σ²)) by direct summation lies under tv_rounded, within 3×."""
    k = np.arange(-int(40 * sigma), int(40 * sigma) + 1)
    rounded = stats.norm.cdf((k + 0.5) / sigma) - stats.norm.cdf((k - 0.5) / sigma)
    dg = np.exp(-(k**2) / (2 * sigma**2))
    dg /= dg.sum()
    exact = 0.5 * np.abs(rounded - dg).sum()
    assert exact <= tv_rounded(sigma) <= 3 * exact + 1e-15, (exact, tv_rounded(sigma))


def test_tau_is_kairouz_liu_steinke_and_vanishes_at_fixed_point_scales():
    # Prop. 14: 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1)); at σ = 1, n = 2: 10·e^{−π²}.
    assert tau_sum(2, 1.0) == pytest.approx(10 * math.exp(-(math.pi**2)))
    assert tau_sum(1, 1.0) == 0.0
    assert tau_sum(5, 2.0**20) == pytest.approx(4 * 10 * 1e-300)  # an upper bound, not 0
    # Shares of 2^24 ticks (σ_c = 2^-8): a round of 10^5 coordinates, 10 survivors, < 1e-10.
    assert round_tv(dims=10**5, survivors=10, share_std=2.0**24) < 1e-10


def test_the_wrap_bound_is_a_gaussian_tail_and_refuses_a_full_ring():
    assert wrap_probability(dims=10, survivors=4, share_std=1.0, headroom=1.0) == 1.0
    p = wrap_probability(dims=1, survivors=1, share_std=1.0, headroom=5.5)
    assert p == pytest.approx(2 * math.exp(-(5.0**2) / 2))  # |E| ≤ s/2 taken off the room


def test_shares_are_sized_for_the_minimum_survivors():
    setting = DistributedNoise(dropouts=1, max_parties=5)
    spec = share_spec(3.0, asked=5, setting=setting)
    assert spec.min_survivors == 4
    assert spec.share_std == pytest.approx(3.0 / GRID / 2.0)
    assert spec.total_std(4) == pytest.approx(3.0 / GRID)  # m survivors: exactly the target
    assert share_spec(3.0, asked=2, setting=setting) is None  # one survivor: nothing
    with pytest.raises(ValueError, match="tolerated-dropouts must lie in \\[0, 3\\]"):
        DistributedNoise(dropouts=4, max_parties=5)


def test_shares_come_from_the_clients_own_private_streams():
    def share(key, r):
        return draw_share(share_streams(key_for(key)), r, 1000, 2.0**30)

    a = share(1, 0)
    assert a.dtype == np.int64
    np.testing.assert_array_equal(a, share(1, 0))
    assert not np.array_equal(a, share(1, 1))  # per round
    assert not np.array_equal(a, share(2, 0))  # per client
    poisson = key_for(1).streams("poisson").at(0).standard_normal(1000)
    assert abs(np.corrcoef(a, poisson)[0, 1]) < 0.15  # not the Poisson coins' stream


# -- the noise law of the aggregated sum ------------------------------------------------------
def test_the_sum_carries_the_survivors_noise_and_the_ledger_records_it():
    """Released − Σ x is N(0, (s/m)·σ²): KS with power against the target σ (×0.89) and
    against one share (×0.5), and the ledger records z·√(s/m), not the planned z."""
    probe, ledger, _ = _run(k=5, rounds=3, dropouts=1)
    exact = sum(_values(i) for i in range(5))
    std = probe.stage.std(D) * math.sqrt(5 / 4)  # all 5 survived, shares sized for 4
    noise = np.concatenate([r - exact for r in probe.released])
    assert stats.kstest(noise / std, "norm").pvalue > 1e-3
    assert stats.kstest(noise / (std * math.sqrt(4 / 5)), "norm").pvalue < 1e-3  # the target
    assert stats.kstest(noise / (std / math.sqrt(5)), "norm").pvalue < 1e-3  # a single share
    for got in probe.got:
        assert isinstance(got, DistributedSum) and (got.survivors, got.min_survivors) == (5, 4)
    z = probe.stage.noise_multiplier
    recorded = [e.event for e in ledger.entries]
    assert [ev.noise_multiplier for ev in recorded] == pytest.approx([z * math.sqrt(5 / 4)] * 3)
    report = ledger.report().to_dict()
    assert report["noise"] == "distributed" and report["epsilon"] < 2.0
    assert 0 < report["distributed_tv_slack"] < 1e-15 and report["delta_of_slack"] < 1e-12


def test_survivors_below_the_bound_release_nothing_and_unmask_nothing():
    """K = 5, f = 1: a round that loses two uploads is aborted before its unmask; one
    that loses one releases with exactly the target noise."""
    rounds, rate = 24, 0.25
    probe, ledger, runtime = _run(k=5, rounds=rounds, dropouts=1, dropout_rate=rate, key=4)
    fates = participation_streams(key_for(4))
    lost = [len(round_plan(fates, r, 5, 1.0, rate)[1]) for r in range(rounds)]
    assert {0, 1} <= set(lost) and max(lost) >= 2  # every case occurs under this key
    for n_lost, got in zip(lost, probe.got, strict=True):
        if n_lost >= 2:
            assert got is None
        else:
            assert got.survivors == 5 - n_lost >= got.min_survivors == 4
    assert len(ledger.entries) == sum(n <= 1 for n in lost)
    comm = runtime.communication
    assert comm.rounds_aborted == sum(n >= 2 for n in lost)
    assert comm.recoveries == sum(n == 1 for n in lost)  # unmask exchanges with a dropout


def test_no_message_gives_the_server_a_clients_exact_contribution():
    """Even knowing every other client's exact vector, the server's estimate of client 0's
    from the unmasked sum is off by the full noise (std √(s/m)·σ); under central noise
    the same subtraction recovers it exactly (so this test can fail)."""
    others = sum(_values(i) for i in range(1, 4))
    probe, _, _ = _run(k=4, rounds=1, dropouts=0)
    guess = np.asarray(probe.got[0]) - others
    err = guess - _values(0)
    assert stats.kstest(err / probe.stage.std(D), "norm").pvalue > 1e-3
    central, _, _ = _run(k=4, rounds=1, dropouts=0, noise=False)
    np.testing.assert_array_equal(np.asarray(central.got[0]) - others, _values(0))


def test_an_exact_sum_never_passes_a_distributed_stage():
    probe, _, _ = _run(k=3, rounds=1, dropouts=0)
    with pytest.raises(TypeError, match="expects the survivors' noisy sum"):
        probe.stage.release(np.zeros(D), label="exact")


def test_distributed_noise_needs_secure_aggregation_and_a_declaring_strategy():
    clients = [ClientData(client_id=i, X=np.zeros((4, 1)), y=np.zeros(4)) for i in range(3)]
    setting = DistributedNoise(dropouts=0, max_parties=3)
    with pytest.raises(ValueError, match="set secure-aggregation = true"):
        InProcessRuntime(
            clients=clients, handler=Fixed(), seed=0, noise=setting, secure_aggregation=False
        ).run(Probe(1), ledger=None)

    class Silent(Probe):
        noise_std = None

    runtime = InProcessRuntime(clients=clients, handler=Fixed(), seed=0, noise=setting)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    with pytest.raises(ValueError, match="has no distributed form"):
        runtime.run(Silent(1), ledger=ledger)
    assert not ledger.entries


def test_the_slack_is_charged_to_delta_and_refused_past_half_of_it():
    """(1 + e^ε)·H comes off the accountants' δ; more than δ/2 of slack is refused."""
    from dp_accounting import dp_event

    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5))
    before = ledger.report().to_dict()
    ledger.use_distributed_noise(DistributedNoise(dropouts=0, max_parties=2))
    ledger.reserve_slack(1e-9)
    assert ledger.accounting_delta == pytest.approx(1e-5 - (1 + math.e) * 1e-9)
    ledger.spend(dp_event.GaussianDpEvent(5.0), label="one")
    report = ledger.report().to_dict()
    assert report["delta_of_slack"] == pytest.approx((1 + math.e) * 1e-9)
    assert report["delta"] == pytest.approx(ledger.accounting_delta)
    assert before["noise"] == "central" and report["noise"] == "distributed"
    with pytest.raises(Exception, match="over half of"):
        ledger.reserve_slack(2e-6)
    with pytest.raises(RuntimeError, match="before any reservation"):
        ledger.use_distributed_noise(DistributedNoise(dropouts=0, max_parties=2))


def test_the_forests_gaussian_counts_take_distributed_noise_and_em_leaves_refuse_it():
    from fedpriv.server.forest_estimators import DPRandomForestClassifier

    from fedpriv.data import load_heart

    data = load_heart()
    common = {"trees": 3, "depth": 3, "epsilon": 1.0, "seed": 2, "secret_key": key_for(6),
              "max_records": 160}  # heart's public per-hospital bound: no count  # fmt: skip
    est = DPRandomForestClassifier(**common, noise="distributed", tolerated_dropouts=1).fit(data)
    report = est.privacy_report_.to_dict()
    assert report["noise"] == "distributed" and report["n_releases"] == 1
    assert report["epsilon"] < 1.0  # 4 survivors, shares sized for 3: more noise than planned
    with pytest.raises(ValueError, match="needs leaf-mechanism = 'gaussian'"):
        DPRandomForestClassifier(**common, leaf_mechanism="exponential", noise="distributed").fit(
            data
        )


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(2, 40),
    f=st.integers(0, 38),
    asked=st.integers(0, 40),
    std=st.floats(1e-3, 1e3),
    extra=st.integers(0, 40),
)
def test_any_survivors_at_or_above_the_bound_carry_at_least_the_target(k, f, asked, std, extra):
    """For every K, f, n asked and σ: either the round is refused (fewer than two left
    after f dropouts) or m = n − f survivors carry exactly σ and more carry more."""
    if f > k - 2 or asked > k:
        return
    spec = share_spec(std, asked=asked, setting=DistributedNoise(dropouts=f, max_parties=k))
    if asked - f < 2:
        assert spec is None
        return
    assert spec.min_survivors == asked - f
    assert spec.total_std(spec.min_survivors) == pytest.approx(std / GRID, rel=1e-12)
    s = min(asked, spec.min_survivors + extra)
    assert spec.total_std(s) >= spec.total_std(spec.min_survivors)
    # The slack only shrinks as the shares grow.
    assert round_tv(dims=10, survivors=s, share_std=2 * spec.share_std) <= round_tv(
        dims=10, survivors=s, share_std=spec.share_std
    )
