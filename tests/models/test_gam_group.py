"""DP-EBM's group round of binary columns: which terms, the record weights, the sums and
their per-record sensitivity (with a twin without the weights that breaks the bound)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpriv.data.schema import (
    BinaryColumn,
    CategoricalColumn,
    NumericColumn,
    Schema,
    Target,
)
from fedpriv.models.gam import L2_SENSITIVITY, bin_sums, schema_terms
from fedpriv.models.gam_group import (
    binary_terms,
    group_sensitivity,
    group_sums,
    group_weights,
)
from fedpriv.models.trees import sigmoid

SCHEMA = Schema(
    name="flags",
    columns=(
        BinaryColumn(name="insulin", positive=("yes",), negative=("no",)),
        NumericColumn(name="age", lo=0, hi=100),
        BinaryColumn(name="metformin", positive=("yes",), negative=("no",)),
        CategoricalColumn(name="admission", categories=("a", "b", "c")),
        BinaryColumn(name="change", positive=("ch",), negative=("no",)),
    ),
    target=Target(column="y", positive=("1",), labels=("0", "1")),
)


def test_binary_terms_are_the_binary_columns_only():
    terms = schema_terms(SCHEMA, 8)
    assert binary_terms(terms).tolist() == [0, 2, 4]


def test_group_sensitivity_and_weights():
    assert group_sensitivity(1) == pytest.approx(L2_SENSITIVITY)
    assert group_sensitivity(4) == pytest.approx(2 * math.sqrt(1 + 1 / 16))
    pos = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=bool)
    # Records positive in 4, 3, 2 and 0 terms; s = 2 caps the first two.
    np.testing.assert_allclose(group_weights(pos, 2), [math.sqrt(2 / 4), math.sqrt(2 / 3), 1, 1])
    with pytest.raises(ValueError, match="sparsity"):
        group_weights(pos, 0)


def test_group_sums_equal_the_positive_bins_when_no_record_is_capped():
    rng = np.random.default_rng(0)
    n, m = 300, 3
    margin, y = rng.normal(size=n), (rng.random(n) < 0.3).astype(float)
    pos = rng.random((m, n)) < 0.3
    out = group_sums(margin, y, pos, sparsity=m)  # no record is in more than m terms
    for k in range(m):
        full = bin_sums(margin, y, pos[k].astype(np.int64), 2)
        assert out[k] == pytest.approx(full[1]) and out[m + k] == pytest.approx(full[3])


def _sums(margin, y, pos, s, weighted):
    if weighted:
        return group_sums(margin, y, pos, s)
    p = sigmoid(margin)
    P = pos.astype(float)
    return np.concatenate([P @ (p - y), P @ (p * (1 - p))])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.integers(2, 12),
    s=st.integers(1, 6),
    margin=st.floats(-30, 30),
    label=st.sampled_from([0.0, 1.0]),
)
def test_one_record_moves_the_reply_by_at_most_the_group_sensitivity(seed, m, s, margin, label):
    """Neighbouring data sets (D and D plus one record positive anywhere), any margins."""
    rng = np.random.default_rng(seed)
    n = 20
    margins = rng.normal(scale=5, size=n)
    y = (rng.random(n) < 0.5).astype(float)
    pos = rng.random((m, n)) < 0.5
    extra = rng.random((m, 1)) < 0.8
    d = group_sums(margins, y, pos, s)
    d2 = group_sums(np.append(margins, margin), np.append(y, label), np.hstack([pos, extra]), s)
    assert np.linalg.norm(d2 - d) <= group_sensitivity(s) * (1 + 1e-12)


def test_without_the_weights_a_record_in_many_terms_breaks_the_bound():
    """The twin: full weight for a record positive in all m > s terms exceeds √s · Δ."""
    m, s = 9, 2
    pos = np.ones((m, 1), dtype=bool)
    margin, y = np.array([-6.0]), np.array([1.0])  # g ≈ −1
    honest = np.linalg.norm(_sums(margin, y, pos, s, weighted=True))
    broken = np.linalg.norm(_sums(margin, y, pos, s, weighted=False))
    assert honest <= group_sensitivity(s) < broken
    assert broken == pytest.approx(math.sqrt(m) * 0.9975, rel=1e-3)  # |g| = 1 − σ(−6)
