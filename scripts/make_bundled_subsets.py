"""Make the bundled MNIST / Fashion-MNIST subsets in assets/ from the full IDX files.

Reproducible: a fixed seed and a stratified draw (class proportions of the
full set), rows kept in their original order. The row indices into the full
set are stored too, so anyone can check a subset against the original.

    python scripts/make_bundled_subsets.py --data-dir DATA --out assets
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from core.data.images import BUNDLED_SETS, read_full_image_arrays
from core.data.sampling import stratified_subset


def make_subset(full_name: str, data_dir: Path, n_train: int, n_test: int, seed: int) -> dict:
    (x_train, y_train, x_test, y_test), _ = read_full_image_arrays(full_name, data_dir)
    rng = np.random.default_rng(seed)
    train_index = stratified_subset(y_train, n_train, rng)
    test_index = stratified_subset(y_test, n_test, rng)
    return {
        "x_train": x_train[train_index],
        "y_train": y_train[train_index],
        "x_test": x_test[test_index],
        "y_test": y_test[test_index],
        "train_index": train_index.astype(np.int32),
        "test_index": test_index.astype(np.int32),
        "seed": np.int64(seed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="folder holding mnist/ and fashion-mnist/ IDX files"
    )
    parser.add_argument("--out", type=Path, default=Path("assets"))
    parser.add_argument("--n-train", type=int, default=10000)
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only", choices=sorted(BUNDLED_SETS), action="append", help="make only this subset (repeatable)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or sorted(BUNDLED_SETS):
        file_name, full_name = BUNDLED_SETS[name]
        arrays = make_subset(full_name, args.data_dir, args.n_train, args.n_test, args.seed)
        path = args.out / file_name
        np.savez_compressed(path, **arrays)
        print(
            f"{path}: {path.stat().st_size / 1e6:.2f} MB ({args.n_train} train + {args.n_test} test from {full_name})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
