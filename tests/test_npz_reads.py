"""Archives are read one at a time across threads (CPython 3.11's AST constructor, which numpy's
header parser uses, is not safe from two threads at once), and the bundled sizes are read once."""

from __future__ import annotations

import threading

import numpy as np

import core.data.images as images
from core.data import npz


def test_reads_take_turns_across_threads(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, y_train=np.arange(5), y_test=np.arange(3))
    done = threading.Event()
    results = {}

    def reader():
        results["arrays"] = npz.read_npz(path, ("y_test",))
        done.set()

    with npz.NPZ_LOCK:  # another thread is reading
        thread = threading.Thread(target=reader)
        thread.start()
        assert not done.wait(0.3)  # the second reader waits its turn
    assert done.wait(10)
    thread.join()
    assert list(results["arrays"]) == ["y_test"] and results["arrays"]["y_test"].tolist() == [0, 1, 2]


def test_many_threads_read_the_same_archive(tmp_path):
    path = tmp_path / "b.npz"
    np.savez(path, y_train=np.arange(50), y_test=np.arange(7))
    errors, sizes = [], []

    def reader():
        try:
            for _ in range(20):
                arrays = npz.read_npz(path)
                sizes.append((len(arrays["y_train"]), len(arrays["y_test"])))
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and set(sizes) == {(50, 7)} and len(sizes) == 160


def test_bundled_sizes_are_read_once_per_file_version(tmp_path, monkeypatch):
    path = tmp_path / "tiny.npz"
    np.savez(path, y_train=np.arange(4), y_test=np.arange(2))
    monkeypatch.setattr(images, "bundled_asset_path", lambda name: path)
    images._label_sizes.cache_clear()
    reads = []
    real = images.read_npz
    monkeypatch.setattr(images, "read_npz", lambda *a, **k: reads.append(a) or real(*a, **k))
    assert images.bundled_sizes("x") == (4, 2) and images.bundled_sizes("x") == (4, 2)
    assert len(reads) == 1
    np.savez(path, y_train=np.arange(9), y_test=np.arange(3))  # a new version of the file is read again
    assert images.bundled_sizes("x") == (9, 3) and len(reads) == 2
    images._label_sizes.cache_clear()
