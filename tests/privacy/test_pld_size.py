"""The PLD point budget: sizes known before building, refusals before allocating."""

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from fedpriv.privacy import pld as pld_mod
from fedpriv.privacy import pld_size
from fedpriv.privacy.accounting import account
from fedpriv.privacy.events import BoundedRangeDpEvent
from fedpriv.privacy.pld_size import MAX_PLD_POINTS, PLDSizeError


@pytest.mark.parametrize(("z", "q", "vdi"), [(1.0, 0.05, 1e-4), (0.4, 1.0, 1e-3), (3.0, 0.5, 1e-4)])
def test_gaussian_points_are_the_built_pld_size(z, q, vdi):
    built = pld_mod.gaussian_pld(z, sampling_probability=q, value_discretization_interval=vdi)
    assert pld_size.gaussian_points(z, q, vdi) == pytest.approx(pld_size.span(built), abs=1)


@pytest.mark.parametrize(("b", "q"), [(1.0, 1.0), (0.25, 0.1)])
def test_laplace_points_are_the_built_pld_size(b, q):
    built = pld_lib.from_laplace_mechanism(b, value_discretization_interval=1e-3, sampling_prob=q)
    assert pld_size.laplace_points(b, q, 1e-3) == pytest.approx(pld_size.span(built), abs=1)


def test_self_compose_points_are_the_composed_size():
    # (n − 1)·T + 1 = 5.5e6 passes the budget, so the Chernoff bound is computed: exact.
    single = pld_mod.gaussian_pld(1.0, sampling_probability=0.05)
    assert (pld_size.span(single) - 1) * 75 + 1 > MAX_PLD_POINTS
    composed = single.self_compose(75)
    assert pld_size.self_compose_points(single, 75) == pld_size.span(composed)


def test_a_tiny_noise_gaussian_is_refused_before_anything_is_allocated(monkeypatch):
    # z = 1e-3 needs 1e10 points at 1e-4 (old: MemoryError after allocating).
    def never(*a, **k):
        raise AssertionError("a PMF was built")

    monkeypatch.setattr(pld_lib, "_create_pld_pmf_from_monotone_privacy_loss", never)
    with pytest.raises(PLDSizeError, match="over the limit of 2097152") as err:
        pld_mod.gaussian_pld(1e-3, sampling_probability=0.05)
    assert err.value.points > 1e9


@pytest.mark.parametrize(
    "groups",
    [
        [(dp_event.GaussianDpEvent(1e-3), 1)],  # the random forest's leaves at ε = 1e6
        [(dp_event.LaplaceDpEvent(1e-6), 1)],  # a Laplace at ε = 1e6
        [(BoundedRangeDpEvent(1e6), 10)],  # ten selections at ε = 1e6: a 2e11-point dense span
    ],
    ids=["gaussian", "laplace", "bounded-range"],
)
def test_over_budget_plds_are_refused_and_the_ledger_falls_back_to_rdp(groups):
    with pytest.raises(PLDSizeError):
        pld_mod.composed_pld(groups, 1e-4)
    acc = account(groups, 1e-6)
    assert acc.pld_method == "pld:over-size-limit"
    assert acc.binding == "rdp"
    assert acc.epsilon == acc.epsilon_rdp < float("inf")


def test_the_budget_admits_a_paper_run_with_room():
    event = dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.0))
    composed = pld_mod.composed_pld([(event, 75)], 1e-4)
    assert 10 * pld_size.span(composed) < MAX_PLD_POINTS
