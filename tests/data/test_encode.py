"""Encoding uses the schema only: each row's encoding is independent of the others."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.data import Schema, encode
from fedpriv.data.table import read_table

EXAMPLE = "experiments/schemas/example.toml"
CSV = "experiments/schemas/example_hospitals.csv"


def _frame(rows):
    return pd.DataFrame(
        rows, columns=["age", "length_of_stay_days", "admission", "smoker", "readmitted"]
    )


def test_min_max_with_schema_bounds_clips_and_counts():
    s = Schema.from_toml(EXAMPLE)
    enc = encode(
        _frame(
            [
                [18, 0.0, "emergency", "no", "yes"],
                [100, 365.0, "elective", "yes", "no"],
                [5, 1000.0, "transfer", "no", "no"],  # both clipped
                [59, np.nan, "walk-in", "yes", "yes"],  # missing LOS, unseen admission
            ]
        ),
        s,
        source="t",
    )
    age, los, los_missing = enc.X[:, 0], enc.X[:, 1], enc.X[:, 2]
    np.testing.assert_allclose(age, [0.0, 1.0, 0.0, (59 - 18) / 82])
    np.testing.assert_allclose(los[:3], [0.0, 1.0, 1.0])  # log1p, then scaled by log1p bounds
    np.testing.assert_array_equal(los_missing, [0, 0, 0, 1])
    assert enc.report.clipped_low == {"age": 1}
    assert enc.report.clipped_high == {"length_of_stay_days": 1}
    assert enc.report.unseen == {"admission": {"walk-in": 1}}
    assert enc.report.missing == {"length_of_stay_days": 1}
    # unseen admission goes to the <missing> level, in both views
    np.testing.assert_array_equal(enc.X[3, 3:7], [0, 0, 0, 1])
    assert enc.X_ordinal[3, 2] == 3
    np.testing.assert_array_equal(enc.y, [1, 0, 0, 1])


def test_log1p_scaling_value():
    s = Schema.from_toml(EXAMPLE)
    enc = encode(_frame([[50, 10.0, "elective", "no", "no"]]), s, source="t")
    assert enc.X[0, 1] == pytest.approx(np.log1p(10) / np.log1p(365))


def test_each_row_encodes_the_same_alone_or_in_the_table():
    s = Schema.from_toml(EXAMPLE)
    frame, lines = read_table(CSV, s)
    whole = encode(frame, s, source="t", lines=lines)
    for i in (0, 7, 100, 239):
        alone = encode(frame.iloc[[i]].reset_index(drop=True), s, source="t")
        np.testing.assert_array_equal(alone.X[0], whole.X[i])
        np.testing.assert_array_equal(alone.X_ordinal[0], whole.X_ordinal[i])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(-50, 200, allow_nan=False),
            st.sampled_from(["emergency", "elective", "transfer", "other"]),
            st.sampled_from(["yes", "no"]),
        ),
        min_size=2,
        max_size=20,
    )
)
def test_row_independence_property(rows):
    s = Schema.from_toml(EXAMPLE)
    frame = _frame([[a, 3.0, adm, smk, "no"] for a, adm, smk in rows])
    whole = encode(frame, s, source="t")
    first = encode(frame.iloc[[0]].reset_index(drop=True), s, source="t")
    np.testing.assert_array_equal(first.X[0], whole.X[0])
    # Changing every other row leaves row 0's encoding untouched.
    frame2 = frame.copy()
    frame2.loc[1:, "age"] = 1e6
    np.testing.assert_array_equal(encode(frame2, s, source="t").X[0], whole.X[0])


def test_box_standardisation_uses_only_column_types():
    from fedpriv.data import box_standardisation, schema

    s = schema("heart")
    shift, scale = box_standardisation(s)
    j = 0
    for col in s.columns:
        numeric = type(col).__name__ == "NumericColumn"
        assert (shift[j], scale[j]) == ((0.5, np.sqrt(12.0)) if numeric else (0.0, 1.0))
        assert np.all(shift[j + 1 : j + col.width] == 0) and np.all(
            scale[j + 1 : j + col.width] == 1
        )
        j += col.width
    assert j == shift.size == s.n_features
    # Uniform on the box [0, 1] maps to mean 0 and variance 1.
    u = np.linspace(0, 1, 100_001)
    assert np.mean(np.sqrt(12) * (u - 0.5)) == pytest.approx(0, abs=1e-12)
    assert np.var(np.sqrt(12) * (u - 0.5)) == pytest.approx(1, rel=1e-4)
