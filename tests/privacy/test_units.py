"""Unit-level privacy's primitives: at most m records per unit, units sampled whole,
units spanning clients refused, and the ledger's unit."""

import numpy as np
import pytest

from fedpriv.errors import DataError
from fedpriv.federation.protocol import ClientData, client_sample, make_clients, poisson_sample
from fedpriv.privacy.units import (
    bound_units,
    bounding_generator,
    check_units_within_clients,
    dense_units,
    scale_sensitivity,
    unit_sample,
)
from tests.keys import key_for, private_rng


def _units(sizes):
    """Row units of units of the given sizes, interleaved (not grouped by unit)."""
    codes = np.repeat(np.arange(len(sizes)), sizes)
    return codes[private_rng(99).permutation(codes.size)]


def test_every_unit_keeps_exactly_min_of_its_records_and_m():
    sizes = [1, 2, 3, 5, 9, 20]
    units = _units(sizes)
    for m in (1, 2, 4, 25):
        kept = bound_units(units, m, private_rng(m))
        assert np.all(np.diff(kept.rows) > 0)  # sorted, no row twice
        counts = np.bincount(units[kept.rows], minlength=len(sizes))
        np.testing.assert_array_equal(counts, np.minimum(sizes, m))
        # The kept rows' units, dense in order of first appearance (the same partition).
        np.testing.assert_array_equal(kept.units, dense_units(units[kept.rows]))
        assert kept.n_units == len(sizes)


def test_the_subset_is_uniform_within_a_unit_and_fixed_by_the_key():
    units = np.zeros(5, dtype=np.int64)  # one unit of 5 records, m = 2
    key = key_for(3)
    first = bound_units(units, 2, bounding_generator(key)).rows
    np.testing.assert_array_equal(first, bound_units(units, 2, bounding_generator(key)).rows)
    hits = np.zeros(5)
    n = 4000
    for t in range(n):
        hits[bound_units(units, 2, key_for(4).generator("t", t)).rows] += 1
    # Each record is kept w.p. 2/5: binomial sd √(n·0.4·0.6) ≈ 31; 5 sd of slack.
    np.testing.assert_allclose(hits, 0.4 * n, atol=160)


def test_bounding_refuses_a_seeded_stream_and_a_bad_bound():
    with pytest.raises(TypeError, match="private generator"):
        bound_units(np.zeros(3, dtype=np.int64), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"max_records must be an integer in \[1, inf\); got 0"):
        bound_units(np.zeros(3, dtype=np.int64), 0, private_rng())


def test_a_unit_is_sampled_whole_at_rate_q():
    units = _units([3] * 400)
    data = ClientData(client_id=0, X=np.zeros((units.size, 1)), y=np.zeros(units.size),
                      units=units)  # fmt: skip
    picked = client_sample(data, 0.25, private_rng(5))
    inside = np.zeros(units.size, dtype=bool)
    inside[picked] = True
    per_unit = np.bincount(units, weights=inside, minlength=400)
    assert set(per_unit.tolist()) <= {0.0, 3.0}  # all of a unit's rows, or none
    # 400 units at q = 1/4: sd √(400·¼·¾) ≈ 8.7; 5 sd.
    assert abs((per_unit > 0).sum() - 100) < 44
    # The unit coins are the record coins one would draw over the units.
    np.testing.assert_array_equal(
        np.unique(units[picked]), poisson_sample(400, 0.25, private_rng(5))
    )
    assert unit_sample(units, 400, 1.0, private_rng(5)).size == units.size
    record_level = ClientData(client_id=0, X=np.zeros((6, 1)), y=np.zeros(6))
    np.testing.assert_array_equal(
        client_sample(record_level, 0.5, private_rng(6)), poisson_sample(6, 0.5, private_rng(6))
    )


def test_client_data_holds_dense_unit_codes_only():
    with pytest.raises(ValueError, match="dense in 0 … U − 1"):
        ClientData(client_id=0, X=np.zeros((3, 1)), y=np.zeros(3), units=np.array([0, 2, 2]))
    with pytest.raises(ValueError, match="one code per row"):
        ClientData(client_id=0, X=np.zeros((3, 1)), y=np.zeros(3), units=np.array([0, 1]))
    data = ClientData(client_id=0, X=np.zeros((3, 1)), y=np.zeros(3), units=np.array([1, 0, 1]))
    assert data.n_units == 2 and not data.units.flags.writeable
    clients = make_clients(np.zeros((5, 1)), np.zeros(5), [np.array([0, 3]), np.array([1, 2, 4])],
                           np.array([7, 8, 8, 7, 9]))  # fmt: skip
    assert [c.units.tolist() for c in clients] == [[0, 0], [0, 0, 1]]


def test_units_spanning_clients_are_refused_naming_the_clients_only():
    units = np.array([0, 1, 2, 1, 3])
    check_units_within_clients(units, [np.array([0, 1, 3]), np.array([2, 4])], column="pid")
    with pytest.raises(DataError, match="held by clients 0 and 1") as err:
        check_units_within_clients(units, [np.array([0, 1]), np.array([2, 3, 4])], column="pid")
    assert (err.value.code, err.value.column) == ("unit_spans_clients", "pid")
    # Rows no client holds (another part) do not count.
    check_units_within_clients(units, [np.array([0, 1]), np.array([2, 4])], column="pid")


def test_a_units_sensitivity_is_m_records():
    assert scale_sensitivity(2.0, 0.5, 4) == (8.0, 2.0)
    with pytest.raises(ValueError, match="max_records"):
        scale_sensitivity(1.0, 1.0, 0)


def test_a_ledger_reports_its_unit_and_the_weaker_one_when_fits_mix():
    from dp_accounting import dp_event

    from fedpriv.privacy import PrivacyBudget, PrivacyLedger
    from fedpriv.privacy.card import build_card

    unit = "pid, at most 4 records"
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=10.0, delta=1e-5))
    assert ledger.report().unit == "record"  # undeclared: one record
    ledger.declare_unit(unit)
    ledger.spend(dp_event.GaussianDpEvent(5.0), label="a")
    report = ledger.report()
    assert report.unit == unit and report.to_dict()["unit"] == unit
    card = build_card(report, method="dp_gam")
    assert card.unit == unit and "unit: pid, at most 4 records" in card.to_markdown()
    assert "adding or removing one unit with all its records" in card.to_markdown()
    assert "Unit precondition:** every unit's records are held by one node" in card.to_markdown()
    ledger.declare_unit(unit)  # a second fit of the same unit: still that unit
    assert ledger.report().unit == unit
    child = ledger.scope(PrivacyBudget(epsilon=1.0, delta=1e-5))
    child.declare_unit("record")  # a record-level fit on the same rows: only "record" holds
    assert child.report().unit == "record" and ledger.report().unit == "record"
    spent = PrivacyLedger(budget=PrivacyBudget(epsilon=10.0, delta=1e-5))
    spent.spend(dp_event.GaussianDpEvent(5.0), label="undeclared")
    spent.declare_unit(unit)  # releases before the declaration protected a record only
    assert spent.report().unit == "record"
    plain = build_card(PrivacyLedger(budget=PrivacyBudget(epsilon=1.0, delta=1e-5)).report(),
                       method="dp_gam")  # fmt: skip
    assert "unit: record" in plain.to_markdown() and "precondition" not in plain.to_markdown()


def test_the_sparse_threshold_answers_a_units_counts_on_the_scale_q_over_u():
    from fedpriv.privacy.sparse_threshold import SparseThreshold

    counts = np.arange(0, 13)
    for two_sided in (False, True):
        record = SparseThreshold(sigma=1e-6, gap=1.5, gate=1.0, two_sided=two_sided)
        unit = SparseThreshold(sigma=1e-6, gap=1.5, gate=1.0, two_sided=two_sided, unit=3)
        # Noise ≈ 0: the thresholds alone, at u times the counts.
        np.testing.assert_array_equal(
            unit.check(3 * counts, rng=private_rng(1)), record.check(counts, rng=private_rng(1))
        )
    # The noise too is u times as large, drawn as many times (one draw per count).
    wide = SparseThreshold(sigma=2.0, gap=1.0, unit=4)
    hits = wide.check(np.full(20_000, 4 * 3), rng=private_rng(2)).mean()
    # q/u = 3 against τ = 2 with σ = 2: P(3 + 2Z > 2) = Φ(0.5) ≈ 0.691; sd ≈ 0.0033.
    assert abs(hits - 0.6915) < 0.02
