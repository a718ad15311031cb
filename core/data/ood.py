"""Out-of-distribution inputs: another dataset's test inputs or synthetic shifts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.data.dataset import Dataset
from core.data.images import locate_idx_files
from core.data.registry import DATASET_NAMES, check_name, load_dataset
from core.errors import DataError

OOD_SYNTHETIC: tuple[str, ...] = ("uniform-noise", "inverted", "rotated")

STANDARD_OOD_PAIRS: tuple[tuple[str, str], ...] = (
    ("mnist", "fashion-mnist"),
    ("fashion-mnist", "mnist"),
    ("mnist-small", "fashion-mnist-small"),
    ("fashion-mnist-small", "mnist-small"),
)
KMNIST_OOD_PAIRS: tuple[tuple[str, str], ...] = (("mnist", "kmnist"), ("kmnist", "mnist"))


def ood_pairs(data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """Standard (in-distribution, out-of-distribution) pairs; KMNIST ones when its files exist."""
    pairs = list(STANDARD_OOD_PAIRS)
    if locate_idx_files("kmnist", data_dir) is not None:
        pairs += list(KMNIST_OOD_PAIRS)
    return pairs


def _is_image(dataset: Dataset) -> bool:
    return len(dataset.input_shape) == 2


def _subsample(x: np.ndarray, n: int | None, rng: np.random.Generator, what: str) -> np.ndarray:
    if n is None:
        return x
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise DataError(f"n must be a positive integer, got {n!r}")
    if n > len(x):
        raise DataError(f"asked for n={n} OOD inputs but {what} has only {len(x)}")
    return x[np.sort(rng.choice(len(x), size=n, replace=False))]


def _synthetic(in_dataset: Dataset, name: str, rng: np.random.Generator, n: int | None) -> np.ndarray:
    x_test = in_dataset.x_test
    if name == "uniform-noise":
        count = len(x_test) if n is None else n
        if not isinstance(count, (int, np.integer)) or count < 1:
            raise DataError(f"n must be a positive integer, got {n!r}")
        if _is_image(in_dataset):  # one range for all pixels: border pixels are always 0
            low, high = float(in_dataset.x_train.min()), float(in_dataset.x_train.max())
        else:
            low, high = in_dataset.x_train.min(axis=0), in_dataset.x_train.max(axis=0)
        return rng.uniform(low, high, size=(count, in_dataset.in_features)).astype(np.float32)
    if not _is_image(in_dataset):
        raise DataError(
            f"OOD set {name!r} needs an image dataset; {in_dataset.name} has inputs "
            f"of shape {in_dataset.input_shape}. Use 'uniform-noise' or another "
            "dataset instead"
        )
    x = _subsample(x_test, n, rng, f"{in_dataset.name} test set")
    if name == "inverted":
        return (1.0 - x).astype(np.float32)
    images = x.reshape((len(x),) + tuple(in_dataset.input_shape))
    rotated = np.rot90(images, k=1, axes=(1, 2))  # 90 degrees counter-clockwise
    return np.ascontiguousarray(rotated.reshape(len(x), -1), dtype=np.float32)


def load_ood(
    in_dataset: Dataset, name: str, *, data_dir: str | Path | None = None, seed: int = 0, n: int | None = None
) -> np.ndarray:
    """float32 OOD inputs (n, d) for `in_dataset`: a dataset name or one of OOD_SYNTHETIC."""
    rng = np.random.default_rng(seed)
    if name in OOD_SYNTHETIC:
        return _synthetic(in_dataset, name, rng, n)
    if name not in DATASET_NAMES:
        try:
            check_name(name)
        except DataError as exc:
            raise DataError(f"{exc}; or a synthetic OOD set: {', '.join(OOD_SYNTHETIC)}") from None
    other = load_dataset(name, data_dir=data_dir, seed=seed)
    if other.in_features != in_dataset.in_features:
        raise DataError(
            f"OOD set {name} has inputs of shape {other.input_shape} ({other.in_features} "
            f"features) but {in_dataset.name} has {in_dataset.input_shape} "
            f"({in_dataset.in_features}); pick a dataset with the same input shape"
        )
    return _subsample(other.x_test, n, rng, f"{name} test set")
