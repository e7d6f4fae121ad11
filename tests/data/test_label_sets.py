"""Every way a dataset comes in checks its labels against the schema's public label set.

The label set is the schema's (encoded: 0 and 1), never the rows'. Before, a
corpus whose cached arrays held y = 5 or y = −1 (a stale or tampered cache
file, a hand-built dataset) was served to the learners as is.
"""

import dataclasses

import numpy as np
import pytest

from fedpriv.data import DataError, load_csv, load_synthetic
from fedpriv.data.dataset import _load, _save
from fedpriv.records import check_labels

SCHEMA = "experiments/schemas/example.toml"


@pytest.fixture(scope="module")
def synthetic():
    return load_synthetic(n=300)


@pytest.mark.parametrize("bad", [5.0, -1.0, 0.5, np.nan])
def test_a_dataset_refuses_labels_outside_its_schema_label_set(synthetic, bad):
    y = synthetic.y.astype(float)  # a writable copy
    y[17] = bad
    with pytest.raises(DataError, match=r"\(row 17\) is outside the label set \[0, 1\]") as err:
        dataclasses.replace(synthetic, y=y)
    assert (err.value.code, err.value.column) == ("label_outside_label_set", "y")
    assert synthetic.schema.target.classes == (0, 1)


def test_a_tampered_cache_file_is_refused(synthetic, tmp_path):
    path = tmp_path / "synthetic.npz"
    _save(path, synthetic)
    assert np.array_equal(_load(path, synthetic.schema).y, synthetic.y)
    with np.load(path) as z:
        arrays = dict(z)
    arrays["y"] = np.where(np.arange(arrays["y"].size) == 3, -1, arrays["y"])
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=r"label -1 \(row 3\)"):
        _load(path, synthetic.schema)


def test_a_csv_label_outside_the_declared_set_has_a_public_code(tmp_path):
    header = "record_id,hospital,age,length_of_stay_days,admission,smoker,readmitted\n"
    rows = [f"{i},{'ab'[i % 2]},50,3,elective,no,{('yes', 'no')[i % 2]}\n" for i in range(20)]
    rows[7] = rows[7].rsplit(",", 1)[0] + ",5\n"
    path = tmp_path / "d.csv"
    path.write_text(header + "".join(rows))
    with pytest.raises(DataError, match=r"line 9: label '5' is outside the declared") as err:
        load_csv(path, SCHEMA, use_cache=False)
    assert (err.value.code, err.value.column) == ("label_outside_label_set", "readmitted")


def test_check_labels_takes_a_public_multiclass_set():
    assert check_labels([0, 2, 1, 2], (0, 1, 2)).dtype == np.float64
    with pytest.raises(DataError, match=r"label 3 \(row 1\) is outside the label set \[0, 1, 2\]"):
        check_labels(np.array([0, 3]), (0, 1, 2), column="grade")
    with pytest.raises(DataError, match="numbers in the label set"):
        check_labels(np.array(["0", "yes"]), (0, 1))
