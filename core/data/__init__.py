"""Datasets for the Sparse BNN Explorer.

    from core.data import load_dataset
    ds = load_dataset("mnist-small")            # bundled subset, always available
    ds = load_dataset("uci-concrete", split=3)  # needs a data dir ($BNN_DATA_DIR)

Full datasets come from a data directory ($BNN_DATA_DIR or data_dir=) or, when
online, from their official locations with checksum verification.
"""

from core.data.dataset import Dataset, DatasetInfo
from core.data.ood import OOD_SYNTHETIC, load_ood, ood_pairs
from core.data.registry import DATASET_NAMES, list_datasets, load_dataset

__all__ = [
    "DATASET_NAMES",
    "Dataset",
    "DatasetInfo",
    "OOD_SYNTHETIC",
    "list_datasets",
    "load_dataset",
    "load_ood",
    "ood_pairs",
]
