"""A released model's explanation: a GAM's terms in the schema's raw units with a noise
bound that holds, and the tree models' split usage from their released structure."""

import math

import numpy as np
import pandas as pd
import pytest
from fedpriv.server.estimators import DPGAMClassifier

from fedpriv.artefact import ArtefactError, load_model
from fedpriv.data import BinaryColumn, CategoricalColumn, NumericColumn, Schema, Target, encode
from fedpriv.data.schema import Missing, Transform
from fedpriv.models.explain import explain_gam, raw_values, term_importance
from fedpriv.models.explain_trees import PRUNED, RANDOM
from fedpriv.models.gam import L2_SENSITIVITY, GAMModel, schema_terms
from fedpriv.models.gam_noise import noise_variances
from fedpriv.models.heavy_hitters import ForestModel, PrunedTree
from fedpriv.models.trees import RandomTree, TreeEnsemble
from tests.keys import key_for

SCHEMA = Schema(
    name="toy",
    columns=(
        NumericColumn(name="income", lo=0.0, hi=99999.0, transform=Transform.LOG1P),
        NumericColumn(name="age", lo=17.0, hi=90.0, missing=Missing.INDICATOR),
        CategoricalColumn(name="colour", categories=("red", "green")),
        BinaryColumn(name="smoker", positive=("yes",), negative=("no",)),
    ),
    target=Target(column="y", positive=("1",), labels=("0", "1")),
)
SETTINGS = {"learning_rate": 0.5, "lam": 10.0, "reg_lambda": 1.0, "max_update": 2.0}


def _model(schema=SCHEMA, bins=4):
    terms = schema_terms(schema, bins)
    shapes = tuple(np.arange(terms.n_bins(k), dtype=float) * (k + 1) for k in range(terms.m))
    return GAMModel(base=-1.0, terms=terms, shapes=shapes)


def test_raw_values_invert_the_schemas_scaling_and_transform():
    raw = pd.DataFrame(
        {
            "income": [0.0, 12.0, 5000.0, 99999.0],
            "age": [17.0, 30.5, 64.0, 90.0],
            "colour": ["red"] * 4,
            "smoker": ["no"] * 4,
            "y": ["0"] * 4,
        }
    )
    X = encode(raw, SCHEMA, source="t").X
    np.testing.assert_allclose(raw_values(SCHEMA.columns[0], X[:, 0]), raw["income"], rtol=1e-12)
    np.testing.assert_allclose(raw_values(SCHEMA.columns[1], X[:, 1]), raw["age"], rtol=1e-12)


def test_explain_names_every_term_in_raw_units():
    model = _model()
    e = model.explain(SCHEMA)
    assert [t.name for t in e.terms] == ["income", "age", "colour", "smoker"]
    assert [t.kind for t in e.terms] == ["numeric", "numeric", "categorical", "binary"]
    age = e.term("age")
    # 4 equal-width bins of the encoded box are 4 equal bins of [17, 90] years, + missing.
    np.testing.assert_allclose(age.edges, [17.0, 35.25, 53.5, 71.75, 90.0])
    assert age.labels == ("[17, 35.25)", "[35.25, 53.5)", "[53.5, 71.75)", "[71.75, 90]", "missing")
    assert age.missing
    income = e.term("income")  # log1p: edges equally spaced on log(1 + x)
    np.testing.assert_allclose(np.log1p(income.edges), np.linspace(0, np.log1p(99999.0), 5))
    assert e.term("colour").labels == ("red", "green", "<missing>")
    assert e.term("smoker").labels == ("no", "yes")
    for k, t in enumerate(e.terms):
        np.testing.assert_array_equal(t.values, model.shapes[k])
    assert e.intercept == -1.0
    assert abs(e.term("age").spread - 4 * 2.0) < 1e-12  # values 0, 2, 4, 6, 8
    assert "[17, 35.25)" in e.to_text()
    with pytest.raises(ValueError, match="not the schema"):
        model.explain(Schema(name="x", columns=SCHEMA.columns[:2], target=SCHEMA.target))


def test_without_a_schema_terms_are_features_on_the_box():
    from fedpriv.models.gam import box_terms

    terms = box_terms(2, 4)
    model = GAMModel(base=0.0, terms=terms, shapes=(np.zeros(4), np.ones(4)))
    e = explain_gam(model)
    assert [t.name for t in e.terms] == ["x0", "x1"]
    np.testing.assert_allclose(e.terms[0].edges, [0, 0.25, 0.5, 0.75, 1.0])


def test_noise_bound_follows_the_cards_events():
    model = _model()
    z = 4.0
    gauss = {"type": "dp_accounting.dp_event.GaussianDpEvent", "noise_multiplier": z}
    events = [
        ("round 0: intercept (Σg, Σh)", gauss),
        ("round 1: term 1 bin (Σg, Σh)", gauss),
        ("round 2: term 1 bin (Σg, Σh)", gauss),
        ("round 3: term 2 bin (Σg, Σh)", gauss),
    ]
    var, visits = noise_variances(model, events, SETTINGS)
    assert visits == [0, 2, 1, 0]
    # λ = lam·σ binds (σ = zΔ ≫ reg_lambda / lam): each visit's sd is η/lam = 0.05.
    np.testing.assert_allclose(np.sqrt(var[1]), math.sqrt(2) * 0.05)
    np.testing.assert_allclose(np.sqrt(var[2]), 0.05)
    assert not var[0].any() and not var[3].any()
    # Tiny noise: reg_lambda binds, sd = η·σ/reg_lambda.
    small = {**gauss, "noise_multiplier": 0.01}
    var, _ = noise_variances(model, [("round 1: term 0 bin (Σg, Σh)", small)], SETTINGS)
    np.testing.assert_allclose(np.sqrt(var[0]), 0.5 * 0.01 * L2_SENSITIVITY)
    # A group round moves only the positive bin of each grouped binary term.
    two = Schema(
        name="b",
        columns=(
            BinaryColumn(name="a", positive=("1",), negative=("0",)),
            BinaryColumn(name="b", positive=("1",), negative=("0",)),
        ),
        target=SCHEMA.target,
    )
    var, visits = noise_variances(
        _model(two), [("round 1: binary group (Σwg, Σwh)", gauss)], {**SETTINGS, "binary_group": 4}
    )
    assert visits == [1, 1] and var[0][0] == 0 and var[0][1] > 0
    # An event that is not a plain Gaussian: no bound claimed.
    other = {"type": "dp_accounting.dp_event.LaplaceDpEvent", "parameter": 1.0}
    assert noise_variances(model, [("round 1: term 0 bin (Σg, Σh)", other)], SETTINGS) is None


def test_the_noise_bound_holds_over_fresh_noise(tmp_path):
    """The band bounds the spread of the released shapes across 30 fits that differ only
    in their noise (the same rows, seed and settings; 30 secret keys)."""
    rng = np.random.default_rng(0)
    X = rng.random((600, 4))
    y = (rng.random(600) < 0.2 + 0.6 * X[:, 0]).astype(int)
    shapes = []
    for i in range(30):
        est = DPGAMClassifier(
            rounds=9, bins=6, epsilon=1.0, secret_key=key_for(100 + i), max_records=120
        ).fit(X, y)
        shapes.append(np.concatenate(est.model_.shapes))
    est.save(tmp_path / "m.npz")
    e = load_model(tmp_path / "m.npz").explain()
    bound = np.concatenate([t.noise_std for t in e.terms])
    spread = np.std(shapes, axis=0, ddof=1)
    # Measured: the spread is 0.34-0.73 of the bound (H_b > 0 in every bin); a sample
    # sd of 30 draws is within ±15 % of the true sd with high probability.
    assert (spread <= 1.15 * bound).all(), (spread / bound).round(2)
    assert np.median(spread / bound) > 0.2  # the bound is not vacuous
    assert [t.visits for t in e.terms] == [2, 2, 2, 2]


def test_term_importance_is_the_mean_absolute_centred_contribution():
    model = _model()
    raw = pd.DataFrame(
        {
            "income": [1.0, 1.0],
            "age": [20.0, 80.0],
            "colour": ["red", "green"],
            "smoker": ["no", "no"],
            "y": ["0", "1"],
        }
    )
    X = encode(raw, SCHEMA, source="t").X
    imp = term_importance(model, X)
    # age: bins 0 and 3 → values 0 and 6, centred ±3; colour: levels 0, 1 → 0, 3, ±1.5;
    # income and smoker: one bin each → 0.
    np.testing.assert_allclose(imp, [0.0, 3.0, 1.5, 0.0])


def test_split_usage_counts_the_released_splits_per_column():
    # Encoded features: income 0, age 1 (+ indicator 2), colour 3-5, smoker 6.
    trees = (
        RandomTree(feature=np.array([0, 1, 2]), threshold=np.full(3, 0.5)),
        RandomTree(feature=np.array([3, 5, 6]), threshold=np.full(3, 0.5)),
    )
    ens = TreeEnsemble(base=0.0, trees=trees, leaf_values=(np.zeros(4), np.zeros(4)))
    usage = ens.explain(SCHEMA)
    assert usage.columns == ("income", "age", "colour", "smoker")
    np.testing.assert_array_equal(usage.counts, [1, 2, 2, 1])
    assert usage.origin == RANDOM and usage.trees == 2
    pruned = PrunedTree(
        feature=np.array([4, -1, 1, -1, -1]),
        threshold=np.array([0.5, 0, 0.5, 0, 0]),
        left=np.array([1, -1, 3, -1, -1]),
        right=np.array([2, -1, 4, -1, -1]),
        key=np.zeros(5, dtype=np.uint64),
    )
    forest = ForestModel(trees=(pruned,), leaf_scores=(np.full((5, 2), 0.5),))
    usage = forest.explain(SCHEMA)
    np.testing.assert_array_equal(usage.counts, [0, 1, 1, 0])  # leaves do not count
    assert usage.origin == PRUNED and "colour" in usage.to_text()


def test_a_model_without_an_explanation_is_refused(tmp_path):
    from fedpriv.server.estimators import DPLogisticClassifier

    rng = np.random.default_rng(1)
    X = rng.random((200, 3))
    y = (X[:, 0] > 0.5).astype(int)
    est = DPLogisticClassifier(rounds=5, sampling_rate=0.5, secret_key=key_for(1)).fit(X, y)
    est.save(tmp_path / "m.npz")
    with pytest.raises(ArtefactError, match="no term or split explanation"):
        load_model(tmp_path / "m.npz").explain()
