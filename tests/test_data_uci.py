"""UCI regression sets: splits, train-only standardisation, error messages."""

from __future__ import annotations

import numpy as np
import pytest

from core.data import load_dataset
from core.data.uci import UCI_REGRESSION
from core.errors import DataError


def _write_fake_uci(root, n=50, n_splits=2, constant_column=True):
    folder = root / "uci-regression" / "yacht" / "data"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    table = rng.normal(3.0, 2.0, size=(n, 7))
    if constant_column:
        table[:, 1] = 5.0
    table[:, 6] = table[:, 0] * 10 + 100
    np.savetxt(folder / "data.txt", table)
    (folder / "index_features.txt").write_text("\n".join(str(i) for i in range(6)) + "\n")
    (folder / "index_target.txt").write_text("6\n")
    for split in range(n_splits):
        order = np.random.default_rng(split).permutation(n)
        np.savetxt(folder / f"index_train_{split}.txt", order[: n - 10], fmt="%d")
        np.savetxt(folder / f"index_test_{split}.txt", order[n - 10 :], fmt="%d")
    return table


def test_standardisation_uses_train_split_only(tmp_path):
    table = _write_fake_uci(tmp_path)
    ds = load_dataset("uci-yacht", data_dir=tmp_path, split=1)
    train_rows = np.loadtxt(tmp_path / "uci-regression/yacht/data/index_train_1.txt", dtype=int)
    raw_y = table[train_rows, 6]
    assert ds.target_mean == pytest.approx(raw_y.mean()) and ds.target_std == pytest.approx(raw_y.std())
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0.0, atol=1e-5)
    # Constant feature: std guarded to 1, values 0, no NaN.
    assert ds.x_std[1] == 1.0 and np.all(ds.x_train[:, 1] == 0.0)
    assert np.isfinite(ds.x_test).all()
    np.testing.assert_allclose(ds.unstandardise(ds.y_train), raw_y, rtol=1e-5)
    assert ds.split == 1 and ds.source == "data-dir"


def test_split_out_of_range_names_valid_range(tmp_path):
    _write_fake_uci(tmp_path)
    with pytest.raises(DataError, match=r"0\.\.19.*split=20"):
        load_dataset("uci-yacht", data_dir=tmp_path, split=20)
    with pytest.raises(DataError, match=r"0\.\.4"):
        load_dataset("uci-protein", data_dir=tmp_path, split=5)
    with pytest.raises(DataError, match="no numbered splits"):
        load_dataset("two-moons", split=1)


def test_missing_uci_folder_message(tmp_path, monkeypatch):
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    with pytest.raises(DataError) as info:
        load_dataset("uci-concrete", data_dir=tmp_path)
    message = str(info.value)
    assert "uci-regression/concrete/data" in message and "data.txt" in message
    assert "BNN_DATA_DIR" in message


def test_bad_index_file_reported(tmp_path):
    _write_fake_uci(tmp_path)
    (tmp_path / "uci-regression/yacht/data/index_test_0.txt").write_text("3\n999\n")
    with pytest.raises(DataError, match="index_test_0.txt"):
        load_dataset("uci-yacht", data_dir=tmp_path)


@pytest.mark.fulldata
@pytest.mark.parametrize("name", list(UCI_REGRESSION))
def test_all_uci_sets_load_split_0(name, data_dir):
    spec = UCI_REGRESSION[name]
    ds = load_dataset(name, data_dir=data_dir)
    assert ds.task == "regression" and ds.split == 0
    assert ds.x_train.shape == (spec.n_train, spec.n_features)
    assert ds.x_test.shape == (spec.n_test, spec.n_features)
    assert ds.y_train.dtype == np.float32 and ds.y_train.shape == (spec.n_train,)
    assert abs(float(ds.y_train.mean())) < 1e-4 and float(ds.y_train.std()) == pytest.approx(1, abs=1e-4)
    non_constant = ds.x_train.std(axis=0) > 0
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(ds.x_train.std(axis=0)[non_constant], 1.0, atol=1e-4)
    assert np.isfinite(ds.x_test).all()
    y = np.linspace(-2, 2, 5)
    np.testing.assert_allclose((ds.unstandardise(y) - ds.target_mean) / ds.target_std, y, rtol=1e-12)
    np.testing.assert_allclose(ds.unstandardise_std(np.ones(2)), ds.target_std)


@pytest.mark.fulldata
def test_protein_has_5_splits_and_splits_differ(data_dir):
    last = load_dataset("uci-protein", data_dir=data_dir, split=4)
    first = load_dataset("uci-protein", data_dir=data_dir, split=0)
    assert first.fingerprint != last.fingerprint
    with pytest.raises(DataError, match=r"0\.\.4"):
        load_dataset("uci-protein", data_dir=data_dir, split=5)


@pytest.mark.fulldata
def test_unstandardise_recovers_original_targets(data_dir):
    ds = load_dataset("uci-boston", data_dir=data_dir, split=0)
    folder = data_dir / "uci-regression/bostonHousing/data"
    raw = np.loadtxt(folder / "data.txt")
    test_rows = np.loadtxt(folder / "index_test_0.txt", dtype=int)
    np.testing.assert_allclose(ds.unstandardise(ds.y_test), raw[test_rows, 13], rtol=1e-5)
    with pytest.raises(DataError, match="split=20"):
        load_dataset("uci-boston", data_dir=data_dir, split=20)
