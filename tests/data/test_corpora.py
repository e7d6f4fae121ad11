"""Row counts, positive rates and widths of each bundled corpus after preprocessing.

Reference figures: the data card (`fedpriv/data/bundled/DATA_CARD.md`) and the
benchmark paper's Table 4 (130-US: 55,979 training rows, 9.0 % positive,
d = 101; BRFSS: 48,000 training rows, 15.7 %).
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

import fedpriv
from fedpriv.data import load_adult, load_brfss, load_diabetes130, load_heart
from fedpriv.data.corpora import BUNDLED, data_dir, verify_bundled


def _parts_cover(ds):
    rows = np.concatenate([ds.split.train, ds.split.val, ds.split.test])
    return rows.size == ds.y.size and np.unique(rows).size == ds.y.size


def test_adult():
    ds = load_adult()
    assert ds.split.test.size == 16_281
    assert ds.split.train.size + ds.split.val.size == 32_561
    assert ds.y[ds.split.test].mean() == pytest.approx(3_846 / 16_281)
    assert ds.y[np.concatenate([ds.split.train, ds.split.val])].sum() == 7_841
    assert ds.X.shape[1] == 107 and ds.X_ordinal.shape[1] == 14
    assert _parts_cover(ds)
    assert ds.report.dropped == {}  # "?" is a category, nothing dropped


def test_heart():
    ds = load_heart()
    assert ds.y.size == 740
    assert np.bincount(ds.clients).tolist() == [303, 261, 46, 130]
    assert [int(ds.y[ds.clients == c].sum()) for c in range(4)] == [139, 98, 45, 101]
    assert ds.report.dropped == {"rows with a missing value (FLamby)": 180}
    # 66/34 within each centre
    for c in range(4):
        test_share = np.isin(np.flatnonzero(ds.clients == c), ds.split.test).mean()
        assert test_share == pytest.approx(0.34, abs=0.01)
    assert [p.size for p in ds.natural_partition("test")] == [103, 89, 16, 44]
    assert _parts_cover(ds)


def test_diabetes130():
    ds = load_diabetes130(n_clients=5)
    assert ds.y.size == 69_973
    assert ds.split.train.size + ds.split.val.size == 55_979  # paper: 55,979
    assert ds.positive_rate == pytest.approx(0.0897, abs=5e-4)  # paper: 9.0 %
    assert ds.X.shape[1] == 117  # paper: 101 (its column list is not published)
    assert ds.report.dropped == {
        "repeat encounters of a patient": 30_248,
        "expired or hospice discharges": 1_545,
    }
    assert ds.client_names[:-1] == (
        "InternalMedicine",
        "Family/GeneralPractice",
        "Emergency/Trauma",
        "Cardiology",
    )
    assert np.bincount(ds.clients).tolist() == [10_641, 4_978, 4_393, 4_207, 45_754]
    assert len(load_diabetes130(n_clients=3).client_names) == 3
    assert _parts_cover(ds)


def test_brfss_subsample_and_full():
    ds = load_brfss()
    assert ds.y.size == 60_000
    assert ds.split.train.size + ds.split.val.size == 48_000
    assert ds.positive_rate == pytest.approx(39_977 / 253_680, abs=2e-4)  # 15.76 %
    assert ds.X.shape[1] == 21
    full = load_brfss(full=True)
    assert full.y.size == 253_680 and int(full.y.sum()) == 39_977
    assert _parts_cover(ds) and _parts_cover(full)


def test_encoded_values_lie_in_unit_box():
    for ds in (load_adult(), load_heart(), load_brfss()):
        assert ds.X.min() >= 0.0 and ds.X.max() <= 1.0


def test_split_is_frozen_by_its_seed_and_recorded():
    a, b = load_heart(split_seed=3), load_heart(split_seed=3)
    assert np.array_equal(a.split.train, b.split.train) and a.split.seed == 3
    c = load_heart(split_seed=4)
    assert not np.array_equal(a.split.train, c.split.train)


def test_second_load_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPRIV_CACHE_DIR", str(tmp_path))
    first = load_brfss()
    files = list((tmp_path / "data").glob("brfss-*.npz"))
    assert len(files) == 1
    second = load_brfss()
    np.testing.assert_array_equal(first.X, second.X)
    np.testing.assert_array_equal(first.split.test, second.split.test)
    assert second.report.to_dict() == first.report.to_dict()
    # Different options are a different key.
    load_brfss(n_rows=10_000)
    assert len(list((tmp_path / "data").glob("brfss-*.npz"))) == 2


def test_synthetic_dataset():
    from fedpriv.data import load_synthetic

    ds = load_synthetic()
    assert ds.X.shape == (4_800, 15) and ds.clients is None
    assert ds.positive_rate == pytest.approx(0.30, abs=0.02)
    assert ds.split.test.size == 960
    parts = ds.client_partition(5, alpha=0.5)
    assert sorted(np.concatenate(parts)) == list(range(ds.split.train.size))
    shifted = load_synthetic(covariate_shift=1.2)
    assert len(shifted.client_names) == 5
    assert len(shifted.natural_partition("train")) == 5


def test_the_corpora_ship_inside_the_package_with_their_checksums(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDPRIV_DATA_DIR", raising=False)
    assert data_dir() == BUNDLED and BUNDLED.is_relative_to(Path(fedpriv.__file__).parent)
    assert verify_bundled() == []  # every file as stored matches SHA256SUMS
    # A changed byte is caught (the check can fail).
    copy = tmp_path / "copy"
    shutil.copytree(BUNDLED / "heart_disease", copy / "heart_disease")
    shutil.copy(BUNDLED / "SHA256SUMS", copy / "SHA256SUMS")
    (copy / "heart_disease" / "processed.va.data").write_text("tampered")
    assert "heart_disease/processed.va.data" in verify_bundled(copy)


def test_brfss3_is_brfss_with_its_three_classes():
    """BRFSS 2015's three classes (codebook: 213,703 none, 4,631 pre, 35,346 diabetes),
    stratified by class into the paper's 60,000-row subsample."""
    ds = load_brfss(multiclass=True)
    assert ds.name == "brfss3" and ds.schema.target.classes == (0, 1, 2)
    assert ds.schema.columns == load_brfss().schema.columns
    assert ds.y.size == 60_000 and ds.X.shape[1] == 21
    share = np.bincount(ds.y, minlength=3) / ds.y.size
    assert share == pytest.approx(np.array([213_703, 4_631, 35_346]) / 253_680, abs=2e-4)
    # 1 and 2 are the binary corpus' positive labels: the same positive rate.
    assert share[1:].sum() == pytest.approx(39_977 / 253_680, abs=2e-4)
    assert _parts_cover(ds)
