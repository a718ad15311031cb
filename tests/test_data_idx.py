"""IDX reader and checksum verification."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from core.data.download import md5_file, read_md5sums, verify_md5
from core.data.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx, write_idx
from core.errors import DataError


@pytest.mark.parametrize("file_name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_idx_round_trip_plain_and_gzipped(tmp_path, file_name):
    images = np.random.default_rng(0).integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    path = write_idx(tmp_path / file_name, images)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == file_name.endswith(".gz")
    back = read_idx(path, IMAGES_MAGIC)
    assert back.dtype == np.uint8 and back.shape == (7, 28, 28)
    np.testing.assert_array_equal(back, images)


def test_gzip_detected_by_magic_bytes_not_name(tmp_path):
    labels = np.arange(10, dtype=np.uint8)
    path = write_idx(tmp_path / "labels-without-gz-suffix", labels, compress=True)
    np.testing.assert_array_equal(read_idx(path, LABELS_MAGIC), labels)


def test_wrong_magic_number_names_file(tmp_path):
    path = write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5, dtype=np.uint8))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.*0x00000801.*0x00000803"):
        read_idx(path, IMAGES_MAGIC)


def test_non_idx_file_rejected(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"hello world, not idx")
    with pytest.raises(DataError, match="junk"):
        read_idx(path)


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_file_size_mismatch_names_file(tmp_path, compress):
    payload = struct.pack(">IIII", IMAGES_MAGIC, 3, 28, 28) + bytes(3 * 28 * 28 - 10)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.*2342.*\(3, 28, 28\).*2352"):
        read_idx(path, IMAGES_MAGIC)


def test_truncated_gzip_stream_is_data_error(tmp_path):
    path = write_idx(tmp_path / "x.gz", np.ones((4, 28, 28), dtype=np.uint8))
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match="x.gz"):
        read_idx(path)


def test_md5_verification_ok_and_mismatch(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"abc")
    assert md5_file(path) == "900150983cd24fb0d6963f7d28e17f72"
    verify_md5(path, "900150983CD24FB0D6963F7D28E17F72")  # case-insensitive
    with pytest.raises(DataError, match="checksum mismatch for .*file.bin"):
        verify_md5(path, "0" * 32)


def test_reference_files_match_md5sums(data_dir):
    sums = read_md5sums(data_dir / "MD5SUMS")
    image_files = [name for name in sums if name.startswith(("mnist/", "fashion-mnist/"))]
    assert len(image_files) == 8
    for relative in image_files:
        verify_md5(data_dir / relative, sums[relative])


def test_reference_file_with_wrong_md5_raises(data_dir):
    sums = read_md5sums(data_dir / "MD5SUMS")
    wrong = sums["mnist/t10k-labels-idx1-ubyte.gz"][::-1]
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz"):
        verify_md5(data_dir / "mnist/t10k-labels-idx1-ubyte.gz", wrong)
