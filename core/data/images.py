"""MNIST-style image sets: full IDX files and the bundled subsets in assets/."""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.data.dataset import Dataset, compute_fingerprint, make_dataset
from core.data.download import RemoteFile, fetch, missing_files_message, offline_reason
from core.data.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx
from core.data.locations import ASSETS_DIR, resolve_data_dir, user_cache_dir, writable_download_root
from core.data.npz import read_npz
from core.errors import DataError

IMAGE_SHAPE = (28, 28)
IDX_FILE_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@dataclass(frozen=True)
class ImageSetSpec:
    name: str
    folder_aliases: tuple[str, ...]  # first one is the canonical folder name
    mirrors: tuple[str, ...]
    md5s: dict  # official .gz archive name -> md5
    class_names: tuple[str, ...]
    n_train: int = 60000
    n_test: int = 10000

    @property
    def folder(self) -> str:
        return self.folder_aliases[0]

    def remote_files(self) -> list[RemoteFile]:
        return [
            RemoteFile(
                name=f"{stem}.gz", urls=tuple(m + f"{stem}.gz" for m in self.mirrors), md5=self.md5s[f"{stem}.gz"]
            )
            for stem in IDX_FILE_STEMS
        ]


# Official download locations and the md5 of the official archives.
IMAGE_SETS: dict[str, ImageSetSpec] = {
    "mnist": ImageSetSpec(
        name="mnist",
        folder_aliases=("mnist", "MNIST", "MNIST/raw", "mnist/raw"),
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
        md5s={
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
        class_names=tuple(str(d) for d in range(10)),
    ),
    "fashion-mnist": ImageSetSpec(
        name="fashion-mnist",
        folder_aliases=("fashion-mnist", "FashionMNIST", "fashion_mnist", "FashionMNIST/raw"),
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        md5s={
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
        },
        class_names=(
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
    ),
    "kmnist": ImageSetSpec(
        name="kmnist",
        folder_aliases=("kmnist", "KMNIST", "KMNIST/raw"),
        mirrors=("http://codh.rois.ac.jp/kmnist/dataset/kmnist/",),
        md5s={
            "train-images-idx3-ubyte.gz": "bdb82020997e1d708af4cf47b453dcf7",
            "train-labels-idx1-ubyte.gz": "e144d726b3acfaa3e44228e80efcd344",
            "t10k-images-idx3-ubyte.gz": "5c965bf0a639b31b8f53240b1b52f4d7",
            "t10k-labels-idx1-ubyte.gz": "7320c461ea6c1c855c0b718fb2a4b134",
        },
        class_names=("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
    ),
}

# Bundled subsets: name -> (asset file, full set they are drawn from).
BUNDLED_SETS = {
    "mnist-small": ("mnist-small.npz", "mnist"),
    "fashion-mnist-small": ("fashion-mnist-small.npz", "fashion-mnist"),
}


def _find_in_folder(folder: Path) -> list[Path] | None:
    """The four IDX files in `folder` (gzipped or not), or None if any is missing."""
    found = []
    for stem in IDX_FILE_STEMS:
        for candidate in (folder / f"{stem}.gz", folder / stem):
            if candidate.is_file():
                found.append(candidate)
                break
        else:
            return None
    return found


def candidate_folders(spec: ImageSetSpec, data_dir: str | Path | None) -> list[Path]:
    """Folders searched for a set's IDX files, in order (data dir first)."""
    folders = []
    root = resolve_data_dir(data_dir)
    if root is not None:
        folders += [root / alias for alias in spec.folder_aliases]
        if root.name in spec.folder_aliases:  # data dir is the dataset's own folder
            folders.append(root)
    folders.append(user_cache_dir() / spec.folder)
    return folders


def locate_idx_files(name: str, data_dir: str | Path | None = None) -> list[Path] | None:
    """Local IDX files of `name` (train images, train labels, test images, test labels)."""
    for folder in candidate_folders(IMAGE_SETS[name], data_dir):
        found = _find_in_folder(folder)
        if found is not None:
            return found
    return None


def _missing_message(spec: ImageSetSpec, data_dir: str | Path | None, reason: str) -> str:
    names = [f"{stem}.gz" for stem in IDX_FILE_STEMS]
    return missing_files_message(
        spec.name,
        spec.folder,
        names,
        resolve_data_dir(data_dir),
        extra=(f"Automatic download failed: {reason}. The files (gzipped or not) come from {spec.mirrors[0]}"),
    )


def _download_idx_files(spec: ImageSetSpec, data_dir: str | Path | None) -> list[Path]:
    reason = offline_reason()
    if reason:
        raise DataError(_missing_message(spec, data_dir, reason))
    folder = writable_download_root(data_dir) / spec.folder
    try:
        return [fetch(remote, folder, what=f"{spec.name} {remote.name}") for remote in spec.remote_files()]
    except DataError as exc:
        if "checksum mismatch" in str(exc):
            raise
        raise DataError(_missing_message(spec, data_dir, str(exc))) from exc


@functools.lru_cache(maxsize=4)
def _read_idx_set(paths: tuple[Path, ...], stamps: tuple) -> tuple:
    """Parsed uint8 arrays and their fingerprint; cached per file version."""
    del stamps  # part of the cache key only
    x_train = read_idx(paths[0], IMAGES_MAGIC)
    y_train = read_idx(paths[1], LABELS_MAGIC)
    x_test = read_idx(paths[2], IMAGES_MAGIC)
    y_test = read_idx(paths[3], LABELS_MAGIC)
    for images, labels, image_path, label_path in (
        (x_train, y_train, paths[0], paths[1]),
        (x_test, y_test, paths[2], paths[3]),
    ):
        if len(images) != len(labels):
            raise DataError(
                f"{image_path} has {len(images)} images but {label_path} has "
                f"{len(labels)} labels; one of them is wrong or corrupt"
            )
    arrays = (x_train, y_train, x_test, y_test)
    for array in arrays:
        array.setflags(write=False)
    return arrays


def read_full_image_arrays(name: str, data_dir: str | Path | None = None) -> tuple:
    """(x_train, y_train, x_test, y_test) uint8 arrays and the source of the full set."""
    spec = IMAGE_SETS[name]
    paths = locate_idx_files(name, data_dir)
    source = "data-dir"
    if paths is None:
        paths = _download_idx_files(spec, data_dir)
        source = "download"
    elif resolve_data_dir(data_dir) is None or user_cache_dir() in paths[0].parents:
        source = "download"  # found in the download cache
    stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    return _read_idx_set(tuple(paths), stamps), source


def _scaled_pixels(images: np.ndarray) -> np.ndarray:
    """uint8 (n, 28, 28) -> float32 (n, 784) in [0, 1]."""
    pixels = images.reshape(len(images), -1).astype(np.float32)
    np.divide(pixels, 255.0, out=pixels)
    return pixels


def _image_dataset(
    name: str, arrays: tuple, source: str, class_names: tuple[str, ...], params: dict | None = None
) -> Dataset:
    x_train, y_train, x_test, y_test = arrays
    # Fingerprint the uint8 arrays: 4x fewer bytes than the float32 ones, same information.
    fingerprint = compute_fingerprint(name, [x_train, y_train, x_test, y_test], params=params)
    dataset = make_dataset(
        name=name,
        task="classification",
        x_train=_scaled_pixels(x_train),
        y_train=y_train,
        x_test=_scaled_pixels(x_test),
        y_test=y_test,
        source=source,
        input_shape=IMAGE_SHAPE,
        n_classes=len(class_names),
        class_names=class_names,
        params=params,
        fingerprint_override=fingerprint,
    )
    return dataset


def load_full_image_set(name: str, data_dir: str | Path | None = None) -> Dataset:
    arrays, source = read_full_image_arrays(name, data_dir)
    return _image_dataset(name, arrays, source, IMAGE_SETS[name].class_names)


def bundled_asset_path(name: str) -> Path:
    return ASSETS_DIR / BUNDLED_SETS[name][0]


def read_bundled_arrays(name: str) -> dict[str, np.ndarray]:
    path = bundled_asset_path(name)
    if not path.is_file():
        raise DataError(
            f"bundled subset {path} is missing; recreate it with "
            f"`python scripts/make_bundled_subsets.py --data-dir <dir with "
            f"{BUNDLED_SETS[name][1]}/>`"
        )
    try:
        return read_npz(path)
    except (OSError, ValueError) as exc:
        raise DataError(
            f"bundled subset {path} is unreadable ({exc}); recreate it with scripts/make_bundled_subsets.py"
        ) from exc


def bundled_sizes(name: str) -> tuple[int | None, int | None]:
    """(n_train, n_test) of a bundled subset from its small label arrays only (read once per file
    version: the dashboard asks on every rerun of the Train page)."""
    path = bundled_asset_path(name)
    try:
        stat = path.stat()
    except OSError:
        return None, None
    return _label_sizes(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _label_sizes(path: str, mtime_ns: int, size: int) -> tuple[int | None, int | None]:
    try:
        labels = read_npz(path, ("y_train", "y_test"))
        return len(labels["y_train"]), len(labels["y_test"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None, None


def load_bundled_image_set(name: str) -> Dataset:
    arrays = read_bundled_arrays(name)
    full_name = BUNDLED_SETS[name][1]
    return _image_dataset(
        name,
        (arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"]),
        "bundled",
        IMAGE_SETS[full_name].class_names,
    )
