"""Dataset names, `load_dataset` and the cheap `list_datasets` overview."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from core.data import images, tabular, toy, uci, user_table
from core.data.dataset import Dataset, DatasetInfo
from core.data.download import offline_reason
from core.data.locations import DATA_DIR_ENV, resolve_data_dir
from core.errors import DataError

DATASET_NAMES: tuple[str, ...] = (
    "toy-sine-gaps",
    "toy-cubic",
    "toy-hetero",
    "two-moons",
    "two-spirals",
    "mnist",
    "fashion-mnist",
    "kmnist",
    "mnist-small",
    "fashion-mnist-small",
    "phoneme",
    "uci-boston",
    "uci-concrete",
    "uci-energy",
    "uci-kin8nm",
    "uci-naval",
    "uci-power",
    "uci-protein",
    "uci-wine",
    "uci-yacht",
    "credit-approval",
    "bank-marketing",
    "adult",
    "dry-beans",
    "pistachio",
    "raisins",
)


def check_name(name: str) -> str:
    """`name` if known, else DataError with close matches and the full list."""
    if name in DATASET_NAMES:
        return name
    if user_table.is_table_name(name):
        user_table.stored_path(name)  # DataError when it is not stored
        return name
    close = difflib.get_close_matches(str(name), DATASET_NAMES, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise DataError(f"unknown dataset {name!r}.{hint} Available: {', '.join(DATASET_NAMES)}")


def load_dataset(
    name: str, *, split: int | None = None, data_dir: str | Path | None = None, seed: int = 0, **params: Any
) -> Dataset:
    """Load dataset `name` (see DATASET_NAMES).

    split: only for the UCI regression sets (0..19, protein 0..4; default 0).
    data_dir: folder with full datasets; defaults to $BNN_DATA_DIR.
    seed: for generated sets and for the 80/20 split of sets without an official one.
    params: generator parameters of the toy sets (n, noise, gaps, ...).
    """
    check_name(name)
    if user_table.is_table_name(name) and split is None:
        return user_table.load_table_dataset(name, seed=seed, **params)
    if split is not None and name not in uci.UCI_REGRESSION:
        raise DataError(
            f"{name} has no numbered splits; split= is only for the UCI regression "
            f"sets ({', '.join(uci.UCI_REGRESSION)})"
        )
    if params and name not in toy.GENERATORS:
        raise DataError(
            f"{name} takes no generator parameters (got {', '.join(params)}); only {', '.join(toy.GENERATORS)} do"
        )
    if name in toy.GENERATORS:
        return toy.GENERATORS[name](seed=seed, **params)
    if name in images.BUNDLED_SETS:
        return images.load_bundled_image_set(name)
    if name in images.IMAGE_SETS:
        return images.load_full_image_set(name, data_dir)
    if name in uci.UCI_REGRESSION:
        return uci.load_uci_regression(name, split=split, data_dir=data_dir)
    return tabular.load_tabular(name, data_dir=data_dir, seed=seed)


def _download_or_unavailable(what_to_put: str) -> tuple[str, str]:
    reason = offline_reason()
    if reason:
        return "unavailable", f"{reason}; {what_to_put}"
    return "download", f"downloaded on first use; or {what_to_put}"


def dataset_info(
    name: str, data_dir: str | Path | None = None, params: dict | None = None, seed: int = 0
) -> DatasetInfo:
    """What is known about `name` from constants and file presence (nothing is parsed; a stored
    table is, with its options `params`, which decide its task and inputs)."""
    check_name(name)
    if user_table.is_table_name(name):
        return user_table.table_info(name, params, seed)
    root = resolve_data_dir(data_dir)
    root_text = str(root) if root else f"${DATA_DIR_ENV}"
    if name in toy.GENERATORS:
        n_train, n_test = toy.GENERATED_SIZES[name]
        regression = name.startswith("toy-")
        return DatasetInfo(
            name,
            "regression" if regression else "classification",
            (1,) if regression else (2,),
            None if regression else 2,
            n_train,
            n_test,
            None,
            "generated",
            "generated from a seed (numpy)",
        )
    if name in images.BUNDLED_SETS:
        path = images.bundled_asset_path(name)
        available = path.is_file()
        n_train, n_test = images.bundled_sizes(name) if available else (None, None)
        return DatasetInfo(
            name,
            "classification",
            images.IMAGE_SHAPE,
            10,
            n_train,
            n_test,
            None,
            "bundled" if available else "unavailable",
            str(path) if available else f"{path} missing: run scripts/make_bundled_subsets.py",
        )
    if name in images.IMAGE_SETS:
        spec = images.IMAGE_SETS[name]
        found = images.locate_idx_files(name, data_dir)
        if found is not None:
            cached = root is None or root not in found[0].parents
            availability, detail = ("download" if cached else "data-dir"), str(found[0].parent)
            if cached:
                detail = f"cached download in {found[0].parent}"
        else:
            availability, detail = _download_or_unavailable(
                f"put {', '.join(s + '.gz' for s in images.IDX_FILE_STEMS)} in {root_text}/{spec.folder}/"
            )
        return DatasetInfo(
            name, "classification", images.IMAGE_SHAPE, 10, spec.n_train, spec.n_test, None, availability, detail
        )
    if name in uci.UCI_REGRESSION:
        spec = uci.UCI_REGRESSION[name]
        folder = uci.uci_data_folder(name, data_dir)
        availability, detail = (
            ("data-dir", str(folder))
            if folder
            else ("unavailable", f"put the split files in {root_text}/{uci.UCI_ROOT}/{spec.folder}/data/")
        )
        return DatasetInfo(
            name, "regression", (spec.n_features,), None, spec.n_train, spec.n_test, spec.n_splits, availability, detail
        )
    spec = tabular.TABULAR_SETS[name]
    found = tabular.locate_tabular_files(name, data_dir)
    if found is not None:
        in_data_dir = root is not None and root in found[0].parents
        availability, detail = ("data-dir" if in_data_dir else "download"), str(found[0])
    else:
        files = ", ".join(alternatives[0] for alternatives in spec.accepted_files)
        availability, detail = _download_or_unavailable(f"put {files} in {root_text}/{name}/")
    return DatasetInfo(
        name, "classification", spec.input_shape, spec.n_classes, spec.n_train, spec.n_test, None, availability, detail
    )


def list_datasets(data_dir: str | Path | None = None) -> list[DatasetInfo]:
    """All datasets with their availability; cheap (file presence only)."""
    return [dataset_info(name, data_dir) for name in DATASET_NAMES]
