"""The model file: every learner reloads bit for bit, raw rows encode through the stored
schema, and the loader refuses pickles, object arrays, tampering and a schema mismatch."""

import json
import math
import pickle

import numpy as np
import pandas as pd
import pytest
from fedpriv.server.estimators import DPBoostingClassifier, DPLogisticClassifier, DPMLPClassifier
from fedpriv.server.forest_estimators import DPRandomForestClassifier, LumberjackClassifier
from fedpriv.server.method_estimator import MethodEstimator

from fedpriv.artefact import ArtefactError, load_model, write_artefact
from fedpriv.data import BinaryColumn, CategoricalColumn, NumericColumn, Schema, Target, encode
from fedpriv.privacy.card import NON_PRIVATE_CAVEAT
from tests.keys import key_for

#: The cheapest fit of each learner (~0.1-0.6 s each).
TINY = {
    DPBoostingClassifier: {"rounds": 2, "depth": 2},
    DPLogisticClassifier: {"rounds": 5, "sampling_rate": 0.5},
    DPMLPClassifier: {"rounds": 5, "sampling_rate": 0.5, "hidden": 2},
    LumberjackClassifier: {"trees": 2, "depth": 3},
    DPRandomForestClassifier: {"trees": 2, "depth": 2},
}

SCHEMA = Schema(
    name="toy",
    columns=(
        NumericColumn(name="age", lo=0.0, hi=100.0),
        CategoricalColumn(name="colour", categories=("red", "green", "blue")),
        BinaryColumn(name="smoker", positive=("yes",), negative=("no",)),
    ),
    target=Target(column="y", positive=("1",), labels=("0", "1")),
)


def _frame(n=40, seed=0):
    rng = np.random.default_rng(seed)
    age = rng.uniform(0, 100, n)
    return pd.DataFrame(
        {
            "age": age,
            "colour": rng.choice(["red", "green", "blue"], n),
            "smoker": rng.choice(["yes", "no"], n),
            "y": (age > 50).astype(int).astype(str),
        }
    )


def _arrays(n=40):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (n, 3))
    return X, (X[:, 0] > 0.5).astype(np.int64)


@pytest.mark.parametrize("cls", list(TINY), ids=lambda c: c.__name__)
def test_every_learner_reloads_and_predicts_bit_for_bit(cls, tmp_path):
    X, y = _arrays()
    est = cls(**TINY[cls], epsilon=2.0, num_clients=2, secret_key=key_for(3)).fit(X, y)
    path = est.save(tmp_path / "m.npz")
    back = MethodEstimator.load(path)
    assert type(back) is cls and back.get_params()["secret_key"] is None
    for name in ("predict_proba", "decision_function", "predict"):
        np.testing.assert_array_equal(getattr(back, name)(X), getattr(est, name)(X))
    assert back.privacy_report_.to_dict() == est.privacy_report_.to_dict()
    assert back.epsilon_spent_ == est.epsilon_spent_ and back.run_status_ == est.run_status_
    assert back.noise_multiplier_ == est.noise_multiplier_
    card = back.privacy_card_
    labels = [e.label for e in est.privacy_report_.entries]
    assert [e.label for e in card.events] == labels and len(labels) > 0
    assert card.certified and card.public_values["num_clients"] == 2
    assert card.public_values["label_set"] == [0, 1]


def test_the_card_states_the_declared_record_bound_never_the_rows_held(tmp_path):
    # 40 rows, 2 clients: the card's record bound is the declared one per client (as a
    # deployment's card says), and without a declared one no count of the rows is written.
    X, y = _arrays(40)
    cards = {}
    for bound in (30, None):
        est = DPBoostingClassifier(**TINY[DPBoostingClassifier], num_clients=2, max_records=bound)
        path = est.fit(X, y).save(tmp_path / f"m{bound}.npz")
        cards[bound] = MethodEstimator.load(path).privacy_card_.public_values
    assert cards[30]["record_bound"] == 30 and cards[None]["record_bound"] is None


def test_estimator_file_is_refused_by_another_learner_class(tmp_path):
    X, y = _arrays()
    est = DPRandomForestClassifier(**TINY[DPRandomForestClassifier], epsilon=math.inf)
    path = est.fit(X, y).save(tmp_path / "m.npz")
    with pytest.raises(TypeError, match="holds a DPRandomForestClassifier, not a DPBoosting"):
        DPBoostingClassifier.load(path)
    assert not DPRandomForestClassifier.load(path).privacy_card_.private


def _run_file(tmp_path, report=None):
    """A ServerApp-style file: a model fitted on the toy schema's encoded rows."""
    enc = encode(_frame(), SCHEMA, source="toy")
    est = DPBoostingClassifier(**TINY[DPBoostingClassifier], epsilon=math.inf).fit(enc.X, enc.y)
    settings = {"method": "boosting", "num-clients": 2, "seed": 5, "rounds": 2, "depth": 2}
    path = write_artefact(
        tmp_path,
        model=est.model_,
        method="boosting",
        schema=SCHEMA,
        settings_dict=settings,
        ledger_report=report,
        run_status="completed",
        record_bound=40,
    )
    return path, est, enc


def test_the_servers_file_encodes_raw_rows_with_its_schema(tmp_path):
    path, est, enc = _run_file(tmp_path, report={"epsilon": "inf", "complete": True})
    art = load_model(path, schema=SCHEMA)
    assert art.schema == SCHEMA and art.schema.digest() == SCHEMA.digest()
    new = _frame(seed=1).drop(columns="y")  # rows to score need no label
    want = est.model_.predict_proba(encode(_frame(seed=1), SCHEMA, source="t").X)
    np.testing.assert_array_equal(art.predict_proba_frame(new), want)
    np.testing.assert_array_equal(art.predict_proba(enc.X), est.model_.predict_proba(enc.X))
    card = art.card
    assert card.caveats == (NON_PRIVATE_CAVEAT,) and card.run_status == "completed"
    assert card.schema_digest == SCHEMA.digest() and card.public_values["record_bound"] == 40
    assert card.public_values["bounds"] == {"age": [0.0, 100.0]}
    assert card.public_values["query_structure"]["rounds"] == 2
    assert card.public_values["seed"] == 5 and card.public_values["num_clients"] == 2


def _members(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _rewrite(path, members, *, meta=None, fix_checksum=False):
    import hashlib

    members = dict(members)
    if meta is not None:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        members["__meta__"] = np.array(text)
        if fix_checksum:
            members["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as fh:
        np.savez(fh, **members)


def test_the_loader_refuses_a_pickle_and_an_object_array(tmp_path):
    bad = tmp_path / "pickled.npz"
    bad.write_bytes(pickle.dumps({"model": "anything"}))
    with pytest.raises(ArtefactError, match=r"not a fedpriv model file .* nothing was unpickled"):
        load_model(bad)
    path, _, _ = _run_file(tmp_path)
    members = _members(path)
    members["model.leaf_values"] = np.array([object()], dtype=object)
    with open(bad, "wb") as fh:
        np.savez(fh, **members)  # allow_pickle defaults to True when writing
    with pytest.raises(ArtefactError, match="refused: Object arrays cannot be loaded"):
        load_model(bad)


def test_the_loader_refuses_tampering(tmp_path):
    path, _, _ = _run_file(tmp_path)
    members = _members(path)
    meta = json.loads(str(members["__meta__"][()]))
    forged = {**meta, "card": {**meta["card"], "epsilon": 0.1}}
    _rewrite(path, members, meta=forged)  # checksum left as written
    with pytest.raises(ArtefactError, match="checksum does not match: the file was modified"):
        load_model(path)
    _rewrite(path, members, meta="{not json", fix_checksum=True)
    with pytest.raises(ArtefactError, match="metadata is not valid JSON"):
        load_model(path)
    _rewrite(path, members, meta={**meta, "model_class": "os:system"}, fix_checksum=True)
    with pytest.raises(ArtefactError, match="model_class 'os:system' is not allowed"):
        load_model(path)
    moved = dict(members, **{"model.base": members["model.base"] + 1.0})
    _rewrite(path, moved)
    with pytest.raises(ArtefactError, match=r"array 'model\.base' does not match its manifest"):
        load_model(path)


def test_the_loader_refuses_a_schema_digest_mismatch(tmp_path):
    path, _, _ = _run_file(tmp_path)
    members = _members(path)
    meta = json.loads(str(members["__meta__"][()]))
    other = Schema(
        name="toy",
        columns=(NumericColumn(name="age", lo=0.0, hi=120.0), *SCHEMA.columns[1:]),
        target=SCHEMA.target,
    )
    with pytest.raises(ArtefactError, match=f"trained on schema digest {SCHEMA.digest()}"):
        load_model(path, schema=other)
    bounds = meta["schema"]["columns"][0] | {"hi": 120.0}
    widened = {
        **meta,
        "schema": {**meta["schema"], "columns": [bounds, *meta["schema"]["columns"][1:]]},
    }
    _rewrite(path, members, meta=widened, fix_checksum=True)
    with pytest.raises(ArtefactError, match="schema digest mismatch: the stored schema hashes"):
        load_model(path)
