"""MNIST-style sets: bundled subsets, full sets from a data dir, offline messages."""

from __future__ import annotations

import numpy as np
import pytest

from core.data import load_dataset
from core.data.download import RemoteFile, fetch
from core.data.idx import write_idx
from core.data.images import IDX_FILE_STEMS, read_bundled_arrays
from core.data.sampling import stratified_counts
from core.errors import DataError

SMALL_SETS = ["mnist-small", "fashion-mnist-small"]


@pytest.mark.parametrize("name", SMALL_SETS)
def test_bundled_subset_shapes_dtypes_and_range(name, isolated_data_env):
    ds = load_dataset(name)
    assert ds.source == "bundled" and ds.task == "classification"
    assert ds.x_train.shape == (10000, 784) and ds.x_test.shape == (2000, 784)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.input_shape == (28, 28) and ds.n_classes == 10 and len(ds.class_names) == 10
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0 and ds.x_train.max() > 0.99
    assert set(np.unique(ds.y_test)) == set(range(10))


@pytest.mark.parametrize("name", SMALL_SETS)
def test_bundled_subset_is_stored_as_uint8_and_stratified(name):
    arrays = read_bundled_arrays(name)
    assert arrays["x_train"].dtype == np.uint8 and arrays["x_train"].shape == (10000, 28, 28)
    counts = np.bincount(arrays["y_train"], minlength=10)
    # Fashion-MNIST is balanced (6000/class) so the subset is exactly 1000/class.
    if name == "fashion-mnist-small":
        assert counts.tolist() == [1000] * 10
    assert counts.min() >= 800 and counts.max() <= 1200
    assert len(np.unique(arrays["train_index"])) == 10000


def test_assets_folder_under_8_mb():
    from core.data.locations import ASSETS_DIR

    total = sum(p.stat().st_size for p in ASSETS_DIR.rglob("*") if p.is_file())
    assert total < 8 * 1024 * 1024, f"assets/ is {total / 1e6:.2f} MB"


@pytest.mark.fulldata
@pytest.mark.parametrize("small, full", [("mnist-small", "mnist"), ("fashion-mnist-small", "fashion-mnist")])
def test_bundled_subset_rows_come_from_full_set(small, full, data_dir):
    subset = load_dataset(small)
    arrays = read_bundled_arrays(small)
    whole = load_dataset(full, data_dir=data_dir)
    train_index, test_index = arrays["train_index"], arrays["test_index"]
    np.testing.assert_array_equal(subset.x_train, whole.x_train[train_index])
    np.testing.assert_array_equal(subset.y_train, whole.y_train[train_index])
    np.testing.assert_array_equal(subset.x_test, whole.x_test[test_index])
    # Stratified: class counts are the proportional allocation of the full set's.
    expected = stratified_counts(whole.y_train, 10000)
    assert np.bincount(subset.y_train, minlength=10).tolist() == [expected[c] for c in range(10)]


@pytest.mark.fulldata
@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_full_sets_from_data_dir(name, data_dir):
    ds = load_dataset(name, data_dir=data_dir)
    assert ds.source == "data-dir"
    assert ds.x_train.shape == (60000, 784) and ds.x_test.shape == (10000, 784)
    assert ds.y_train.shape == (60000,) and ds.y_test.shape == (10000,)
    assert np.bincount(ds.y_test, minlength=10).sum() == 10000 and ds.y_train.max() == 9
    assert 0.0 <= ds.x_test.min() and ds.x_test.max() == 1.0


def _write_fake_mnist(folder, n_train=30, n_test=10, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = [
        rng.integers(0, 256, (n_train, 28, 28)),
        rng.integers(0, 10, n_train),
        rng.integers(0, 256, (n_test, 28, 28)),
        rng.integers(0, 10, n_test),
    ]
    for stem, array in zip(IDX_FILE_STEMS, arrays):
        write_idx(folder / (stem + (".gz" if gz else "")), array.astype(np.uint8))
    return arrays


@pytest.mark.parametrize("layout", ["mnist", "MNIST/raw"])
def test_full_set_from_custom_data_dir(tmp_path, isolated_data_env, layout):
    arrays = _write_fake_mnist(tmp_path / "data" / layout, gz=(layout == "mnist"))
    ds = load_dataset("mnist", data_dir=tmp_path / "data")
    assert ds.source == "data-dir" and ds.n_train == 30 and ds.n_test == 10
    np.testing.assert_array_equal(ds.y_train, arrays[1])
    np.testing.assert_allclose(ds.x_test, arrays[2].reshape(10, -1) / 255.0, rtol=1e-6)


def test_fingerprint_changes_with_data(tmp_path, isolated_data_env):
    _write_fake_mnist(tmp_path / "a" / "mnist", seed=1)
    _write_fake_mnist(tmp_path / "b" / "mnist", seed=2)
    first = load_dataset("mnist", data_dir=tmp_path / "a")
    again = load_dataset("mnist", data_dir=tmp_path / "a")
    other = load_dataset("mnist", data_dir=tmp_path / "b")
    assert len(first.fingerprint) == 64
    assert first.fingerprint == again.fingerprint != other.fingerprint


def test_missing_directory_lists_files_and_env_var(tmp_path, isolated_data_env):
    with pytest.raises(DataError) as info:
        load_dataset("fashion-mnist", data_dir=tmp_path / "nowhere")
    message = str(info.value)
    for stem in IDX_FILE_STEMS:
        assert f"{stem}.gz" in message
    assert str(tmp_path / "nowhere" / "fashion-mnist") in message
    assert "BNN_DATA_DIR" in message


def test_kmnist_offline_names_files_and_env_var(isolated_data_env):
    with pytest.raises(DataError) as info:
        load_dataset("kmnist")
    message = str(info.value)
    assert "t10k-images-idx3-ubyte.gz" in message and "train-labels-idx1-ubyte.gz" in message
    assert "BNN_DATA_DIR" in message and "kmnist/" in message and "BNN_OFFLINE" in message


def test_corrupt_file_in_data_dir_is_reported(tmp_path, isolated_data_env):
    _write_fake_mnist(tmp_path / "mnist")
    truncated = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    write_idx(truncated, np.zeros(3, dtype=np.uint8))  # 3 labels for 10 images
    with pytest.raises(DataError, match="t10k"):
        load_dataset("mnist", data_dir=tmp_path)


def test_fetch_keeps_existing_file_and_checks_it(tmp_path, isolated_data_env):
    existing = tmp_path / "file.gz"
    existing.write_bytes(b"abc")
    remote = RemoteFile("file.gz", ("http://invalid.example/file.gz",), md5="900150983cd24fb0d6963f7d28e17f72")
    assert fetch(remote, tmp_path, what="test file") == existing  # no network needed
    mismatching = RemoteFile("file.gz", remote.urls, md5="1" * 32)
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch(mismatching, tmp_path, what="test file")
    assert existing.read_bytes() == b"abc"  # never overwritten


def test_fetch_offline_raises_without_network(tmp_path, isolated_data_env):
    remote = RemoteFile("absent.gz", ("http://invalid.example/absent.gz",))
    with pytest.raises(DataError, match="BNN_OFFLINE"):
        fetch(remote, tmp_path / "downloads", what="absent file")
    assert not (tmp_path / "downloads").exists()
